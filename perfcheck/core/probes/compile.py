"""The compile probe, reviewed: graph breaks matched by their source, recompiles by their cause,
cold compile against its budget. Structural findings are exact: a diff is a diff."""

from __future__ import annotations

from collections import Counter

from perfcheck.core import break_depth, deltas
from perfcheck.core.folding import fold_under
from perfcheck.core.markdown import Figure
from perfcheck.core.probes.compile_accepted import accepts_break
from perfcheck.core.probes.compile_latency_findings import compile_latency_findings, latency_rows
from perfcheck.core.probes.compile_recompiles import (
    at,
    resume_base,
    with_recompiles,
)
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
    CompileMetrics,
    GraphBreak,
    SourceLocation,
)
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView


def _break_key(gb: GraphBreak) -> tuple[str, str, str]:
    # Keyed by the place, not by Dynamo's wording (which differs by where it reports the break from):
    # its file, its function's qualified name (two sibling classes can read alike) and the source
    # text, not the line number: a PR that adds lines above an old break moves it without adding one.
    loc = gb.location
    return (loc.path, loc.function or "", loc.code or str(loc.line)) if loc else ("?", "", gb.break_type)


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
                                {"recompiling_after": at(gb.recompiling_after)}
                                if gb.recompiling_after
                                else {}
                            ),
                            **_nesting_evidence(gb),
                            **_stack_evidence(gb),
                        },
                    )
                )
    changed = {
        (category, at(gb.location)): gb.changed_at
        for category, _, breaks, delta, _, _ in changes
        for gb in breaks
        if gb.location is not None
        and gb.changed_at is not None
        and delta[_break_key(gb)]
        and _break_key(gb) not in accepted
    }
    found = with_recompiles(wl, base, head, _under_their_breaks(_gone_with_the_frame(out)))
    return _one_per_change(found, changed)


_SPLITS = ("Dynamo splits the graph here: ", "Dynamo no longer splits the graph here: ")


