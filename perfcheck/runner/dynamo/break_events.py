"""The graph breaks of one compile, as events: one per break however many records Dynamo wrote of it.

Dynamo reports one break several times: ``explain``'s terse reason, its log's registry entry from
each frame it compiled that reached it (the frame that inlined the breaking code, then each caller
it compiles on its own), a note that it gave a frame up. They are one break, placed at the
innermost line of the reviewed tree that reached it, with the frames that call into it and the
package's line it happened in beneath. Decided from what Dynamo records (the break's stack, the
code it was compiling and that compile's id), never from source text.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from perfcheck.measures import MAX_CALLERS, GraphBreak, NestingBlock, SourceLocation
from perfcheck.runner.dynamo import break_log
from perfcheck.runner.dynamo.break_log import LoggedBreak
from perfcheck.runner.source import nesting
from perfcheck.runner.source.locate import (
    innermost_user_frame,
    named_code_location,
    relative_path,
    to_location,
)


def _at(loc: SourceLocation | None) -> str:
    return f"{loc.path}:{loc.line}" if loc is not None else "?"


def break_type(reason: str) -> str:
    """Dynamo's one-line break type: the first line of its reason in torch >= 2.7."""
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    return first.strip()


# Dynamo's note when it gives up on a frame after a break it cannot resume from; the break itself
# is logged beside it, so the note marks that break rather than being one.
_FELL_BACK = break_log.FELL_BACK
_ENCOUNTERED = "Graph break encountered:"
# Dynamo's record of a break inside a block it cannot resume in (a `try`, a loop around it): it
# compiles the frame up to the last point it could resume from and runs the rest eagerly, and
# explain lists that point, a line of the frame, as a break of its own ("step_unsupported").
_CUT_SHORT = "Encountered graph break that we cannot resume from"


def _wording(reason: str) -> int:
    """How fully a reason says what happened: Dynamo's registry entries ("Explanation:", hints, a
    documentation link) over its terse developer strings (``generic_jump TensorVariable()``)."""
    text = reason.strip()
    if not text:
        return -1
    if text.startswith(_FELL_BACK):
        return 0
    return 2 if "Explanation:" in text else 1


_RESUME = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+$")


def _recompiling_after(lb: LoggedBreak | None, tree: Path) -> SourceLocation | None:
    """Where the earlier break is whose code after it (a resume function) Dynamo was compiling
    again when it took ``lb``; None where it took it on a first compile, or not in a resume function."""
    if lb is None or lb.compiling is None or not lb.recompiling:
        return None
    name, filename, first = lb.compiling
    match = _RESUME.match(name)
    return to_location(traceback.FrameSummary(filename, first, match.group(1)), tree) if match else None


_Event = tuple[str, list[traceback.FrameSummary], str, LoggedBreak | None]


def graph_breaks_of(
    explained: Any,
    tree: Path,
    logged: list[LoggedBreak] | None = None,
    later: list[LoggedBreak] | None = None,
) -> list[GraphBreak]:
    """Every break, one per line of the tree that reached it: ``explain``'s, with its user
    stacks, and those Dynamo logged while compiling that explain does not list (a break at a
    frame's first line, in a generator, ...). Dynamo reports one break up to three times (explain's
    terse reason, its log's registry entry, a note that it fell back to eager); they are one
    break, with the fullest wording. A break inside an installed package is placed at the tree's
    line that called into it, with the package's line as its origin, and Dynamo's second record of
    it, from the package's own frame, is the same break (``_reached_from_the_tree``).

    ``later``: the breaks Dynamo logged on later calls with the same inputs, where it recompiles.
    A line only they reach is a break too, counted once (the recompiles it was taken on are
    counted as recompiles); the lines the first call reached keep its counts. A break Dynamo took
    only while recompiling the code after another break says where that break is
    (``recompiling_after``)."""
    places: dict[tuple[str, int], dict[str, Any]] = {}
    first: list[_Event] = [(r.reason, r.user_stack, "explain", None) for r in explained.break_reasons]
    first += [(lb.reason, lb.stack, "log", lb) for lb in logged or []]
    later_events: list[_Event] = [(lb.reason, lb.stack, "later", lb) for lb in later or []]
    every = first + later_events
    for event in _attached(_stop_points_moved(first, logged or []), every):
        _add(places, event, tree)
    seen = set(places)
    for event in _attached(later_events, every):
        _add(places, event, tree, skip=seen)
    _reached_from_the_tree(places)
    out = []
    for p in places.values():
        reason = p["reason"] or p["note"] or _FELL_BACK
        out.append(
            GraphBreak(
                break_type=break_type(reason),
                reason=reason,
                location=p["location"],
                # explain counts each break it took; the log repeats them, and adds those explain misses
                count=max(p["explain"], p["log"], 1),
                origin=p["origin"],
                fell_back=p["fell_back"],
                recompiling_after=p["after"] if not p["first_compiles"] else None,
                callers=p["callers"],
                gave_up=list(p["gave_up"].values()),
                **_nesting_fields(p["nesting"]),
            )
        )
    return out


