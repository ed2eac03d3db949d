"""The compile probe's recompiles, reviewed: matched by their cause (the failed guard with its
values normalized), placed where the tree makes the guarded value, folded under the new break whose
resume functions they are, and a frame that hits a recompile limit (its recompiles of that guard
shown under it). The compile probe's own module (compile.py) raises these findings."""

from __future__ import annotations

import re

from perfcheck.measures import CompileMetrics, Recompile, RecompileLimitHit, SourceLocation
from perfcheck.schema import Finding


def resume_base(function: str) -> str:
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


def at(loc: SourceLocation) -> str:
    return f"{loc.path}:{loc.line}"


def _function(r: Recompile) -> str:
    """The user's function a recompile recompiles: its qualified name where the probe read it from
    the code object (``Used.forward``, for the code after a break too), else its bare name."""
    return r.location.function if r.location and r.location.function else resume_base(r.function)


def _recompile_key(r: Recompile) -> tuple[str, str]:
    return (_function(r), normalize_guard(r.reason))


def _is_resume(r: Recompile) -> bool:
    return resume_base(r.function) != r.function


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


def _named(path: str, function: str) -> str:
    return f"{path}::{function}"


def split_by(head: CompileMetrics, added: list[Finding]) -> dict[str, Finding]:
    """The functions each new break split, by file and qualified name: its own, the frames of the
    tree that call into it (Dynamo breaks each of them at the call and compiles what they call as
    frames of their own) and the frames it made Dynamo give up (run eagerly: whatever they call is
    compiled on its own). The first new break that names a function has it."""
    at_added = {at(f.location): f for f in added if f.location is not None}
    out: dict[str, Finding] = {}
    for gb in head.graph_breaks:
        cause = at_added.get(at(gb.location)) if gb.location is not None else None
        if cause is None:
            continue
        for loc in [*gb.callers, gb.location, *gb.gave_up]:
            if loc is not None and loc.function:
                out.setdefault(_named(loc.path, loc.function), cause)
    return out


def _fallout_of(
    function: str,
    location: SourceLocation | None,
    added: list[Finding],
    base: CompileMetrics,
    split: dict[str, Finding],
) -> Finding | None:
    """The new break a frame's recompile (or recompile-limit hit) follows from: the frame is the
    code after the break (a resume function, ``_cause``), a function the break split (on its
    stack, or given up for it: ``split_by``), or a frame that only exists because of a break, one
    base compiled inside a bigger graph and head compiles on its own (an installed package's
    function, a block's forward). Base's frames are known from results that record them."""
    probe = Recompile(function=function, reason="", location=location)
    cause = _cause(probe, added, base)
    if cause is not None or not added:
        return cause
    if location is not None and location.function:
        cause = split.get(_named(location.path, location.function))
        if cause is not None and not _compiled_in_base(function, location, base):
            return cause
    if not base.frames:
        return None
    if _compiled_in_base(function, location, base):
        return None
    path = location.path if location else None
    return next((f for f in added if f.location and f.location.path == path), added[0])


def _compiled_in_base(function: str, location: SourceLocation | None, base: CompileMetrics) -> bool:
    """Whether base compiled this frame as a frame of its own too."""
    return location is not None and f"{function} {location.path}:{location.line}" in base.frames


def with_recompiles(
    wl: str, base: CompileMetrics, head: CompileMetrics, breaks: list[Finding]
) -> list[Finding]:
    """The break findings, each with the recompiles that exist only because of it (shown under
    it, not counted again), then one finding per frame that hits a recompile limit base does not
    (with the recompiles of its guard that led there), then one finding per other new guard cause,
    naming every frame it recompiles."""
    known = {_recompile_key(r) for r in base.recompiles}
    added = [f for f in breaks if f.category == "graph_break_added"]
    split = split_by(head, added)
    folded: dict[int, list[Recompile]] = {}
    by_guard: dict[str, list[Recompile]] = {}
    for r in head.recompiles:
        if _recompile_key(r) in known:
            continue
        cause = _fallout_of(r.function, r.location, added, base, split)
        if cause is not None:
            folded.setdefault(id(cause), []).append(r)
        else:
            by_guard.setdefault(normalize_guard(guard_expression(r.reason)), []).append(r)
    hits = [
        h for h in head.recompile_limit_hits if not any(_same_hit(h, b) for b in base.recompile_limit_hits)
    ]
    # A frame that hits a recompile limit only because a break split it (the code after the
    # break, a function compiled on its own since the frame around it broke or was given up) is
    # that break's: shown under it, never a cause or a count of its own.
    limits_folded: dict[int, list[RecompileLimitHit]] = {}
    own_hits = []
    for hit in hits:
        cause = _fallout_of(hit.function, hit.location, added, base, split)
        if cause is not None:
            limits_folded.setdefault(id(cause), []).append(hit)
        else:
            own_hits.append(hit)
    out = [_with_fallout(f, folded.get(id(f), []), limits_folded.get(id(f), [])) for f in breaks]
    limited = []
    for hit in own_hits:
        guard = normalize_guard(guard_expression(hit.reason))
        group = by_guard.pop(guard, [])
        led = [r for r in group if resume_base(r.function) == resume_base(hit.function)]
        if len(led) < len(group):  # the guard's recompiles of other frames stay a finding of their own
            by_guard[guard] = [r for r in group if r not in led]
        limited.append(_limit_finding(wl, base, head, hit, led))
    return out + limited + [_recompile_finding(wl, base, head, group) for group in by_guard.values()]


def _with_fallout(f: Finding, recompiles: list[Recompile], hits: list[RecompileLimitHit]) -> Finding:
    """Break finding ``f`` with the recompiles and recompile-limit hits that follow from it said
    under it."""
    if not recompiles and not hits:
        return f
    said = []
    if recompiles:
        n = len(recompiles)
        said.append(f"{n} {'recompiles' if n > 1 else 'recompile'}")
    if hits:
        n = len(hits)
        said.append(f"{n} recompile-limit {'hits' if n > 1 else 'hit'}")
    follow = "follow" if len(recompiles) + len(hits) > 1 else "follows"
    evidence: dict[str, object] = {}
    if recompiles:
        evidence["resume_recompiles"] = "\n".join(
            f"{_place(r)}: {guard_expression(r.reason)}" for r in recompiles
        )
    if hits:
        evidence["limit_hits"] = "\n".join(
            f"{_hit_place(h)}: torch._dynamo.config.{h.limit} ({h.value}) hit, `{guard_expression(h.reason)}`"
            " kept failing"
            for h in hits
        )
    return f.model_copy(
        update={
            "message": f"{f.message} (and {' and '.join(said)} that {follow} from it)",
            "evidence": {**f.evidence, **evidence},
        }
    )


def _hit_place(h: RecompileLimitHit) -> str:
    loc = h.location
    return f"{h.function} ({loc.path}:{loc.line})" if loc else h.function


def _same_hit(a: RecompileLimitHit, b: RecompileLimitHit) -> bool:
    """The same frame hitting the same limit, on either side (by the frame's source text)."""
    return (
        a.limit == b.limit
        and resume_base(a.function) == resume_base(b.function)
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
    name = resume_base(hit.function)
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
            **({"recompiled_at": at(hit.location)} if hit.location else {}),
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