def _one_per_change(findings: list[Finding], changed: dict[tuple[str, str], SourceLocation]) -> list[Finding]:
    """The breaks a change reached through one line of its own (a call it added, into code it did
    not touch) as one finding at that line, its breaks beneath: one change, one cause, where the
    PR's reviewer reads it. ``changed``: each such break's line (by category and place) to the
    changed line its stack passes through (``GraphBreak.changed_at``, marked in the probe job)."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        line = changed.get((f.category, at(f.location))) if f.location is not None else None
        if line is not None:
            groups.setdefault((f.category, at(line)), []).append(f)
    if not groups:
        return findings
    lines = {
        key: changed[(f.category, at(f.location))] for key, fs in groups.items() for f in fs[:1] if f.location
    }
    firsts = {id(fs[0]): key for key, fs in groups.items()}
    members = {id(f) for fs in groups.values() for f in fs}
    out = []
    for f in findings:
        if id(f) in firsts:
            key = firsts[id(f)]
            out.append(_at_the_change(groups[key], lines[key]))
        elif id(f) not in members:
            out.append(f)
    return out


def _at_the_change(breaks: list[Finding], line: SourceLocation) -> Finding:
    """One finding at changed ``line`` for the ``breaks`` (one category's) its stack reaches."""
    first = breaks[0]
    added = first.category == "graph_break_added"
    verb = "splits" if added else "no longer splits"
    said = [
        f"{b.message.removeprefix(_SPLITS[0]).removeprefix(_SPLITS[1])} at {at(b.location)}"
        for b in breaks
        if b.location is not None
    ]
    places = "; ".join(said) if len(said) > 1 else said[0]
    where = f"at {len(breaks)} places " if len(breaks) > 1 else ""
    line_kind = "this changed line" if added else "a line the change removed"
    message = f"Dynamo {verb} the graph {where}in the code {line_kind} calls: {places}"
    evidence: dict[str, object] = {
        **first.evidence,
        "count": sum(int(b.evidence.get("count", 1)) for b in breaks),
    }
    evidence["breaks"] = "\n".join(
        f"{at(b.location)}  {b.location.function or '?'}: {b.location.code or ''}"
        f" — {b.evidence.get('break_type', '')}"
        for b in breaks
        if b.location is not None
    )
    evidence.pop("stack", None)  # each break's own way there: the breaks' list says it for all
    for key in ("resume_recompiles", "limit_hits", "fallout_breaks", "no_longer_compiled"):
        texts = [str(b.evidence[key]) for b in breaks if b.evidence.get(key)]
        if texts:
            evidence[key] = "\n".join(dict.fromkeys(texts))
    if any(b.evidence.get("fell_back") for b in breaks):
        evidence["fell_back"] = True
    gave_up = [
        g for b in breaks if isinstance(b.evidence.get("gave_up"), list) for g in b.evidence["gave_up"]
    ]
    if gave_up:
        evidence["gave_up"] = list(dict.fromkeys(gave_up))
    evidence["break_at"] = [at(b.location) for b in breaks if b.location is not None]
    return first.model_copy(update={"location": line, "message": message, "evidence": evidence})


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


def _stack_evidence(gb: GraphBreak) -> dict[str, object]:
    """How the tree reaches the break, outermost first: the frames that call into it, its own line,
    and the package's line it happened in; the frames Dynamo gave up compiling for it. Nothing
    where Dynamo gave no caller of it (a break in the compiled function's own body)."""
    out: dict[str, object] = {}
    if gb.callers and gb.location is not None:
        frames = [*gb.callers, gb.location, *([gb.origin] if gb.origin else [])]
        out["stack"] = "\n".join(
            f"{loc.path}:{loc.line}  {loc.function or '?'}" + (f": {loc.code}" if loc.code else "")
            for loc in frames
        )
    if gb.gave_up:
        out["gave_up"] = [f"{loc.path}::{loc.function or '?'}" for loc in gb.gave_up]
    return out


def _fallout_keys(
    breaks: list[GraphBreak], added: Counter[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """The new breaks Dynamo took only while recompiling the code after another new break (its
    resume function, for a value that crossed that break): that break's, not counted beside it."""
    new_at = {at(gb.location) for gb in breaks if gb.location and added[_break_key(gb)]}
    return {
        _break_key(gb)
        for gb in breaks
        if gb.recompiling_after is not None and added[_break_key(gb)] and at(gb.recompiling_after) in new_at
    }


def _under_their_breaks(findings: list[Finding]) -> list[Finding]:
    """Each new break Dynamo took only while recompiling the code after another new break, moved
    under that break (followed to the first that is no one's fallout), said there, not counted:
    the code after a break is a function of its own (a resume function) whose arguments are the
    values that crossed the break, and a recompile of it for another value (a Python int turned
    dynamic) can break where the whole function, compiled as one, did not."""
    added = {at(f.location): f for f in findings if f.category == "graph_break_added" and f.location}

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

    def said(f: Finding, follow: list[Finding]) -> Finding:
        n = len(follow)
        follows = "breaks that follow" if n > 1 else "break that follows"
        return f.model_copy(
            update={
                "message": f"{f.message} (and {n} {follows} from it, not counted)",
                "evidence": {
                    **f.evidence,
                    "fallout_breaks": "\n".join(
                        f"{at(g.location)}: {g.message.removeprefix('Dynamo splits the graph here: ')}"
                        f" (while recompiling the code after {g.evidence['recompiling_after']})"
                        for g in follow
                        if g.location
                    ),
                },
            }
        )

    return fold_under(findings, lambda f: root(f) if f.category == "graph_break_added" else None, said)


def _gone_with_the_frame(findings: list[Finding]) -> list[Finding]:
    """A base break that is gone because a new break made Dynamo give up on its frame (it runs
    eagerly now, so nothing there is compiled to break): not a removed break, but part of the
    new one, said under it. Matched by the frames Dynamo gave up (the function base's break is in),
    or by file where the result does not name them (one from before perfcheck read them)."""
    fell = [f for f in findings if f.category == "graph_break_added" and f.evidence.get("fell_back")]
    if not fell:
        return findings
    out: list[Finding] = []
    gone: dict[int, list[Finding]] = {}
    for f in findings:
        cause = next((c for c in fell if f.category == "graph_break_removed" and _in_given_up(c, f)), None)
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


def _in_given_up(cause: Finding, removed: Finding) -> bool:
    """Whether base's break ``removed`` is in a frame the new break ``cause`` made Dynamo give up."""
    frames = cause.evidence.get("gave_up")
    if not isinstance(frames, list):
        return _same_file(cause, removed)
    loc = removed.location
    return loc is not None and f"{loc.path}::{loc.function or '?'}" in frames


def _same_file(a: Finding, b: Finding) -> bool:
    return a.location is not None and b.location is not None and a.location.path == b.location.path


def _origin_words(gb: GraphBreak) -> str:
    words = f" (in {gb.origin.path}:{gb.origin.line}, reached from here)" if gb.origin else ""
    if gb.gave_up:
        frames = ", ".join(f"`{loc.function or '?'}`" for loc in gb.gave_up)
        runs = "which runs" if len(gb.gave_up) == 1 else "which run"
        words += f"; Dynamo could not resume after it and gave up compiling {frames}, {runs} eagerly"
    elif gb.fell_back:
        words += "; Dynamo could not resume after it and runs the frame it was compiling eagerly"
    return words


def _compile_failed(wl: str, base: ProbeResult, head: ProbeResult) -> Finding | None:
    """torch.compile raising inside torch on the head's code: not a crashed probe, a finding."""
    h = probe_metrics(head, CompileMetrics)
    if head.status != "failed" or h is None:
        return None
    return rejected_finding("compile_failed", wl, "compile", "torch.compile", h, base)


def _compile_fixed(wl: str, b: CompileMetrics) -> Finding:
    """torch.compile raising on base's code and compiling head's: the pull request fixed it. What
    only a compiled base gives (step time, compile latency) has nothing to be compared with."""
    return Finding(
        category="compile_fixed",
        severity="info",
        workload=wl,
        probe="compile",
        message=f"torch.compile works on head (on base it failed: {b.error_type}); "
        "step time and compile latency have no compiled base to be compared with",
        # Base's failure is the evidence: its verify commands show base's side.
        evidence={"side": "base", "base_error": (b.error_message or "")[:2000]},
        # Where base's compile failed: the line head changed, most likely.
        location=b.error_location,
    )


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    failed = _compile_failed(wl, base, head)
    if failed is not None:
        return Compared([failed])
    b, h = probe_metrics(base, CompileMetrics), probe_metrics(head, CompileMetrics)
    if base.status == "failed" and head.status == "ok" and b is not None:
        return Compared([_compile_fixed(wl, b)])
    if b is None or h is None or "failed" in (base.status, head.status):
        return Compared()
    latency = compile_latency_findings(wl, b, h, config)
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
        rows += latency_rows(bm, hm, wl.compile_latency)
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
    hit = list(dict.fromkeys(resume_base(h.function) for h in m.recompile_limit_hits))
    if hit:
        text += f" · limit hit: {', '.join(hit)} (runs eagerly)"
    return text


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
