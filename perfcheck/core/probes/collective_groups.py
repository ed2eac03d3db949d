"""Each collective's process group and where in the compiled step it ran, base against head: the
``collective_group_changed`` finding of the ddp and fsdp probes. Pure; torch-free.

Every rank records the collectives of one training step in the order it issued them, from the
process groups' own flight recorder (perfcheck/runner/distributed/comm_groups.py): the op, dtype and size, the
process group (its name, its global ranks, whether it is the default group, WORLD) and where it
ran: inside a compiled graph or in eager code, in which function of the tree. Dynamo compiles the
code after a graph break as a function of its own, named ``torch_dynamo_resume_in_<function>_at_<line>``
after the break's line, so the function a collective ran in says which graph (or which stretch of
eager code between graphs) it belongs to.

Base and head are paired rank by rank: the same op, dtype and size in the same order (the calls in
between may differ). A pair whose group differs is a finding: the collective now runs on the
default group where a named one was used, on fewer ranks, or on another group; where it also moved
to another graph or out of one, the message says where from and where to, and the finding sits at
the break's line (a resumed function's own line) or else at the collective's call site.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from pydantic import Field

from perfcheck.measures import SourceLocation, Strict
from perfcheck.schema import Finding

CATEGORY = "collective_group_changed"

# Dynamo's name for the function it resumes in after a graph break (torch/_dynamo/resume_execution.py):
# "torch_dynamo_resume_in_forward_at_21", nested for a break inside a resumed function.
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<function>\w+)_at_(?P<line>\d+)$")


class CollectiveCall(Strict):
    """One collective (or a run of identical ones, ``count``) a rank issued in one training step."""

    op: str = Field(description="all_reduce, all_gather, broadcast, ...")
    dtype: str
    bytes: int = Field(ge=0, description="the size of its (first) input")
    group: str = Field(description="the process group's name (ProcessGroup.group_name)")
    group_desc: str | None = Field(
        default=None, description="the group's description, where it was given one"
    )
    ranks: list[int] = Field(default=[], description="the group's global ranks")
    world: bool = Field(default=False, description="the default group (WORLD)")
    graph: bool = Field(default=False, description="issued from inside a compiled graph")
    frame: str | None = Field(
        default=None,
        description="the tree's innermost function running (a function Dynamo resumed in after a "
        "break: torch_dynamo_resume_in_<function>_at_<line>); None: none of the tree's (DDP's "
        "hooks in backward, say)",
    )
    frame_at: SourceLocation | None = Field(
        default=None,
        description="that frame as Python reports it: in eager code the call's line; in a compiled "
        "graph the function's first line (for a resumed function: the break's line)",
    )
    site: SourceLocation | None = Field(
        default=None,
        description="the collective's own call in the tree, where known (in a compiled graph: "
        "Dynamo's node for it, or the frame Inductor's output code carries)",
    )
    count: int = Field(default=1, ge=1, description="identical calls in a row")


class RankCalls(Strict):
    """The collectives of one training step of the ranks that issued exactly these, in order."""

    ranks: list[int]
    calls: list[CollectiveCall] = Field(default=[])


def resumed_after(frame: str | None) -> tuple[str, int] | None:
    """The function a resumed function belongs to and the line of the (last) break it resumes
    after: ("forward", 21) for torch_dynamo_resume_in_forward_at_21; None for any other."""
    m = _RESUME.match(frame or "")
    if m is None:
        return None
    function = m["function"]
    while (inner := _RESUME.match(function)) is not None:
        function = inner["function"]
    return function, int(m["line"])


def group_said(c: CollectiveCall) -> str:
    """ "the default group (WORLD, ranks 0, 1)", "group 1 (ranks 0, 1)", "group 2 'tp' (rank 0 only)"."""
    ranks = f"rank {c.ranks[0]} only" if len(c.ranks) == 1 else f"ranks {', '.join(map(str, c.ranks))}"
    if c.world:
        return f"the default group (WORLD, {ranks})"
    desc = f" '{c.group_desc}'" if c.group_desc and c.group_desc not in ("undefined", "default_pg") else ""
    return f"group {c.group}{desc} ({ranks})"


def place_said(c: CollectiveCall) -> str:
    """Where in the step it ran, in a few words."""
    resumed = resumed_after(c.frame)
    path = c.frame_at.path if c.frame_at is not None else "?"
    if resumed is not None:
        function, line = resumed
        where = f"{function} after the graph break at {path}:{line}"
        return f"the compiled graph of {where}" if c.graph else f"eager code of {where}"
    if c.frame is None:
        return (
            "a compiled graph outside the tree's code (backward)"
            if c.graph
            else "torch's own code (no frame of the tree)"
        )
    if c.graph:
        return f"the compiled graph of {c.frame} ({path})"
    return f"eager code of {c.frame}" + (f" at {path}:{c.frame_at.line}" if c.frame_at is not None else "")


def _where(c: CollectiveCall) -> tuple[object, ...]:
    """What says where it ran, for comparing two sides: the graph or not, the function and file,
    and for code Dynamo resumed after a break, the break's source text (never a line number: a
    line added above would move it)."""
    resumed = resumed_after(c.frame)
    at = c.frame_at
    if resumed is None:
        return c.graph, c.frame, at.path if at is not None else None
    return c.graph, resumed[0], at.path if at is not None else None, at.code if at is not None else None


def _group(c: CollectiveCall) -> tuple[bool, tuple[int, ...]]:
    """A group as far as two sides can be compared: names are handed out in creation order, so the
    same group may have another name on head; what it is is WORLD or not, and its ranks."""
    return c.world, tuple(c.ranks)


def _key(c: CollectiveCall) -> tuple[str, str, int]:
    return c.op, c.dtype, c.bytes


def expanded(calls: list[CollectiveCall]) -> list[CollectiveCall]:
    return [c for c in calls for _ in range(c.count)]


def _of_rank(sides: list[RankCalls], rank: int) -> list[CollectiveCall] | None:
    return next((expanded(r.calls) for r in sides if rank in r.ranks), None)


def change_of(b: CollectiveCall, h: CollectiveCall) -> str | None:
    """How head's group differs from base's: "default group", "fewer ranks", "another group"; None: same."""
    if _group(b) == _group(h):
        return None
    if h.world and not b.world:
        return "default group"
    if len(h.ranks) < len(b.ranks):
        return "fewer ranks"
    return "another group"


@dataclass
class GroupChange:
    """One collective whose group changed, as the ranks that issued it saw it (``ranks``)."""

    base: CollectiveCall
    head: CollectiveCall
    change: str
    ranks: list[int] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return _where(self.base) != _where(self.head)

    @property
    def moved_how(self) -> str:
        """ "across a graph break" where it left or entered a compiled graph or code Dynamo resumed
        after a break; "to other code" where it moved otherwise; "" where it stayed."""
        if not self.moved:
            return ""
        b, h = self.base, self.head
        if b.graph != h.graph or resumed_after(b.frame) or resumed_after(h.frame):
            return "across a graph break"
        return "to other code"

    @property
    def location(self) -> SourceLocation | None:
        """The break's line where the collective moved into code Dynamo resumed after a break
        (the resumed function's own line, exact), else the collective's call site where known,
        else where its frame was (in eager code, that is the call)."""
        h = self.head
        resumed = resumed_after(h.frame)
        if self.moved and resumed is not None and h.frame_at is not None:
            return h.frame_at.model_copy(update={"function": resumed[0]})
        if h.site is not None:
            return h.site
        return h.frame_at if not h.graph else None

    def signature(self) -> tuple[object, ...]:
        b, h = self.base, self.head
        return (*_key(b), _group(b), _group(h), place_said(b), place_said(h), self.change)


def group_changes(base: list[RankCalls], head: list[RankCalls]) -> list[GroupChange]:
    """The collectives whose process group differs between base and head, paired rank by rank (the
    same op, dtype and size in the same order: what was added or removed between them is the
    collective drift's), each once with every rank that saw it so."""
    ranks = sorted({r for side in (base, head) for rc in side for r in rc.ranks})
    found: dict[tuple[object, ...], GroupChange] = {}
    for rank in ranks:
        b, h = _of_rank(base, rank), _of_rank(head, rank)
        if not b or not h:
            continue
        matcher = difflib.SequenceMatcher(a=[_key(c) for c in b], b=[_key(c) for c in h], autojunk=False)
        for tag, i1, i2, j1, _ in matcher.get_opcodes():
            if tag != "equal":
                continue
            for k in range(i2 - i1):
                bc, hc = b[i1 + k], h[j1 + k]
                change = change_of(bc, hc)
                if change is None:
                    continue
                seen = GroupChange(bc, hc, change)
                kept = found.setdefault(seen.signature(), seen)
                if rank not in kept.ranks:
                    kept.ranks.append(rank)
    return list(found.values())


def _size(c: CollectiveCall) -> str:
    return f"{c.bytes:,} B {c.dtype}" if c.bytes else "an unknown size"


def _one(change: GroupChange) -> tuple[object, ...]:
    """One change of a collective's group, whichever variants saw it and wherever each ran it."""
    return (*_key(change.base), _group(change.base), _group(change.head), change.change)


def group_findings(
    workload: str, probe: str, pairs: list[tuple[str, list[RankCalls], list[RankCalls]]]
) -> list[Finding]:
    """One finding per collective whose group changed, the variants (``pairs``: name, base's
    calls, head's) where it did named together, with where each ran it. It sits at the break's
    line where a variant's collective moved into code Dynamo resumed after that break, else at
    the collective's call site. A side that recorded no calls (a record written before perfcheck
    recorded them, or a torch without the flight recorder) is not compared."""
    seen: dict[tuple[object, ...], list[tuple[str, GroupChange]]] = {}
    for name, b, h in pairs:
        if not b or not h:
            continue
        for change in group_changes(b, h):
            seen.setdefault(_one(change), []).append((name, change))
    out = []
    for found in seen.values():
        # Where a break moved it, that break says most; else the first variant's call site.
        at = next((c for _, c in found if c.moved_how == "across a graph break" and c.location), None)
        first = at or next((c for _, c in found if c.location), found[0][1])
        was, now = first.base, first.head
        variants = list(dict.fromkeys(name for name, _ in found))
        moves: dict[tuple[str, str], list[str]] = {}
        for name, c in found:
            if c.moved:
                moves.setdefault((place_said(c.base), place_said(c.head)), []).append(name)
        ranks = sorted({r for _, c in found for r in c.ranks})
        fewer = ""
        if first.change == "fewer ranks":
            fewer = f": {len(now.ranks)} of base's {len(was.ranks)} ranks"
        moved = "".join(f"; in {', '.join(vs)} it moved from {b} to {h}" for (b, h), vs in moves.items())
        out.append(
            Finding(
                category=CATEGORY,
                severity="error",
                workload=workload,
                probe=probe,
                location=first.location,
                message=f"{now.op} of {_size(now)} now runs on {group_said(now)}, where base ran it on "
                f"{group_said(was)}{fewer} ({', '.join(variants)})" + (moved or f", in {place_said(now)}"),
                evidence={
                    "variants": ", ".join(variants),
                    "op": now.op,
                    "dtype": now.dtype,
                    "bytes": now.bytes,
                    "change": first.change,
                    "moved": first.moved_how,
                    "base_group": group_said(was),
                    "head_group": group_said(now),
                    "base_place": place_said(was),
                    "head_place": place_said(now),
                    "moves": "\n".join(
                        f"{', '.join(names)}: {before} → {after}" for (before, after), names in moves.items()
                    ),
                    "ranks": ranks,
                    "summary": f"{now.op} on {group_said(now)}, was {group_said(was)}",
                },
            )
        )
    return out
