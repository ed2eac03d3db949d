"""The compile probe, reviewed: graph breaks matched by their source, recompiles by their cause,
cold compile against its budget. Structural findings are exact: a diff is a diff."""

from __future__ import annotations

import re
from collections import Counter
from typing import Literal

from perfcheck.core import break_depth, compile_latency, deltas
from perfcheck.core.markdown import Figure
from perfcheck.core.probes.compile_accepted import accepts_break
from perfcheck.core.probes.kind import (
    Cell,
    Column,
    Compared,
    ProbeKind,
    Row,
    entries_beside,
    rejected_finding,
    settled,
    side_pair,
    status_cell,
    status_or,
)
from perfcheck.measures import (
    CompileLatencyChange,
    CompileMetrics,
    GraphBreak,
    Recompile,
    RecompileLimitHit,
    SourceLocation,
)
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import COMPILE_RUNS_MAX, SettingsView


def _break_key(gb: GraphBreak) -> tuple[str, str, str]:
    # Keyed by the place, not by Dynamo's wording (which differs by where it reports the break from):
    # its file, its function's qualified name (two sibling classes can read alike) and the source
    # text, not the line number: a PR that adds lines above an old break moves it without adding one.
    loc = gb.location
    return (loc.path, loc.function or "", loc.code or str(loc.line)) if loc else ("?", "", gb.break_type)


def _resume_base(function: str) -> str:
    match = re.match(r"torch_dynamo_resume_in_(\w+?)_at_\d+$", function)
    return match.group(1) if match else function


def normalize_guard(reason: str) -> str:
    """A recompile reason with its values and file locations blanked, so the same cause compares
    equal: base and head live in different trees, and a PR may move the line."""
    text = re.sub(r"\S*\.py:\d+", "<file>", reason)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\d+", "N", text)


def guard_expression(reason: str) -> str:
    """The failed guard itself (``self.calls == 1``), without the source comment Dynamo appends
    (``  # self.calls += 1  # model.py:13 in forward (HINT: ...)``), which names each frame."""
    first = (reason.strip().splitlines() or [""])[0]
    return first.split("  #")[0].strip() or first


def _compile_findings(
    wl: str, base: CompileMetrics, head: CompileMetrics, config: SettingsView
) -> list[Finding]:
    out: list[Finding] = []
    base_breaks, head_breaks = Counter[tuple[str, str, str]](), Counter[tuple[str, str, str]]()
    for counter, breaks in ((base_breaks, base.graph_breaks), (head_breaks, head.graph_breaks)):
        for b in breaks:
            counter[_break_key(b)] += b.count
    added, removed = head_breaks - base_breaks, base_breaks - head_breaks
    fallout = _fallout_keys(head.graph_breaks, added)
    accepted = _accepted_keys(wl, head.graph_breaks, added, config)
    over_budget = (
        sum(n for key, n in added.items() if key not in fallout and key not in accepted)
        > config.budgets.max_new_graph_breaks
    )
    graphs = [base.graph_count, head.graph_count]
    # Each on the side that has it: a removed break is base's (its verify commands show base).
    severity = "error" if over_budget else "warning"
    changes = (
        ("graph_break_added", severity, head.graph_breaks, added, "splits", "head"),
        ("graph_break_removed", "info", base.graph_breaks, removed, "no longer splits", "base"),
    )
    for category, grade, breaks, delta, verb, side in changes:
        shown: set[tuple[str, str, str]] = set()
        for gb in breaks:
            key = _break_key(gb)
            if delta[key] and key not in shown:
                shown.add(key)
                out.append(
                    Finding(
                        category=category,
                        severity=grade,  # type: ignore[arg-type]
                        workload=wl,
                        probe="compile",
                        location=gb.location,
                        message=f"Dynamo {verb} the graph here: {gb.break_type}"
                        + _nesting_words(gb)
                        + _origin_words(gb),
                        evidence={
                            "side": side,
                            "break_type": gb.break_type,
                            "reason": gb.reason,
                            "count": delta[key],
                            "graphs": graphs,
                            **({"origin": f"{gb.origin.path}:{gb.origin.line}"} if gb.origin else {}),
                            **({"fell_back": True} if gb.fell_back else {}),
                            **(
                                {"recompiling_after": _at(gb.recompiling_after)}
                                if gb.recompiling_after
                                else {}
                            ),
                            **_nesting_evidence(gb),
                        },
                    )
                )
    return _with_recompiles(wl, base, head, _under_their_breaks(_gone_with_the_frame(out)))


