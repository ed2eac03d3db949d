"""One sweep point in a fresh process: ``python -m perfcheck.runner.sweep_worker SPEC.json RESULT.json``.

Compiles the workload with the point's settings, times the cold first step (the compile), warms
up until nothing compiles any more, then times ``steps`` steps. Anything the workload or
torch.compile raises becomes a ``crashed`` measurement with a readable message; a death by
signal or a hang is seen by the orchestrator, which owns the timeout.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import torch

from perfcheck.runner import step as steps
from perfcheck.runner.dynamo.stats import compile_activity
from perfcheck.runner.process.channel import write_result
from perfcheck.runner.process.end import run_and_end
from perfcheck.runner.process.loader import call_build, load_build
from perfcheck.runner.reuse.fingerprint import environment
from perfcheck.runner.timing.peak_memory import peak_rss_mb
from perfcheck.runner.timing.worker import Timer
from perfcheck.schema import load_model
from perfcheck.sweep_schema import PointMeasurement, PointSpec, SweepPoint

# Warm-up blocks repeat while something compiles (recompiles, cudagraph recording), up to this many.
MAX_WARMUP_BLOCKS = 20


def compile_kwargs(backend: str, point: SweepPoint) -> dict[str, Any]:
    """torch.compile's arguments for ``point``.

    torch.compile refuses a mode together with options, so for inductor the mode is spelled out
    as the options it stands for and the point's own options are laid over them."""
    kwargs: dict[str, Any] = {"backend": backend, "dynamic": point.dynamic}
    if point.options is None:
        kwargs["mode"] = point.mode
    elif point.mode is not None and backend == "inductor":
        import torch._inductor

        kwargs["options"] = {**torch._inductor.list_mode_options(point.mode, point.dynamic), **point.options}
    else:
        kwargs["mode"], kwargs["options"] = point.mode, point.options
    return kwargs


def _peak_memory(device: str) -> tuple[float, str]:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20, "cuda_max_allocated"
    return peak_rss_mb(), "peak_rss"


def measure(spec: PointSpec) -> PointMeasurement:
    wl = spec.workload
    torch._dynamo.reset()
    built = call_build(load_build(wl.entry, Path(spec.tree)), spec.device)
    model, inputs = built.model, built.inputs
    model = steps.prepare(model, wl.train)
    optimizer = steps.frozen_optimizer(model) if wl.train else None
    compiled = torch.compile(model, **compile_kwargs(spec.backend, spec.point))
    step = steps.make_step(compiled, wl.train, wl.amp, spec.device, optimizer)

    def one() -> None:
        step(*inputs)

    start = time.perf_counter()
    one()
    steps.synchronize(spec.device)
    cold = time.perf_counter() - start
    timer = Timer(spec.device)
    for _ in range(MAX_WARMUP_BLOCKS):
        before = compile_activity()
        timer.run(one, spec.warmup_steps)
        if compile_activity() == before:
            break
    if spec.device == "cuda":
        # Steady-state memory of a step, not the compiler's or the autotuner's own allocations.
        torch.cuda.reset_peak_memory_stats()
    times = timer.run(one, spec.steps)
    peak, kind = _peak_memory(spec.device)
    return PointMeasurement(
        status="ok",
        step_ms=round(median(times), 5),
        peak_mb=round(peak, 2),
        memory_kind=kind,  # type: ignore[arg-type]
        compile_s=round(cold, 4),
        environment=environment(spec.device),
    )


def run(spec: PointSpec) -> PointMeasurement:
    try:
        return measure(spec)
    except (Exception, SystemExit) as err:  # the point failed; the sweep goes on
        first = (str(err).strip().splitlines() or [""])[0]
        return PointMeasurement(status="crashed", message=f"{type(err).__name__}: {first}"[:2000])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m perfcheck.runner.sweep_worker SPEC.json fd:N|RESULT.json", file=sys.stderr)
        return 2
    spec = load_model(PointSpec, Path(args[0]).read_bytes(), args[0])
    write_result(args[1], run(spec).model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    run_and_end(main)
