"""``kernel_mix_changed``: the profile probe's kernels (or CPU ops) of base and head, compared.

A kernel (or op) that runs on one side only is a structural difference and always counts. A time
change counts when it exceeds ``profile.min_change_pct`` of the base step's kernel time: profiled
times are noisy, and the timing probe owns the verdict on speed, so this finding is a warning
that explains, never a failure.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.core.probes.kind import Compared, ProbeKind, entries_beside
from perfcheck.core.trace.diff import Change, diff_times
from perfcheck.core.trace.names import short_name
from perfcheck.measures import Strict
from perfcheck.schema import Finding, ProbeResult, Review, probe_metrics
from perfcheck.settings import SettingsView

# How many kernels a profile result lists at most (largest first). A list this long was cut, so a
# name missing from it may simply be too small to be listed, not absent.
LISTED_LIMIT = 500
_NAMES_IN_MESSAGE = 3
_NAMES_IN_EVIDENCE = 50


class KernelStat(Strict):
    name: str
    kind: Literal["compute", "communication", "memory", "cpu_op"]
    count: int = Field(ge=0)
    total_us: float = Field(ge=0)


class TraceMetrics(Strict):
    """A profile pass (never the timing run): per-kernel totals over the profiled steps."""

    steps: int = Field(ge=1)
    kernels: list[KernelStat] = Field(description="GPU kernels, or CPU ops when no GPU ran")
    idle_pct: float | None = Field(default=None, ge=0, le=100)
    compute_pct: float | None = Field(default=None, ge=0, le=100)
    non_compute_pct: float | None = Field(default=None, ge=0, le=100)
    comm_overlap_pct: float | None = Field(default=None, ge=0, le=100)
    trace_file: str | None = Field(
        default=None, description="the Kineto trace, relative to the output folder"
    )


class ProfileSettings(BaseModel):
    """The `profile:` section of perfcheck.yml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=5, ge=1, description="profiled steps, after warm-up")
    top_kernels: int = Field(
        default=10, ge=1, description="kernels listed in the profile's finding of a changed kernel mix"
    )
    min_change_pct: float = Field(
        default=5.0, ge=0, description="per-kernel time change, in % of the step's kernel time, that counts"
    )


def per_step(metrics: TraceMetrics) -> dict[str, float]:
    return {k.name: k.total_us / metrics.steps for k in metrics.kernels}


def on_gpu(metrics: TraceMetrics) -> bool:
    return any(k.kind != "cpu_op" for k in metrics.kernels)


def _listing_floor(metrics: TraceMetrics) -> float:
    """Per-step time under which a kernel may be missing from a cut list without being absent."""
    if len(metrics.kernels) < LISTED_LIMIT:
        return 0.0
    return min(k.total_us for k in metrics.kernels) / metrics.steps


def _known(change: Change, base: TraceMetrics, head: TraceMetrics) -> bool:
    if change.status == "added":
        return (change.head_us or 0.0) > _listing_floor(base)
    if change.status == "removed":
        return (change.base_us or 0.0) > _listing_floor(head)
    return True


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _names(changes: list[Change]) -> str:
    shown = ", ".join(f"`{short_name(c.name, 60)}`" for c in changes[:_NAMES_IN_MESSAGE])
    return shown + (", …" if len(changes) > _NAMES_IN_MESSAGE else "")


def _breakdown(base: TraceMetrics, head: TraceMetrics) -> dict[str, list[float | None]]:
    fields = ("idle_pct", "compute_pct", "non_compute_pct", "comm_overlap_pct")
    return {
        f: [getattr(base, f), getattr(head, f)]
        for f in fields
        if getattr(base, f) is not None or getattr(head, f) is not None
    }


def _message(what: str, added: list[Change], removed: list[Change], timed: list[Change], pct: float) -> str:
    parts = []
    if added:
        parts.append(f"{len(added)} new ({_names(added)})")
    if removed:
        parts.append(f"{len(removed)} gone ({_names(removed)})")
    if timed:
        share = f"{pct:g} % of the step's {what} time"
        parts.append(f"{len(timed)} changed by more than {share} ({_names(timed)})")
    return f"{what} mix per step changed: " + "; ".join(parts)


def findings(workload: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> list[Finding]:
    b, h = probe_metrics(base, TraceMetrics), probe_metrics(head, TraceMetrics)
    if b is None or h is None or not b.kernels or not h.kernels or on_gpu(b) != on_gpu(h):
        return []  # nothing to compare, or GPU kernels against CPU ops
    base_times, head_times = per_step(b), per_step(h)
    step_us = sum(base_times.values())
    settings = config.section(ProfileSettings)
    threshold = step_us * settings.min_change_pct / 100
    changes = [c for c in diff_times(base_times, head_times) if _known(c, b, h)]
    added = [c for c in changes if c.status == "added"]
    removed = [c for c in changes if c.status == "removed"]
    timed = [c for c in changes if c.status == "changed" and abs(c.delta_us) > threshold]
    if not (added or removed or timed):
        return []
    kinds = {k.name: k.kind for k in [*b.kernels, *h.kernels]}
    counted = sorted([*added, *removed, *timed], key=lambda c: (-abs(c.delta_us), c.name))
    what = "kernel" if on_gpu(b) else "CPU op"
    evidence: dict[str, Any] = {
        "unit": "us per step",
        "steps": [b.steps, h.steps],
        "step_us": [_r(step_us), _r(sum(head_times.values()))],
        "threshold_us": _r(threshold),
        "added": [c.name for c in added[:_NAMES_IN_EVIDENCE]],
        "removed": [c.name for c in removed[:_NAMES_IN_EVIDENCE]],
        "changes": [
            {
                "name": c.name,
                "kind": kinds.get(c.name),
                "status": c.status,
                "base_us": _r(c.base_us),
                "head_us": _r(c.head_us),
                "delta_us": _r(c.delta_us),
            }
            for c in counted[: settings.top_kernels]
        ],
        "breakdown": _breakdown(b, h),
        "trace_files": [b.trace_file, h.trace_file],
    }
    return [
        Finding(
            category="kernel_mix_changed",
            severity="warning",
            workload=workload,
            probe="profile",
            message=_message(what, added, removed, timed, settings.min_change_pct),
            evidence=evidence,
        )
    ]


def trace_files(review: Review) -> dict[str, tuple[str, str]]:
    """Per workload, the Kineto traces the profile probe wrote (base, head; relative to the output
    folder), where both sides wrote one: what the matrix's verify commands name
    (perfcheck/core/matrix.py ``where_of``)."""
    traces = {}
    for wl in review.workloads:
        b = next((t for r in wl.base if (t := probe_metrics(r, TraceMetrics))), None)
        h = next((t for r in wl.head if (t := probe_metrics(r, TraceMetrics))), None)
        if b is not None and h is not None and b.trace_file and h.trace_file:
            traces[wl.name] = (b.trace_file, h.trace_file)
    return traces


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    return Compared(findings(wl, base, head, config))


PROBE = ProbeKind(
    name="profile",
    summary="a profiler pass of its own: per-kernel time, added and removed kernels, time breakdown",
    compare=compare,
    settings=ProfileSettings,
    metrics=TraceMetrics,
    run="perfcheck.runner.probes.profile_probe:run",
    categories=entries_beside(__file__),  # profile.yml: its own categories' entries
    prior_s={"cpu": 15.0, "cuda": 40.0},
)
