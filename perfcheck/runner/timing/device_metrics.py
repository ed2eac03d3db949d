"""Per-step device figures from the GPU activity of a profiled window. Torch-free.

The window holds exactly ``steps`` steps: the device pass synchronises before opening and before
closing it, so no kernel of a neighbouring step runs inside and none of these is cut off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfcheck.core.trace.intervals import covered, merge
from perfcheck.measures import DeviceStep

# Kineto's categories of GPU-side activity (CPU-side runtime calls are "cuda_runtime").
_KERNEL, _MEMCPY, _MEMSET = "kernel", "gpu_memcpy", "gpu_memset"


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def device_step(events: Iterable[Mapping[str, Any]], steps: int, profiled_step_ms: float) -> DeviceStep:
    """Device time (the union of GPU activity intervals), kernel time and counts, per step."""
    spans: list[tuple[float, float]] = []
    kernel_us = 0.0
    counts = {_KERNEL: 0, _MEMCPY: 0, _MEMSET: 0}
    nbytes = {_MEMCPY: 0.0, _MEMSET: 0.0}
    for e in events:
        cat = e.get("cat")
        if cat not in counts or e.get("ph") != "X":
            continue
        ts, dur = _number(e.get("ts")), _number(e.get("dur"))
        spans.append((ts, ts + dur))
        counts[cat] += 1
        if cat == _KERNEL:
            kernel_us += dur
        else:
            args = e.get("args")
            nbytes[cat] += _number(args.get("bytes")) if isinstance(args, dict) else 0.0
    per = 1.0 / steps
    return DeviceStep(
        steps=steps,
        busy_ms=round(covered(merge(spans)) / 1000 * per, 6),
        kernel_ms=round(kernel_us / 1000 * per, 6),
        kernels=round(counts[_KERNEL] * per, 4),
        memcpy=round(counts[_MEMCPY] * per, 4),
        memcpy_bytes=round(nbytes[_MEMCPY] * per, 1),
        memset=round(counts[_MEMSET] * per, 4),
        memset_bytes=round(nbytes[_MEMSET] * per, 1),
        profiled_step_ms=round(profiled_step_ms, 6),
    )


def from_trace(path: Path, steps: int, profiled_step_ms: float) -> DeviceStep:
    """The figures of a chrome trace the profiler exported (small: a few steps of one process)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return device_step((e for e in events if isinstance(e, dict)), steps, profiled_step_ms)


def pooled(passes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One process's device passes as one: each per-step figure the mean over passes weighted by
    their steps, the steps and the seconds the passes took added up."""
    steps = sum(int(p["steps"]) for p in passes)
    out: dict[str, Any] = {"steps": steps}
    for name in DeviceStep.model_fields:
        if name != "steps" and all(name in p for p in passes):
            out[name] = sum(float(p[name]) * int(p["steps"]) for p in passes) / steps
    if all("pass_s" in p for p in passes):
        out["pass_s"] = round(sum(float(p["pass_s"]) for p in passes), 3)
    return out
