"""The profile probe: a profiler pass of its own (never the timing run), summarised per kernel.

The workload is built and stepped as the timing probe does it (compiled when ``timing.compiled``,
else eager), warmed up past compilation, and then ``profile.steps + 1`` steps are recorded with
ProfilerStep markers. The extra step is there to be dropped: as in HolisticTraceAnalysis, the
last step is left out because its GPU work may be cut off when the profiler stops. The Kineto
trace is kept beside the probe's result and summarised by ``bot.trace``, the same code the bot
and ``perfcheck trace`` use, so every figure can be checked against the file.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch.profiler import ProfilerActivity

from perfcheck.core.probes.profile import LISTED_LIMIT, KernelStat, ProfileSettings, TraceMetrics
from perfcheck.core.trace.summary import OpTotal, TraceSummary, summarize
from perfcheck.runner import step as steps
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.spec import ProbeSpec, side_files

WARMUP_STEPS = 3
TRACE_SUFFIX = ".pt.trace.json.gz"
# Operator calls (aten::addmm, a custom mylib::op) rather than profiler and Dynamo markers
# ("Torch-Compiled Region: 0/0", "autograd::engine::evaluate_function: ..."), whose self time is
# bookkeeping, not the model.
_OPERATOR = re.compile(r"^\w+::\w+(\.\w+)?$")


def trace_location(spec: ProbeSpec) -> tuple[Path, str]:
    """Where the trace goes, and the name to record for it (relative to the output folder).

    The worker runs as ``worker OUT/probes/<stem>.spec.json OUT/probes/<stem>.json`` and the
    probe interface carries no output path, so the trace goes beside the spec file it was given.
    Outside a worker (a direct call) it goes to a fresh temporary folder, recorded absolute.
    """
    name = f"{spec.side}-{spec.workload.name}-profile{TRACE_SUFFIX}"
    argv = sys.argv
    if len(argv) >= 2 and argv[1].endswith(".spec.json") and Path(argv[1]).is_file():
        probes = Path(argv[1]).resolve().parent
        # The side's own folder of files: the one place of the review's a sandboxed side writes.
        folder = side_files(probes, spec.side)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / name, str((folder / name).relative_to(probes.parent))
    path = Path(tempfile.mkdtemp(prefix="perfcheck-profile-")) / name
    return path, str(path)


def _stat(op: OpTotal) -> KernelStat:
    # The contract has no "other" kind (HTA's synchronisation events); like memory, it is
    # non-compute time.
    kind = "memory" if op.kind == "other" else op.kind
    total = round(max(op.total_us, 0.0), 3)
    return KernelStat(name=op.name, kind=kind, count=op.count, total_us=total)  # type: ignore[arg-type]


def metrics(summary: TraceSummary, steps_asked: int, trace_file: str) -> TraceMetrics:
    """The probe's result from a trace summary: GPU kernels when any ran, else operator calls."""
    ops = summary.kernels or tuple(op for op in summary.cpu_ops if _OPERATOR.match(op.name))
    breakdown = summary.breakdown
    overlap = summary.comm_overlap_pct
    return TraceMetrics(
        steps=summary.steps or steps_asked,
        kernels=[_stat(op) for op in ops[:LISTED_LIMIT]],
        idle_pct=round(breakdown.idle_pct, 3) if breakdown else None,
        compute_pct=round(breakdown.compute_pct, 3) if breakdown else None,
        non_compute_pct=round(breakdown.non_compute_pct, 3) if breakdown else None,
        comm_overlap_pct=round(overlap, 3) if overlap is not None else None,
        trace_file=trace_file,
    )


def _export(path: Path) -> Callable[[Any], None]:
    def ready(prof: Any) -> None:
        prof.export_chrome_trace(str(path))

    return ready


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: ProfileSettings) -> ProbeOutput:
    wl, cfg = spec.workload, settings
    torch._dynamo.reset()
    built = build()
    model = steps.prepare(built.model, wl.train)
    optimizer = steps.frozen_optimizer(model) if wl.train else None
    target = (
        torch.compile(
            model, backend=spec.compile.backend, mode=spec.compile.mode, dynamic=spec.compile.dynamic
        )
        if spec.timing.compiled
        else model
    )
    step = steps.make_step(target, wl.train, wl.amp, spec.device, optimizer)
    for _ in range(WARMUP_STEPS):
        step(*built.inputs)
    steps.synchronize(spec.device)

    path, recorded = trace_location(spec)
    activities = [ProfilerActivity.CPU]
    if spec.device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    active = cfg.steps + 1
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=active, repeat=1)
    with torch.profiler.profile(
        activities=activities, schedule=schedule, on_trace_ready=_export(path)
    ) as prof:
        for i in range(1 + active):
            step(*built.inputs)
            if i == active:
                steps.synchronize(spec.device)
            prof.step()
    return ProbeOutput(metrics=metrics(summarize(path), cfg.steps, recorded))