def _accepted_keys(
    wl: str, breaks: list[GraphBreak], added: Counter[tuple[str, str, str]], config: SettingsView
) -> set[tuple[str, str, str]]:
    """The new breaks an ack's `break:` accepts (compile_accepted.py), each judged
    as its finding shows it (the first record of its line): not counted against
    budgets.max_new_graph_breaks, so that the workload's other new breaks are judged as if it were
    not there (its finding is acknowledged where the review's acks are applied, perfcheck/bot/acks.py)."""
    out: set[tuple[str, str, str]] = set()
    seen: set[tuple[str, str, str]] = set()
    for gb in breaks:
        key = _break_key(gb)
        if key in seen:
            continue
        seen.add(key)
        if added[key] and accepts_break(config.acks, wl, gb):
            out.add(key)
    return out


def _nesting_words(gb: GraphBreak) -> str:
    """`` (inside 2 nested blocks: for › if)`` where the break is inside blocks of its function."""
    said = break_depth.words(gb.nesting_depth, [b.kind for b in gb.nesting])
    return f" ({said})" if said else ""


def _nesting_evidence(gb: GraphBreak) -> dict[str, object]:
    """The break's nesting depth (0: its function's top level) and, inside blocks, their kinds
    and headers, outermost first; nothing where the probe could not read the source."""
    if gb.nesting_depth is None:
        return {}
    if not gb.nesting:
        return {"nesting_depth": 0}
    path = gb.location.path if gb.location else "?"
    return {
        "nesting_depth": gb.nesting_depth,
        "nesting": " › ".join(b.kind for b in gb.nesting),
        "nesting_blocks": "\n".join(
            f"{path}:{b.line}  {'  ' * i}{b.code or b.kind}" for i, b in enumerate(gb.nesting)
        ),
    }


def _at(loc: SourceLocation) -> str:
    return f"{loc.path}:{loc.line}"


