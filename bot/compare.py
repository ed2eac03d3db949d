"""Compare base and head probe results into findings and a verdict. Pure functions, no I/O.

Structural findings are exact: a new graph break, a changed IR hash or a new recompile reason
is a difference, not a statistic. Budgets only say how many of them a project tolerates.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from perfcheck.bot import compare_ddp, compare_profile
from perfcheck.bot.compare_amp import amp_findings
from perfcheck.bot.compare_custom_ops import custom_op_findings
from perfcheck.bot.timing_gate import METRIC_LABELS, decide, metric, peak_memory
from perfcheck.config import Config
from perfcheck.schema import (
    CompileMetrics,
    Environment,
    ExportMetrics,
    Finding,
    GraphBreak,
    MetricChange,
    ProbeResult,
    TimingChange,
    TimingMetrics,
    Verdict,
    WorkloadReview,
)

MAX_DIFF_LINES = 120


@dataclass(frozen=True)
class Comparison:
    findings: list[Finding]
    # Why the verdict could not be decided either way (a side that could not be probed, ...).
    inconclusive: list[str] = field(default_factory=list)
    timing_changes: dict[str, TimingChange] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        if any(f.severity == "error" for f in self.findings):
            return "fail"
        return "inconclusive" if self.inconclusive else "pass"


def _break_key(gb: GraphBreak) -> tuple[str, str, str]:
    # Keyed by the source text, not the line number: a PR that adds lines above an old break
    # moves it without adding one.
    loc = gb.location
    where = (loc.path, loc.code or str(loc.line)) if loc else ("?", "?")
    return (gb.break_type, *where)


def _resume_base(function: str) -> str:
    match = re.match(r"torch_dynamo_resume_in_(\w+?)_at_\d+$", function)
    return match.group(1) if match else function


def normalize_guard(reason: str) -> str:
    """A recompile reason with its values and file locations blanked, so the same cause compares
    equal: base and head live in different trees, and a PR may move the line."""
    text = re.sub(r"\S*\.py:\d+", "<file>", reason)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\d+", "N", text)


def _status_findings(
    wl: str, probe: str, base: ProbeResult | None, head: ProbeResult | None, inconclusive: list[str]
) -> list[Finding]:
    out: list[Finding] = []
    for side, result in (("head", head), ("base", base)):
        if result is None or result.status not in ("crashed", "timeout"):
            continue
        category = "probe_crashed" if result.status == "crashed" else "probe_timeout"
        what = f"the {probe} probe {'crashed' if result.status == 'crashed' else 'timed out'} on {side}"
        other = base if side == "head" else head
        both = other is not None and other.status == result.status
        if side == "head":
            severity = "warning" if both else "error"
            message = f"{what} (it does on base too)" if both else what
            if both:
                inconclusive.append(f"{wl}/{probe}: neither side could be probed")
        else:
            if both:
                continue  # already reported from the head side
            severity = "warning"
            message = f"{what}: head cannot be compared"
            inconclusive.append(f"{wl}/{probe}: base could not be probed")
        out.append(
            Finding(
                category=category,
                severity=severity,
                workload=wl,
                probe=probe,
                message=message,  # type: ignore[arg-type]
                evidence={"side": side, "detail": result.message or ""},
            )
        )
    return out


def _compile_findings(wl: str, base: CompileMetrics, head: CompileMetrics, config: Config) -> list[Finding]:
    out: list[Finding] = []
    base_breaks = Counter({_break_key(b): b.count for b in base.graph_breaks})
    head_breaks = Counter({_break_key(b): b.count for b in head.graph_breaks})
    added, removed = head_breaks - base_breaks, base_breaks - head_breaks
    over_budget = sum(added.values()) > config.budgets.max_new_graph_breaks
    graphs = [base.graph_count, head.graph_count]
    changes = (
        ("graph_break_added", "error" if over_budget else "warning", head.graph_breaks, added, "splits"),
        ("graph_break_removed", "info", base.graph_breaks, removed, "no longer splits"),
    )
    for category, severity, breaks, delta, verb in changes:
        for gb in breaks:
            if delta[_break_key(gb)]:
                out.append(
                    Finding(
                        category=category,  # type: ignore[arg-type]
                        severity=severity,  # type: ignore[arg-type]
                        workload=wl,
                        probe="compile",
                        location=gb.location,
                        message=f"Dynamo {verb} the graph here: {gb.break_type}",
                        evidence={
                            "break_type": gb.break_type,
                            "reason": gb.reason,
                            "count": delta[_break_key(gb)],
                            "graphs": graphs,
                        },
                    )
                )
    base_reasons = {(_resume_base(r.function), normalize_guard(r.reason)) for r in base.recompiles}
    new = [
        r
        for r in head.recompiles
        if (_resume_base(r.function), normalize_guard(r.reason)) not in base_reasons
    ]
    seen: set[tuple[str, str]] = set()
    for r in new:
        key = (_resume_base(r.function), normalize_guard(r.reason))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            Finding(
                category="recompile",
                severity="error",
                workload=wl,
                probe="compile",
                message=f"new recompilation of `{r.function}`: {r.reason.splitlines()[0]}",
                evidence={
                    "function": r.function,
                    "reason": r.reason,
                    "recompiles": [base.recompile_count, head.recompile_count],
                },
            )
        )
    return out


def _export_findings(wl: str, base: ProbeResult, head: ProbeResult) -> list[Finding]:
    out: list[Finding] = []
    b: ExportMetrics | None = base.export
    h: ExportMetrics | None = head.export
    if h is None:
        return out
    if head.status == "failed":
        base_failed = base.status == "failed"
        out.append(
            Finding(
                category="export_failed",
                severity="warning" if base_failed else "error",
                workload=wl,
                probe="export",
                location=h.error_location,
                message=f"torch.export fails{' (as on base)' if base_failed else ''}: {h.error_type}",
                evidence={"error_type": h.error_type, "error": (h.error_message or "")[:2000]},
            )
        )
        return out
    base_denied = set(b.denied_ops) if b is not None else set()
    for op in h.denied_ops:
        known = op in base_denied
        out.append(
            Finding(
                category="export_op_denied",
                severity="warning" if known else "error",
                workload=wl,
                probe="export",
                message=f"exported graph uses `{op}`, which the config does not allow"
                + (" (as on base)" if known else ""),
                evidence={"op": op, "count": h.op_counts.get(op, 0)},
            )
        )
    if b is not None and base.status == "ok" and b.graph_sha256 != h.graph_sha256:
        ops = sorted(set(b.op_counts) | set(h.op_counts))
        op_diff = {
            op: [b.op_counts.get(op, 0), h.op_counts.get(op, 0)]
            for op in ops
            if b.op_counts.get(op, 0) != h.op_counts.get(op, 0)
        }
        diff = list(
            difflib.unified_diff(
                (b.graph_text or "").splitlines(),
                (h.graph_text or "").splitlines(),
                "base",
                "head",
                lineterm="",
                n=1,
            )
        )
        summary = (
            ", ".join(f"{op} {n0}→{n1}" for op, (n0, n1) in op_diff.items()) or "same ops, different graph"
        )
        out.append(
            Finding(
                category="export_ir_changed",
                severity="error",
                workload=wl,
                probe="export",
                message=f"ops: {summary}",
                evidence={
                    "base_sha256": b.graph_sha256,
                    "head_sha256": h.graph_sha256,
                    "op_diff": op_diff,
                    "diff": "\n".join(diff[:MAX_DIFF_LINES]),
                    "diff_truncated": len(diff) > MAX_DIFF_LINES,
                },
            )
        )
    return out


# What must match before two timings are comparable. Software versions may differ on purpose
# (--base-python / --head-python compare two torch builds); the environment line shows them.
HARDWARE_FIELDS = ("gpu_name", "gpu_count", "driver", "cpu", "platform")


def hardware_differences(base: Environment | None, head: Environment | None) -> dict[str, list[object]]:
    if base is None or head is None:
        return {}
    return {
        f: [getattr(base, f), getattr(head, f)]
        for f in HARDWARE_FIELDS
        if getattr(base, f) != getattr(head, f)
    }


HOST_BOUND_ADVICE = (
    "the step is host-bound (the GPU waits for the host), so its wall-clock time runs at the host's "
    "speed and inherits its jitter; CUDA graphs (compile mode `reduce-overhead`) or a larger batch make "
    "it device-bound"
)


def _pct(x: float) -> str:
    return f"{x:+.1f} %"


def _interval(m: MetricChange) -> str:
    return f"{_pct(m.change_pct)} ({m.confidence:.0%} CI {_pct(m.low_pct)} … {_pct(m.high_pct)})"


def _metric_words(m: MetricChange) -> str:
    return f"{METRIC_LABELS[m.metric].replace(' / step', '')} {m.base:.3f} → {m.head:.3f} ms, {_interval(m)}"


def _evidence(m: MetricChange, change: TimingChange) -> dict[str, object]:
    return {
        "metric": m.metric,
        "base_ms": m.base,
        "head_ms": m.head,
        "ratio": m.ratio,
        "ratio_ci": [m.ratio_low, m.ratio_high],
        "p_value": m.p_value,
        "processes": m.processes,
        "budget_pct": m.budget_pct,
        "verdict": m.verdict,
        "bound": change.bound,
        "gpu_busy_pct": change.gpu_busy_pct,
    }


def _bound_words(change: TimingChange) -> str:
    if change.bound == "cpu":
        return ""
    return f"{change.bound}-bound: the GPU is busy {change.gpu_busy_pct:.0f} % of the wall-clock step"


def _alarm(m: MetricChange, alpha: float) -> bool:
    """Reported: a fail, or a slowdown the test finds significant although within the budget."""
    return m.verdict == "fail" or (m.p_value < alpha and m.ratio > 1.0)


def _timing_findings(
    wl: str,
    base: ProbeResult,
    head: ProbeResult,
    config: Config,
    inconclusive: list[str],
    changes: dict[str, TimingChange],
) -> list[Finding]:
    b, h = base.timing, head.timing
    if b is None or h is None:
        return []
    out: list[Finding] = []
    differences = hardware_differences(base.environment, head.environment)
    if differences:
        inconclusive.append(f"{wl}/timing: base and head ran on different hardware")
        return [
            Finding(
                category="environment_mismatch",
                severity="warning",
                workload=wl,
                probe="timing",
                message="base and head ran on different hardware, so their timings are not compared: "
                + ", ".join(f"{k} {v[0]} vs {v[1]}" for k, v in differences.items()),
                evidence={"differences": differences},
            )
        ]
    if min(len(b.processes), len(h.processes)) < 2:
        inconclusive.append(f"{wl}/timing: fewer than two pairs of processes were timed")
        return []
    change = decide(b.processes, h.processes, config.budgets, config.timing)
    changes[wl] = change
    alpha = config.timing.alpha
    bound = _bound_words(change)
    for m in change.metrics:
        if m.decides and m.verdict == "inconclusive":
            why = (
                f"{wl}: {_metric_words(m)} straddles the {m.budget_pct:g} % budget "
                f"after {m.processes} process pairs"
            )
            inconclusive.append(
                why + (f"; {HOST_BOUND_ADVICE}" if change.bound == "host" and m.metric == "step_ms" else "")
            )
    throughput = [
        m for m in change.metrics if m.decides and m.metric in ("device_ms", "step_ms") and _alarm(m, alpha)
    ]
    if throughput:
        lead = throughput[0]
        context = [m for m in change.metrics if m is not lead and m.metric in ("device_ms", "step_ms")]
        tail = "; ".join(_metric_words(m) + ("" if m.decides else " (context)") for m in context)
        within = {"fail": "beyond", "pass": "within", "inconclusive": "not clearly within"}[lead.verdict]
        out.append(
            Finding(
                category="throughput_regression",
                severity="error" if any(m.verdict == "fail" for m in throughput) else "warning",
                workload=wl,
                probe="timing",
                message=f"{_metric_words(lead)}, {within} the {lead.budget_pct:g} % budget "
                f"(p = {lead.p_value:.2g}, {lead.processes} process pairs)"
                + (f"; {tail}" if tail else "")
                + (f"; {bound}" if bound else ""),
                evidence=_evidence(lead, change),
            )
        )
    out += _host_findings(wl, change, alpha)
    out += _memory_findings(wl, b, h, config)
    return out


def _host_findings(wl: str, change: TimingChange, alpha: float) -> list[Finding]:
    out: list[Finding] = []
    host = metric(change, "host_ms")
    kernels = change.kernels
    more = bool(kernels and change.kernels_exact and kernels[1] > kernels[0])
    host_alarm = host is not None and host.decides and _alarm(host, alpha)
    if not more and not host_alarm:
        return out
    parts = []
    if more and kernels:
        parts.append(
            f"kernels launched per step {kernels[0]:g} → {kernels[1]:g} (+{kernels[1] - kernels[0]:g})"
        )
    if host is not None and (host_alarm or more):
        parts.append(_metric_words(host) + ("" if host.decides else " (context)"))
    bound = change.bound == "host"
    severity = (
        "error"
        if (bound and more) or (host_alarm and host is not None and host.verdict == "fail")
        else "warning"
    )
    note = (
        "the step is host-bound, so every extra launch costs wall-clock time"
        if bound
        else "the step is device-bound: the host keeps ahead of the GPU, so this costs no time now"
    )
    out.append(
        Finding(
            category="host_overhead_regression",
            severity=severity,  # type: ignore[arg-type]
            workload=wl,
            probe="timing",
            message="; ".join(parts) + f"; {note} ({_bound_words(change)})",
            evidence={
                "kernels": kernels,
                "kernels_exact": change.kernels_exact,
                "bound": change.bound,
                "gpu_busy_pct": change.gpu_busy_pct,
                **({"host": _evidence(host, change)} if host is not None else {}),
            },
        )
    )
    return out


def _memory_findings(wl: str, b: TimingMetrics, h: TimingMetrics, config: Config) -> list[Finding]:
    bp, hp = peak_memory(b), peak_memory(h)
    if bp is None or hp is None or b.memory_kind != h.memory_kind:
        return []
    growth = hp - bp
    limit = config.budgets.max_peak_memory_growth_mb
    if growth <= limit:
        return []
    return [
        Finding(
            category="memory_regression",
            severity="error",
            workload=wl,
            probe="timing",
            message=f"peak memory {bp:.0f} → {hp:.0f} MB (+{growth:.0f} MB, budget {limit:g} MB; "
            f"{b.memory_kind}, median over {len(h.processes)} processes)",
            evidence={"base_mb": bp, "head_mb": hp, "kind": b.memory_kind},
        )
    ]


def _compile_latency_findings(
    wl: str, base: CompileMetrics, head: CompileMetrics, config: Config
) -> list[Finding]:
    limit = config.budgets.compile_latency_s.get(wl)
    if limit is None or head.cold_compile_s <= limit:
        return []
    return [
        Finding(
            category="compile_latency_regression",
            severity="error",
            workload=wl,
            probe="compile",
            message=f"cold compile {base.cold_compile_s:.1f} → {head.cold_compile_s:.1f} s, over the "
            f"{limit:g} s budget",
            evidence={
                "base_s": base.cold_compile_s,
                "head_s": head.cold_compile_s,
                "budget_s": limit,
                "breakdown_base": base.compile_breakdown_s,
                "breakdown_head": head.compile_breakdown_s,
            },
        )
    ]


def _by_probe(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {r.probe: r for r in results}


# Probes whose base/head comparison is a pure function of the two results and the config; each
# lives in its own module (bot/compare_<probe>.py) and is listed here.
Comparator = Callable[[str, ProbeResult, ProbeResult, Config], list[Finding]]
COMPARATORS: dict[str, Comparator] = {"ddp": compare_ddp.findings}
COMPARATORS["amp"] = amp_findings
COMPARATORS["custom_ops"] = custom_op_findings
COMPARATORS["profile"] = compare_profile.findings


def compare_workload(
    wl: WorkloadReview, config: Config, inconclusive: list[str], changes: dict[str, TimingChange]
) -> list[Finding]:
    base, head = _by_probe(wl.base), _by_probe(wl.head)
    findings: list[Finding] = []
    for probe in sorted(set(base) | set(head)):
        b, h = base.get(probe), head.get(probe)
        findings += _status_findings(wl.name, probe, b, h, inconclusive)
        if b is None or h is None:
            continue
        if probe == "compile" and b.compile and h.compile and b.status == h.status == "ok":
            findings += _compile_findings(wl.name, b.compile, h.compile, config)
            findings += _compile_latency_findings(wl.name, b.compile, h.compile, config)
        elif probe == "timing" and b.status == h.status == "ok":
            findings += _timing_findings(wl.name, b, h, config, inconclusive, changes)
        elif probe == "export" and b.status in ("ok", "failed") and h.status in ("ok", "failed"):
            findings += _export_findings(wl.name, b, h)
        elif probe in COMPARATORS and b.status == h.status == "ok":
            findings += COMPARATORS[probe](wl.name, b, h, config)
    return findings


_ORDER = {"error": 0, "warning": 1, "info": 2}


def compare(workloads: list[WorkloadReview], config: Config) -> Comparison:
    inconclusive: list[str] = []
    changes: dict[str, TimingChange] = {}
    findings = [f for wl in workloads for f in compare_workload(wl, config, inconclusive, changes)]
    findings.sort(key=lambda f: _ORDER[f.severity])
    return Comparison(findings=findings, inconclusive=inconclusive, timing_changes=changes)