def _is_note(reason: str) -> bool:
    return reason.strip().startswith(_FELL_BACK)


def _passes_through(stack: list[traceback.FrameSummary], frame: traceback.FrameSummary) -> bool:
    """Whether ``frame`` is one of the frames ``stack`` passes through on its way to its innermost
    (a caller's line: its file and line, and its function where both records name it)."""
    return any(
        f.filename == frame.filename
        and f.lineno == frame.lineno
        and (f.name == frame.name or "?" in (f.name, frame.name))  # "?": a record that names none
        for f in stack[:-1]
    )


def _attached(events: list[_Event], every: list[_Event]) -> list[_Event]:
    """``events`` with each of Dynamo's notes that it gave up a frame moved to the break it gave
    the frame up for. Dynamo writes the note with the stack of the frame it gives up, which ends at
    that frame's own line: the call into the code that broke (a generator it could not rebuild
    around the break, a ``with`` block it could not resume inside). The break is the record of
    ``every`` whose stack passes through that line on its way further in: the note is that break's
    (Dynamo gave up the frame for it), not a break of its own at the caller's line. A note no
    deeper record passes through is all Dynamo said of its break, and stays where it is."""
    deeper = [e for e in every if e[1] and not _is_note(e[0])]
    out = []
    for reason, stack, source, lb in events:
        if stack and _is_note(reason):
            inner = stack[-1]
            into = next((d for d in deeper if _passes_through(d[1], inner)), None)
            if into is not None:
                stack = into[1]
        out.append((reason, stack, source, lb))
    return out


def _cut_short(lb: LoggedBreak) -> bool:
    return lb.reason.strip().startswith(_CUT_SHORT)


def _stop_points_moved(events: list[_Event], logged: list[LoggedBreak]) -> list[_Event]:
    """``events`` with explain's record of where Dynamo stopped compiling a frame it could not
    resume in moved to the break that stopped it. Explain gives that point, a line of the frame
    (the `try:` the break is inside), and no more; the log says, from the compile of that frame,
    which break it was and where. A line of the frame the log places a break at is a break of its
    own, and stays."""
    stops = [lb for lb in logged if _cut_short(lb) and lb.compiling is not None and lb.stack]
    placed = {(lb.stack[-1].filename, lb.stack[-1].lineno) for lb in logged if lb.stack}
    out = []
    for reason, stack, source, lb in events:
        inner = stack[-1] if stack else None
        if source == "explain" and inner is not None and (inner.filename, inner.lineno) not in placed:
            stop = next(
                (
                    s
                    for s in stops
                    if s.compiling is not None
                    and s.compiling[:2] == (inner.name, inner.filename)
                    and s.compiling[2] <= (inner.lineno or 0)
                ),
                None,
            )
            if stop is not None:
                stack = stop.stack
        out.append((reason, stack, source, lb))
    return out


def _callers(
    stack: list[traceback.FrameSummary], frame: traceback.FrameSummary, tree: Path
) -> list[SourceLocation]:
    """The frames of the tree ``stack`` passes through before ``frame`` (its innermost of the
    tree), outermost first, once each where Dynamo repeats a frame (a generator's caller is shown
    around the builtin that drives it)."""
    out: list[SourceLocation] = []
    seen: set[tuple[str, int]] = set()
    for f in stack:
        if f is frame:
            break
        if relative_path(f.filename, tree) is None or (f.filename, f.lineno or 0) in seen:
            continue
        seen.add((f.filename, f.lineno or 0))
        out.append(to_location(f, tree))
    return out[-MAX_CALLERS:]


