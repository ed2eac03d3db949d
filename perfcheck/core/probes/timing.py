"""The timing probe, reviewed: the gate's verdict over pairs of processes (perfcheck/core/timing_gate.py),
the findings it makes, and the table's timing rows, each saying whether it decides."""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from perfcheck.core import deltas
from perfcheck.core.markdown import Compound, Figure, count, size
from perfcheck.core.probes.kind import (
    Cell,
    Column,
    Compared,
    ProbeKind,
    Row,
    entries_beside,
    settled,
    side_pair,
    status_cell,
    status_or,
)
from perfcheck.core.stats import worth_warning
from perfcheck.core.timing_gate import (
    METRIC_LABELS,
    decide,
    headline_metric,
    metric,
    peak_memory,
    side_figure,
    throughput_figures,
)
from perfcheck.measures import DeviceStep, Environment, MetricChange, TimingChange, TimingMetrics
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView

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


def _interval(m: MetricChange) -> str:
    pct = deltas.signed_pct
    return f"{pct(m.change_pct)} ({m.confidence:.0%} CI {pct(m.low_pct)} … {pct(m.high_pct)})"


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
    return m.verdict == "fail" or (
        m.p_value < alpha and m.ratio > 1.0 and worth_warning(m.change_pct, m.budget_pct)
    )


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    b, h = probe_metrics(base, TimingMetrics), probe_metrics(head, TimingMetrics)
    if b is None or h is None:
        return Compared()
    out: list[Finding] = []
    inconclusive: list[str] = []
    differences = hardware_differences(base.environment, head.environment)
    if differences:
        inconclusive.append(f"{wl}/timing: base and head ran on different hardware")
        return Compared(
            [
                Finding(
                    category="environment_mismatch",
                    severity="warning",
                    workload=wl,
                    probe="timing",
                    message="base and head ran on different hardware, so their timings are not compared: "
                    + ", ".join(f"{k} {v[0]} vs {v[1]}" for k, v in differences.items()),
                    evidence={"differences": differences},
                )
            ],
            inconclusive,
        )
    if min(len(b.processes), len(h.processes)) < 2:
        return Compared([], [f"{wl}/timing: fewer than two pairs of processes were timed"])
    change = decide(b.processes, h.processes, config.budgets, config.timing)
    alpha = config.timing.alpha
    bound = _bound_words(change)
    for m in change.metrics:
        if (
            m.decides
            and m.verdict == "inconclusive"
            and not (change.settled_by_device and m.metric == "host_ms")
        ):
            why = (
                f"{wl}: {_metric_words(m)} straddles the {m.budget_pct:g} % budget "
                f"after {m.processes} process pairs" + (f" (no more pairs: {h.stopped})" if h.stopped else "")
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
    out += _settled_host(wl, change, alpha, h.stopped)
    out += _memory_findings(wl, b, h, config)
    return Compared(out, inconclusive, change)


def _settled_host(wl: str, change: TimingChange, alpha: float, stopped: str | None) -> list[Finding]:
    """The host issue time the device settled (timing_gate ``_device_decides``), said: a warning
    where its estimate is beyond the budget or the slowdown is significant, else an info note."""
    host = metric(change, "host_ms")
    device = metric(change, "device_ms")
    if not change.settled_by_device or host is None or device is None or _alarm(host, alpha):
        return []  # an alarm is _host_findings' already
    beyond = host.change_pct > host.budget_pct
    kernels = f"{change.kernels[0]:g}" if change.kernels else "the same"
    return [
        Finding(
            category="host_overhead_regression",
            severity="warning" if beyond else "info",
            workload=wl,
            probe="timing",
            message=f"{_metric_words(host)}, undecided against the {host.budget_pct:g} % budget after "
            f"{host.processes} process pairs (the estimate {'beyond' if beyond else 'within'} it"
            + (f"; no more pairs: {stopped}" if stopped else "")
            + f"); the device decided: {_metric_words(device)}, and {kernels} kernels per step on "
            f"both sides ({_bound_words(change)}, where the host clock scatters between processes)",
            evidence={**_evidence(host, change), "undecided": True, "kernels": change.kernels},
        )
    ]


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


def _memory_findings(wl: str, b: TimingMetrics, h: TimingMetrics, config: SettingsView) -> list[Finding]:
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


def delta_cell(m: MetricChange) -> str:
    return deltas.interval(m.change_pct, m.low_pct, m.high_pct)


def _timing_rows(bt: ProbeResult | None, ht: ProbeResult | None, change: TimingChange | None) -> list[Row]:
    """Every figure is the geometric mean over a side's processes, the estimator Δ is computed from,
    so base → head and Δ always agree; the row that decided the verdict says so."""
    b, h = probe_metrics(bt, TimingMetrics), probe_metrics(ht, TimingMetrics)
    if b is None and h is None:
        return [Row("step time", status_cell(bt) or "—", status_cell(ht) or "—", "")]
    src = h or b
    assert src is not None
    changes: dict[str, MetricChange] = {m.metric: m for m in change.metrics} if change else {}

    def cell(t: TimingMetrics | None, r: ProbeResult | None, value: float | None) -> Cell:
        if t is None or value is None:
            return status_cell(r) or "—"
        return Figure(value, "ms", 3)

    def label(name: str, detail: str = "") -> str:
        m = changes.get(name)
        role = ""
        if m is not None:
            role = " · decides" if m.decides else " · context"
        return f"{METRIC_LABELS[name]}{detail}{role}"

    rows: list[Row] = []
    gpu = any(p.device is not None for t in (b, h) if t for p in t.processes)
    compiled = f"{src.mode}{', ' + src.backend if src.backend else ''}"
    if gpu:
        dev = side_figure(b, "device_ms"), side_figure(h, "device_ms")
        m = changes.get("device_ms")
        rows.append(
            Row(label("device_ms"), cell(b, bt, dev[0]), cell(h, ht, dev[1]), delta_cell(m) if m else "")
        )
    bound = ""
    if change is not None and change.bound != "cpu":
        bound = f"; {change.bound}-bound, GPU busy {change.gpu_busy_pct:.0f} %"
    wall = side_figure(b, "step_ms"), side_figure(h, "step_ms")
    m = changes.get("step_ms")
    rows.append(
        Row(
            label("step_ms", f" ({compiled}{bound})"),
            cell(b, bt, wall[0]),
            cell(h, ht, wall[1]),
            delta_cell(m) if m else "",
        )
    )
    if gpu:
        host = side_figure(b, "host_ms"), side_figure(h, "host_ms")
        m = changes.get("host_ms")
        rows.append(
            Row(label("host_ms"), cell(b, bt, host[0]), cell(h, ht, host[1]), delta_cell(m) if m else "")
        )
        rows += _count_rows(b, h, bt, ht, change)

    def per_s(t: TimingMetrics | None, ms: float | None) -> Cell:
        return Figure(t.batch_size / ms * 1000, "/s") if t and ms else "—"

    rows.append(Row("throughput", per_s(b, wall[0]), per_s(h, wall[1]), ""))
    bp, hp = peak_memory(b), peak_memory(h)
    if b and h and bp is not None and hp is not None:
        kind = "peak memory" if b.memory_kind == "cuda_max_allocated" else "peak RSS"
        rows.append(Row(kind, Figure(bp, "MB"), Figure(hp, "MB"), Figure(hp - bp, "MB", signed=True)))
    return rows


def _count_rows(
    b: TimingMetrics | None,
    h: TimingMetrics | None,
    bt: ProbeResult | None,
    ht: ProbeResult | None,
    change: TimingChange | None,
) -> list[Row]:
    """Kernels, copies and fills per step: exact counts, so a difference is a difference."""

    def per_side(t: TimingMetrics | None, get: Callable[[DeviceStep], float]) -> float | None:
        values = [get(p.device) for p in t.processes if p.device is not None] if t else []
        return median(values) if values else None

    def diff(x: float | None, y: float | None) -> Cell:
        if x is None or y is None:
            return ""
        return "=" if x == y else count(y - x, signed=True)

    rows = []
    kb, kh = per_side(b, lambda d: d.kernels), per_side(h, lambda d: d.kernels)
    decides = " · decides" if change is not None and change.bound == "host" and change.kernels_exact else ""
    rows.append(
        Row(
            f"kernels / step{decides}",
            count(kb) if kb is not None else (status_cell(bt) or "—"),
            count(kh) if kh is not None else (status_cell(ht) or "—"),
            diff(kb, kh),
        )
    )
    for name, n, nbytes in (
        ("memcpy", lambda d: d.memcpy, lambda d: d.memcpy_bytes),
        ("memset", lambda d: d.memset, lambda d: d.memset_bytes),
    ):
        cb, ch = per_side(b, n), per_side(h, n)
        if not cb and not ch:
            continue
        bb, bh = per_side(b, nbytes), per_side(h, nbytes)
        rows.append(
            Row(
                f"{name} / step",
                Compound(count(cb or 0), size(bb or 0)),
                Compound(count(ch or 0), size(bh or 0)),
                diff(cb, ch),
            )
        )
    return rows


def rows(bt: ProbeResult | None, ht: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    if bt is None and ht is None:
        return []
    return settled(_timing_rows(bt, ht, wl.timing), bt, ht)


def overview(bt: ProbeResult | None, ht: ProbeResult | None, wl: WorkloadReview) -> dict[str, str]:
    """The step time on each side (the headline throughput figure) and the gate's Δ with its interval."""
    b, h = probe_metrics(bt, TimingMetrics), probe_metrics(ht, TimingMetrics)
    figures = throughput_figures(b, h)
    name = figures[0] if figures else "step_ms"

    def step(r: ProbeResult | None, t: TimingMetrics | None) -> str | None:
        value = side_figure(t, name)
        return status_or(r, f"{value:.3f} ms" if value is not None else None)

    headline = headline_metric(wl.timing) if wl.timing else None
    return {"step": side_pair(step(bt, b), step(ht, h)), "delta": delta_cell(headline) if headline else "—"}


PROBE = ProbeKind(
    name="timing",
    summary="step time over pairs of worker processes; on GPUs device time, host issue, kernels per step",
    default=True,
    paired=True,
    compare=compare,
    rows=rows,
    metrics=TimingMetrics,
    categories=entries_beside(__file__),  # timing.yml: its own categories' entries
    columns=(Column("step", "step time", numeric=True), Column("delta", "Δ (95 % CI)", numeric=True)),
    overview=overview,
)
