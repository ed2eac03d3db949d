"""Device figures from a profiled window: a recorded H200 trace, and hand-made events."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from perfcheck.measures import DeviceStep
from perfcheck.runner.timing.device_metrics import device_step, from_trace, pooled

DATA = Path(__file__).parent / "data"


def test_the_recorded_h200_device_pass_gives_the_figures_recorded_beside_it(tmp_path: Path) -> None:
    # tests/data/README.md: one device pass of the built-in MLP on the H200, three steps.
    recorded = json.loads((DATA / "h200-device-pass.json").read_text())["figures"]
    trace = tmp_path / "trace.json"
    trace.write_bytes(gzip.decompress((DATA / "h200-device-pass.trace.json.gz").read_bytes()))
    figures = from_trace(trace, recorded["steps"], recorded["profiled_step_ms"])
    assert figures.kernels == recorded["kernels"] == 20.0
    assert figures.busy_ms == pytest.approx(recorded["busy_ms"])
    assert figures.kernel_ms == pytest.approx(recorded["kernel_ms"])
    assert (figures.memset, figures.memset_bytes) == (1.0, 4.0)
    # the union of intervals can never exceed the sum of the kernels in it plus the copies
    assert figures.kernel_ms <= figures.busy_ms + 1e-9


def test_overlapping_kernels_count_once_in_device_time_and_cpu_events_not_at_all() -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "a", "ts": 0.0, "dur": 100.0},
        {"ph": "X", "cat": "kernel", "name": "b", "ts": 50.0, "dur": 100.0},  # another stream, overlapping
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoH",
            "ts": 300.0,
            "dur": 10.0,
            "args": {"bytes": 8},
        },
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 400.0, "dur": 5.0, "args": {"bytes": "x"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 1000.0},
        {"ph": "f", "cat": "ac2g", "name": "flow", "ts": 0.0},
        {"ph": "X", "cat": "kernel", "name": "no time", "ts": "soon", "dur": None},
    ]
    figures = device_step(events, steps=2, profiled_step_ms=1.0)
    assert figures.busy_ms == pytest.approx((150 + 10 + 5) / 1000 / 2)
    assert figures.kernel_ms == pytest.approx(200 / 1000 / 2)
    assert figures.kernels == 1.5  # three kernel events over two steps
    assert (figures.memcpy, figures.memcpy_bytes) == (0.5, 4.0)
    assert (figures.memset, figures.memset_bytes) == (0.5, 0.0)  # a size that is no number counts as none


def test_two_device_passes_pool_into_one_by_their_steps() -> None:
    first = {
        "steps": 10,
        "busy_ms": 3.9,
        "kernel_ms": 3.8,
        "kernels": 41.0,
        "profiled_step_ms": 4.0,
        "pass_s": 0.1,
    }
    second = {**first, "busy_ms": 3.84, "kernel_ms": 3.74, "pass_s": 0.2}
    both = pooled([first, second])
    assert both["steps"] == 20 and both["kernels"] == 41.0 and both["pass_s"] == 0.3
    assert abs(both["busy_ms"] - 3.87) < 1e-12 and abs(both["kernel_ms"] - 3.77) < 1e-12
    DeviceStep.model_validate({k: v for k, v in both.items() if k in DeviceStep.model_fields})
    assert pooled([first]) == {**first, "pass_s": 0.1}