def _nesting_fields(blocks: list[nesting.Block] | None) -> dict[str, Any]:
    """GraphBreak's nesting_depth and nesting; nothing where the source could not be read."""
    if blocks is None:
        return {}
    return {
        "nesting_depth": len(blocks),
        "nesting": [NestingBlock(kind=b.kind, line=b.line, code=b.code or None) for b in blocks],  # type: ignore[arg-type]
    }


def _add(
    places: dict[tuple[str, int], dict[str, Any]],
    event: _Event,
    tree: Path,
    skip: AbstractSet[tuple[str, int]] = frozenset(),
) -> None:
    """One record of a break, added to the place of the tree's line that reached it."""
    reason, stack, source, lb = event
    if not stack:
        return
    frame = innermost_user_frame(stack, tree) or stack[-1]
    location = to_location(frame, tree)
    key = (location.path, location.line)
    if key in skip:
        return
    if key not in places:
        places[key] = {
            "location": location,
            "reason": "",
            "note": "",
            "explain": 0,
            "log": 0,
            "later": 0,
            "fell_back": False,
            "origin": None,
            "after": None,
            "first_compiles": 0,
            "callers": [],
            "gave_up": {},
            # The blocks around the line in its own function, read from the side's own file here,
            # in the probe process: the report job never parses the tree's code.
            "nesting": nesting.blocks_in_file(frame.filename, frame.lineno or 0, frame.name),
        }
    place = places[key]
    callers = _callers(stack, frame, tree)
    if len(callers) > len(place["callers"]):  # the fullest stack Dynamo gave of the break
        place["callers"] = callers
    after = _recompiling_after(lb, tree)
    if after is None:
        place["first_compiles"] += 1
    elif place["after"] is None:
        place["after"] = after
    if lb is not None and _cut_short(lb) and lb.compiling is not None:
        # The break itself, which made Dynamo run the rest of the frame it compiled eagerly.
        gave_up = named_code_location(lb.compiling, tree)
        place["gave_up"].setdefault(_at(gave_up), gave_up)
        reason = reason.strip().partition(_ENCOUNTERED)[2].strip() or reason
    if reason.strip().startswith(_FELL_BACK):
        place["fell_back"] = True
        if lb is not None and lb.compiling is not None:
            gave_up = named_code_location(lb.compiling, tree)
            place["gave_up"].setdefault(_at(gave_up), gave_up)
        # The break itself, where the note is all Dynamo logged of it.
        place["note"] = place["note"] or reason.strip().partition(_ENCOUNTERED)[2].strip()
        return
    place[source] += 1
    if _wording(reason) > _wording(place["reason"]):
        place["reason"] = reason.strip()
    innermost = stack[-1]
    if place["origin"] is None and location.in_tree and innermost is not frame:
        place["origin"] = to_location(innermost, tree)


def _reached_from_the_tree(places: dict[tuple[str, int], dict[str, Any]]) -> None:
    """A package's break that a line of the tree reaches is that line's break. Dynamo takes it
    twice: inlining the package's function from the tree's frame, it splits that frame at the call
    (the tree's line, the package's line as its origin); the function then runs as a frame of its
    own, which Dynamo compiles and splits at the package's line again, with no line of the tree
    on its stack. The second is the same break: counted with the first, not beside it."""
    reached: dict[tuple[str, int], dict[str, Any]] = {}
    for p in places.values():
        origin = p["origin"]
        if origin is not None:
            reached.setdefault((origin.path, origin.line), p)
    for key, p in list(places.items()):
        caller = None if p["location"].in_tree else reached.get(key)
        if caller is None:
            continue
        del places[key]
        caller["explain"] += p["explain"]
        caller["log"] += p["log"]
        caller["first_compiles"] += p["first_compiles"]
        if _wording(p["reason"]) > _wording(caller["reason"]):
            caller["reason"] = p["reason"]
        # Not its fell_back: Dynamo giving up the package's frame is not giving up the tree's,
        # which resumed after the call (and whose fell_back takes base's breaks there with it).