def _fallout_keys(
    breaks: list[GraphBreak], added: Counter[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """The new breaks Dynamo took only while recompiling the code after another new break (its
    resume function, for a value that crossed that break): that break's, not counted beside it."""
    new_at = {_at(gb.location) for gb in breaks if gb.location and added[_break_key(gb)]}
    return {
        _break_key(gb)
        for gb in breaks
        if gb.recompiling_after is not None and added[_break_key(gb)] and _at(gb.recompiling_after) in new_at
    }


def _under_their_breaks(findings: list[Finding]) -> list[Finding]:
    """Each new break Dynamo took only while recompiling the code after another new break, moved
    under that break (followed to the first that is no one's fallout), said there, not counted:
    the code after a break is a function of its own (a resume function) whose arguments are the
    values that crossed the break, and a recompile of it for another value (a Python int turned
    dynamic) can break where the whole function, compiled as one, did not."""
    added = {_at(f.location): f for f in findings if f.category == "graph_break_added" and f.location}

    def root(f: Finding) -> Finding | None:
        seen = {id(f)}
        cause = added.get(str(f.evidence.get("recompiling_after", "")))
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            further = added.get(str(cause.evidence.get("recompiling_after", "")))
            if further is None:
                return cause
            cause = further
        return None

    under: dict[int, list[Finding]] = {}
    for f in findings:
        cause = root(f) if f.category == "graph_break_added" else None
        if cause is not None:
            under.setdefault(id(cause), []).append(f)
    if not under:
        return findings
    folded = {id(f) for follow in under.values() for f in follow}
    out = []
    for f in findings:
        if id(f) in folded:
            continue
        follow = under.get(id(f), [])
        if follow:
            n = len(follow)
            follows = "breaks that follow" if n > 1 else "break that follows"
            f = f.model_copy(
                update={
                    "message": f"{f.message} (and {n} {follows} from it, not counted)",
                    "evidence": {
                        **f.evidence,
                        "fallout_breaks": "\n".join(
                            f"{_at(g.location)}: {g.message.removeprefix('Dynamo splits the graph here: ')}"
                            f" (while recompiling the code after {g.evidence['recompiling_after']})"
                            for g in follow
                            if g.location
                        ),
                    },
                }
            )
        out.append(f)
    return out


def _gone_with_the_frame(findings: list[Finding]) -> list[Finding]:
    """A base break that is gone because a new break made Dynamo give up on its frame (it runs
    eagerly now, so nothing there is compiled to break): not a removed break, but part of the
    new one, said under it. Matched by file: Dynamo's note does not name the frame it gave up."""
    fell = [f for f in findings if f.category == "graph_break_added" and f.evidence.get("fell_back")]
    if not fell:
        return findings
    out: list[Finding] = []
    gone: dict[int, list[Finding]] = {}
    for f in findings:
        cause = next((c for c in fell if f.category == "graph_break_removed" and _same_file(c, f)), None)
        if cause is None:
            out.append(f)
        else:
            gone.setdefault(id(cause), []).append(f)
    for i, f in enumerate(out):
        lost = gone.get(id(f), [])
        if lost:
            places = ", ".join(f"{x.location.path}:{x.location.line}" for x in lost if x.location)
            out[i] = f.model_copy(
                update={
                    "message": f"{f.message}; base's break{'s' if len(lost) > 1 else ''} at {places} "
                    "is no longer compiled",
                    "evidence": {**f.evidence, "no_longer_compiled": places},
                }
            )
    return out


def _same_file(a: Finding, b: Finding) -> bool:
    return a.location is not None and b.location is not None and a.location.path == b.location.path


def _origin_words(gb: GraphBreak) -> str:
    words = f" (in {gb.origin.path}:{gb.origin.line}, reached from here)" if gb.origin else ""
    if gb.fell_back:
        words += "; Dynamo could not resume after it and runs the frame it was compiling eagerly"
    return words


def _function(r: Recompile) -> str:
    """The user's function a recompile recompiles: its qualified name where the probe read it from
    the code object (``Used.forward``, for the code after a break too), else its bare name."""
    return r.location.function if r.location and r.location.function else _resume_base(r.function)


def _recompile_key(r: Recompile) -> tuple[str, str]:
    return (_function(r), normalize_guard(r.reason))


def _is_resume(r: Recompile) -> bool:
    return _resume_base(r.function) != r.function


def _same_place(a: SourceLocation | None, b: SourceLocation | None) -> bool:
    # In one function where both name theirs, then by source text where both have it: the trees
    # differ, and a PR may move the line.
    if a is None or b is None or a.path != b.path:
        return False
    if a.function and b.function and a.function != b.function:
        return False
    return a.code == b.code if a.code and b.code else a.line == b.line


def _cause(r: Recompile, added: list[Finding], base: CompileMetrics) -> Finding | None:
    """The new break a recompile exists because of: it recompiles a resume function, the code
    after a break, and base has no break and no resume function at that place."""
    if not _is_resume(r) or not added:
        return None
    exact = next((f for f in added if _same_place(f.location, r.location)), None)
    if exact is not None:
        return exact
    at_base = [b.location for b in base.graph_breaks] + [x.location for x in base.recompiles if _is_resume(x)]
    if any(_same_place(loc, r.location) for loc in at_base):
        return None
    # Dynamo resumes in the frame that called into the break: the same file first.
    path = r.location.path if r.location else None
    return next((f for f in added if f.location and f.location.path == path), added[0])


def _place(r: Recompile) -> str:
    loc = r.location
    return f"{r.function} ({loc.path}:{loc.line})" if loc else r.function


def _frame_key(r: Recompile) -> str | None:
    """The recompiled frame as CompileMetrics.frames names it (``function path:first line``)."""
    return f"{r.function} {r.location.path}:{r.location.line}" if r.location else None


def _fallout_of(r: Recompile, added: list[Finding], base: CompileMetrics) -> Finding | None:
    """The new break a recompile follows from: it recompiles a resume function after the break
    (``_cause``), or a frame that only exists because of a break, one base compiled inside a
    bigger graph and head compiles on its own (an installed package's function, a block's
    forward). Base's frames are known from results that record them."""
    cause = _cause(r, added, base)
    if cause is not None or not added or not base.frames:
        return cause
    key = _frame_key(r)
    if key is None or key in base.frames:
        return None
    path = r.location.path if r.location else None
    return next((f for f in added if f.location and f.location.path == path), added[0])


def _with_recompiles(
    wl: str, base: CompileMetrics, head: CompileMetrics, breaks: list[Finding]
) -> list[Finding]:
    """The break findings, each with the recompiles that exist only because of it (shown under
    it, not counted again), then one finding per frame that hits a recompile limit base does not
    (with the recompiles of its guard that led there), then one finding per other new guard cause,
    naming every frame it recompiles."""
    known = {_recompile_key(r) for r in base.recompiles}
    added = [f for f in breaks if f.category == "graph_break_added"]
    folded: dict[int, list[Recompile]] = {}
    by_guard: dict[str, list[Recompile]] = {}
    for r in head.recompiles:
        if _recompile_key(r) in known:
            continue
        cause = _fallout_of(r, added, base)
        if cause is not None:
            folded.setdefault(id(cause), []).append(r)
        else:
            by_guard.setdefault(normalize_guard(guard_expression(r.reason)), []).append(r)
    out = []
    for f in breaks:
        side_effects = folded.get(id(f), [])
        if side_effects:
            n = len(side_effects)
            f = f.model_copy(
                update={
                    "message": f"{f.message} (and {n} "
                    f"{'recompiles that follow' if n > 1 else 'recompile that follows'} from it)",
                    "evidence": {
                        **f.evidence,
                        "resume_recompiles": "\n".join(
                            f"{_place(r)}: {guard_expression(r.reason)}" for r in side_effects
                        ),
                    },
                }
            )
        out.append(f)
    hits = [
        h for h in head.recompile_limit_hits if not any(_same_hit(h, b) for b in base.recompile_limit_hits)
    ]
    limited = []
    for hit in hits:
        guard = normalize_guard(guard_expression(hit.reason))
        group = by_guard.pop(guard, [])
        led = [r for r in group if _resume_base(r.function) == _resume_base(hit.function)]
        if len(led) < len(group):  # the guard's recompiles of other frames stay a finding of their own
            by_guard[guard] = [r for r in group if r not in led]
        limited.append(_limit_finding(wl, base, head, hit, led))
    return out + limited + [_recompile_finding(wl, base, head, group) for group in by_guard.values()]


def _same_hit(a: RecompileLimitHit, b: RecompileLimitHit) -> bool:
    """The same frame hitting the same limit, on either side (by the frame's source text)."""
    return (
        a.limit == b.limit
        and _resume_base(a.function) == _resume_base(b.function)
        and _same_place(a.location, b.location)
    )


def _limit_finding(
    wl: str, base: CompileMetrics, head: CompileMetrics, hit: RecompileLimitHit, led: list[Recompile]
) -> Finding:
    """A frame that recompiled until a recompile limit stopped it: Dynamo compiles it no more, and
    a call its cached entries' guards do not accept runs eagerly, for the rest of the process (a
    cliff: every step after it, where the guard keeps failing). Placed where the tree makes the
    guarded value, when known; the recompiles of that guard that led there are shown under it."""
    guard = guard_expression(hit.reason)
    name = _resume_base(hit.function)
    frame = f"{hit.function} {hit.location.path}:{hit.location.line}" if hit.location else None
    entries = head.cache_entries.get(frame) if frame else None
    took = (
        f" after {hit.compiles} compile{'s' if hit.compiles != 1 else ''}" if hit.compiles is not None else ""
    )
    held = (
        f"its {entries} compiled entr{'ies' if entries != 1 else 'y'}" if entries else "its compiled entries"
    )
    message = (
        f"`{name}` hit the recompile limit torch._dynamo.config.{hit.limit} ({hit.value}){took}: "
        f"`{guard}` kept failing; Dynamo compiles it no more, so the frame now runs eagerly on every "
        f"call {held} do not accept"
    )
    if hit.made_at is not None and hit.made_at.in_tree:
        message += f"; the guarded value is made at {hit.made_at.path}:{hit.made_at.line}"
    return Finding(
        category="recompile_limit_hit",
        severity="error",
        workload=wl,
        probe="compile",
        location=hit.made_at if hit.made_at is not None and hit.made_at.in_tree else hit.location,
        message=message,
        evidence={
            "function": hit.function,
            "limit": hit.limit,
            "value": hit.value,
            **({"compiles": hit.compiles} if hit.compiles is not None else {}),
            **({"cache_entries": entries} if entries else {}),
            "reason": hit.reason,
            "recompiles": [base.recompile_count, head.recompile_count],
            **({"recompiled_at": _at(hit.location)} if hit.location else {}),
            **(
                {"led_there": "\n".join(f"{_place(r)}: {guard_expression(r.reason)}" for r in led)}
                if led
                else {}
            ),
        },
    )


def _recompile_finding(
    wl: str, base: CompileMetrics, head: CompileMetrics, group: list[Recompile]
) -> Finding:
    """One new guard cause, judged by what it costs: a regression where head recompiles more than
    base, or on the same inputs again (every step pays it); a warning where it only replaces
    recompiles base had. Placed where the tree makes the guarded value, when known."""
    first = next((r for r in group if r.location is not None and r.location.in_tree), group[0])
    frames = list(dict.fromkeys(_place(r) for r in group))
    more = f" and {len(frames) - 1} more frame{'s' if len(frames) > 2 else ''}" if len(frames) > 1 else ""
    every_step = any(r.every_step for r in group)
    costs_more = head.recompile_count > base.recompile_count or every_step
    made = next((r.made_at for r in group if r.made_at is not None and r.made_at.in_tree), None)
    guard = guard_expression(first.reason)
    message = f"new recompilation of `{_function(first)}`{more}: `{guard}` failed"
    if every_step:
        message += " on the same inputs again (every step pays it)"
    elif not costs_more:
        message += (
            f"; head recompiles no more than base ({head.recompile_count} against {base.recompile_count}): "
            "a different cause, not a new cost"
        )
    if made is not None:
        message += f"; the guarded value is made at {made.path}:{made.line}"
    return Finding(
        category="recompile",
        severity="error" if costs_more else "warning",
        workload=wl,
        probe="compile",
        location=made or first.location,
        message=message,
        evidence={
            "function": first.function,
            "reason": first.reason,
            "frames": "\n".join(frames),
            "frame_count": len(frames),
            "recompiles": [base.recompile_count, head.recompile_count],
            **({"recompiled_at": f"{first.location.path}:{first.location.line}"} if first.location else {}),
        },
    )


STAGE_LABELS = {
    "dynamo": "Dynamo",
    "aot_autograd": "AOTAutograd",
    "inductor": "Inductor",
    "other": "other (guards, the first step)",
}


def latency_figure(value: float, measure: str) -> Figure:
    """An instruction count in millions (``372.4 M instr``) or billions, or seconds."""
    if measure == "callgrind":
        return Figure(value / 1e9, "G instr", 2) if value >= 1e10 else Figure(value / 1e6, "M instr", 1)
    return Figure(value, "s", 2)


def _stage_words(change: CompileLatencyChange) -> str:
    top = compile_latency.grew(change)
    if top is None:
        return ""
    name = STAGE_LABELS.get(top.stage, top.stage)
    return (
        f"; {name} grew most: {latency_figure(top.base, change.measure)} → "
        f"{latency_figure(top.head, change.measure)} ({deltas.relative(top.base, top.head)})"
    )


def _relative_finding(wl: str, change: CompileLatencyChange, runs: int) -> Finding | None:
    """Against the relative budget: the whole interval beyond it, an error; a significant slowdown
    within it, a warning. Undecided (the interval straddles it) is never silent: a warning where
    the estimate is beyond the budget or the slowdown significant, else an info note, each saying
    what would decide it (``runs``: the compiles a side makes now, compile.runs)."""
    if change.verdict == "pass" and not change.warn:
        return None
    budget = f"{change.budget_pct:g} % budget"
    severity: Literal["error", "warning", "info"] = "warning"
    if change.verdict == "fail":
        severity, against = "error", f"beyond the {budget}"
    elif change.verdict == "pass":
        against = f"significant, within the {budget}"
    else:
        beyond = change.change_pct > change.budget_pct
        severity = "warning" if beyond or change.warn else "info"
        against = (
            f"undecided against the {budget}: the estimate is {'beyond' if beyond else 'within'} it "
            f"and the interval reaches {'below' if beyond else 'beyond'} it; {_what_decides(change, runs)}"
        )
    what = "instructions" if change.measure == "callgrind" else "wall-clock time"
    top = compile_latency.grew(change)
    return Finding(
        category="compile_latency_regression",
        severity=severity,
        workload=wl,
        probe="compile",
        message=f"cache-cold compile {what} {latency_figure(change.base, change.measure)} → "
        f"{latency_figure(change.head, change.measure)}, "
        f"{deltas.interval(change.change_pct, change.low_pct, change.high_pct)} "
        f"({change.confidence:.0%} CI, {change.pairs} pairs of compiles), {against}{_stage_words(change)}",
        evidence={
            "measure": change.measure,
            "base": change.base,
            "head": change.head,
            "change_pct": round(change.change_pct, 3),
            "p_value": change.p_value,
            "budget_pct": change.budget_pct,
            "stage": top.stage if top else "",
            "stages": {st.stage: [st.base, st.head] for st in change.stages},
            "undecided": change.verdict == "inconclusive",
        },
    )


def _what_decides(change: CompileLatencyChange, runs: int) -> str:
    """What would settle an undecided compile latency: more pairs where compile.runs allows them,
    else instructions, which do not scatter with the machine's load."""
    need = compile_latency.pairs_to_decide(change)
    if need is None:
        return "the estimate sits on the budget, where no number of pairs decides"
    pairs = f"about {need} pairs would decide it (compile.runs: {need}, now {runs})"
    if change.measure == "callgrind":
        return pairs
    counted = "instructions (compile.measure: callgrind) do not scatter with the machine's load"
    if need <= COMPILE_RUNS_MAX:
        return f"{pairs}, or {counted}"
    return f"more pairs than compile.runs allows ({COMPILE_RUNS_MAX}) would be needed; {counted}"


def _absolute_finding(
    wl: str,
    base: CompileMetrics,
    head: CompileMetrics,
    config: SettingsView,
    change: CompileLatencyChange | None,
) -> Finding | None:
    """The workload's own seconds, against a process's first compile: what a user waits for."""
    limit = config.budgets.compile_latency_s.get(wl)
    if limit is None or head.cold_compile_s <= limit:
        return None
    return Finding(
        category="compile_latency_regression",
        severity="error",
        workload=wl,
        probe="compile",
        message=f"cold compile {base.cold_compile_s:.1f} → {head.cold_compile_s:.1f} s, over the "
        f"{limit:g} s budget{_stage_words(change) if change else ''}",
        evidence={
            "base_s": base.cold_compile_s,
            "head_s": head.cold_compile_s,
            "budget_s": limit,
            "breakdown_base": base.compile_breakdown_s,
            "breakdown_head": head.compile_breakdown_s,
        },
    )


def _compile_latency(wl: str, base: CompileMetrics, head: CompileMetrics, config: SettingsView) -> Compared:
    change = None
    findings: list[Finding] = []
    inconclusive: list[str] = []
    if compile_latency.unmeasured(base.latency, head.latency) is None:
        assert base.latency is not None and head.latency is not None
        change = compile_latency.decide(base.latency, head.latency, config.budgets, config.timing)
        relative = _relative_finding(wl, change, config.compile.runs)
        findings += [relative] if relative else []
        # Only an instruction count's undecided interval holds the review's verdict back: it is
        # deterministic to ±0.3 %, so straddling the budget means a change near it. Cache-cold
        # compiles by wall clock scatter by ±20 % between fresh processes (H200, ResNet-18: 5.0 to
        # 7.5 s), so three pairs rarely decide, and a gate that leaves every identical tree
        # inconclusive gets switched off; the row says undecided, a significant change still
        # warns and an interval wholly over the budget still fails.
        if change.verdict == "inconclusive" and change.measure == "callgrind":
            inconclusive.append(
                f"{wl}/compile: compile latency "
                f"{deltas.interval(change.change_pct, change.low_pct, change.high_pct)} over "
                f"{change.pairs} pairs straddles the {change.budget_pct:g} % budget "
                "(more compile.runs narrow it)"
            )
    absolute = _absolute_finding(wl, base, head, config, change)
    findings += [absolute] if absolute and not findings else []
    return Compared(findings, inconclusive, compile_latency=change)


def _compile_failed(wl: str, base: ProbeResult, head: ProbeResult) -> Finding | None:
    """torch.compile raising inside torch on the head's code: not a crashed probe, a finding."""
    h = probe_metrics(head, CompileMetrics)
    if head.status != "failed" or h is None:
        return None
    return rejected_finding("compile_failed", wl, "compile", "torch.compile", h, base)


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    failed = _compile_failed(wl, base, head)
    if failed is not None:
        return Compared([failed])
    b, h = probe_metrics(base, CompileMetrics), probe_metrics(head, CompileMetrics)
    if b is None or h is None or "failed" in (base.status, head.status):
        return Compared()
    latency = _compile_latency(wl, b, h, config)
    return Compared(
        _compile_findings(wl, b, h, config) + latency.findings,
        latency.inconclusive,
        compile_latency=latency.compile_latency,
    )


def rows(bc: ProbeResult | None, hc: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    rows: list[Row] = []
    if bc or hc:
        bm, hm = probe_metrics(bc, CompileMetrics), probe_metrics(hc, CompileMetrics)

        def cell(r: ProbeResult | None, value: Cell | None) -> Cell:
            return status_cell(r) or (value if value is not None else "—")

        rows.append(
            Row(
                "graphs / breaks",
                cell(bc, f"{bm.graph_count} / {bm.graph_break_count}" if bm else None),
                cell(hc, f"{hm.graph_count} / {hm.graph_break_count}" if hm else None),
                deltas.count(bm.graph_break_count, hm.graph_break_count, "breaks") if bm and hm else "",
            )
        )
        rows.append(
            Row(
                "recompiles",
                cell(bc, str(bm.recompile_count) if bm else None),
                cell(hc, str(hm.recompile_count) if hm else None),
                deltas.count(bm.recompile_count, hm.recompile_count) if bm and hm else "",
            )
        )
        if (bm and bm.second_batch) or (hm and hm.second_batch):
            # Recompiles are counted without the call with another batch: say so, per side.
            rows.append(
                Row(
                    "recompiles on another batch",
                    cell(bc, (bm.second_batch or "checked") if bm else None),
                    cell(hc, (hm.second_batch or "checked") if hm else None),
                    "",
                )
            )
        if (bm and bm.cache_entries) or (hm and hm.cache_entries):
            rows.append(
                Row(
                    "cache entries per frame (most)",
                    cell(bc, _entries_cell(bm) if bm else None),
                    cell(hc, _entries_cell(hm) if hm else None),
                    deltas.count(_most_entries(bm), _most_entries(hm)) if bm and hm else "",
                )
            )
        either = hm or bm
        rows += _latency_rows(bm, hm, wl.compile_latency)
        first = "first compile of a process" if wl.compile_latency else "cold compile"
        role = " · context" if wl.compile_latency else ""
        warm = bool(hm and hm.from_base_cache)
        cold = {side: Figure(m.cold_compile_s, "s", 2) for side, m in (("base", bm), ("head", hm)) if m}
        rows.append(
            Row(
                # One cold compile per side: the Δ is a single measurement's, not an estimate.
                f"{first} ({either.backend}, one run each){role}" if either else f"{first} (one run each)",
                cell(bc, cold.get("base")),
                cell(hc, f"{cold['head']} (from base's cache)" if warm else cold.get("head")),
                # Head read what base had compiled: no cold compile of head's to compare.
                deltas.relative(bm.cold_compile_s, hm.cold_compile_s, digits=0, missing="")
                if bm and hm and not warm
                else "",
            )
        )
    return settled(rows, bc, hc)


def _most_entries(m: CompileMetrics) -> int:
    return max(m.cache_entries.values(), default=0)


def _entries_cell(m: CompileMetrics) -> str:
    """The frame holding the most compiled entries in Dynamo's cache, how many frames hold any,
    and the frames that hit a recompile limit (Dynamo compiles them no more)."""
    if not m.cache_entries:
        return "—"
    frame, most = min(m.cache_entries.items(), key=lambda kv: (-kv[1], kv[0]))
    function, _, at = frame.rpartition(" ")
    text = f"{most} · {function} ({at})" if function else f"{most} · {frame}"
    if len(m.cache_entries) > 1:
        text += f" · {len(m.cache_entries)} frames"
    hit = list(dict.fromkeys(_resume_base(h.function) for h in m.recompile_limit_hits))
    if hit:
        text += f" · limit hit: {', '.join(hit)} (runs eagerly)"
    return text


def _latency_rows(
    bm: CompileMetrics | None, hm: CompileMetrics | None, change: CompileLatencyChange | None
) -> list[Row]:
    """The deciding compile-latency row, then each stage's base → head."""
    if change is None:
        why = compile_latency.unmeasured(bm.latency if bm else None, hm.latency if hm else None)
        measured = (bm and bm.latency) or (hm and hm.latency)
        return [Row("compile latency (cache-cold)", "—", "—", why or "")] if measured else []
    how = "instructions, callgrind" if change.measure == "callgrind" else "wall clock"
    note = (hm.latency.note if hm and hm.latency else None) or ""
    rows = [
        Row(
            f"compile latency ({how}, {change.pairs} cache-cold per side) · decides",
            latency_figure(change.base, change.measure),
            latency_figure(change.head, change.measure),
            deltas.interval(change.change_pct, change.low_pct, change.high_pct)
            + (
                f" · undecided against {change.budget_pct:g} % (wall clock; more compile.runs narrow it)"
                if change.verdict == "inconclusive" and change.measure == "wall"
                else ""
            )
            + (f" · {note}" if note else ""),
        )
    ]
    for st in change.stages:
        rows.append(
            Row(
                f"· {STAGE_LABELS.get(st.stage, st.stage)}",
                latency_figure(st.base, change.measure),
                latency_figure(st.head, change.measure),
                deltas.relative(st.base, st.head),
            )
        )
    return rows


def overview(bc: ProbeResult | None, hc: ProbeResult | None, wl: WorkloadReview) -> dict[str, str]:
    """Graphs / breaks (``torch._dynamo.explain``'s counts) and recompiles on each side."""

    def graphs(r: ProbeResult | None) -> str | None:
        m = probe_metrics(r, CompileMetrics)
        return status_or(r, f"{m.graph_count}/{m.graph_break_count}" if m else None)

    def recompiles(r: ProbeResult | None) -> str | None:
        m = probe_metrics(r, CompileMetrics)
        return status_or(r, str(m.recompile_count) if m else None)

    return {
        "graphs": side_pair(graphs(bc), graphs(hc)),
        "recompiles": side_pair(recompiles(bc), recompiles(hc)),
    }


PROBE = ProbeKind(
    name="compile",
    reusable=True,
    summary="graphs, graph breaks with their source lines, recompiles, cold compile",
    default=True,
    compare=compare,
    rows=rows,
    compared=("ok", "failed"),  # torch rejecting a side's code is compared too
    metrics=CompileMetrics,
    run="perfcheck.runner.probes.compile_probe:run",
    categories=entries_beside(__file__),  # compile.yml: its own categories' entries
    columns=(Column("graphs", "graphs / breaks"), Column("recompiles", "recompiles")),
    overview=overview,
    prior_s={"cpu": 15.0, "cuda": 60.0},
)
