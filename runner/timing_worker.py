"""A long-lived timing worker for one side: ``python -m perfcheck.runner.timing_worker SPEC REPLY_FD``.

The orchestrator keeps one worker per side alive and asks each, in alternation, for a round of
timed steps, so drift over the run hits base and head alike. Commands arrive as JSON lines on
stdin; replies go as JSON lines to REPLY_FD, a pipe of their own, so nothing the workload prints
can corrupt them.

Timing rules: warm up until compilation, autotuning and recompiles have stopped and step times
have settled, then a few steps more; time GPU steps with CUDA events and read them after one
synchronisation per round; no profiler; garbage collection off inside a round.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import torch

from perfcheck.runner import step as steps
from perfcheck.runner.dynamo_stats import compile_activity, compile_breakdown, compiled_frames
from perfcheck.runner.fingerprint import environment
from perfcheck.runner.loader import load_build
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec


class Timer:
    """Per-step wall time of device work: CUDA events on a GPU, the host clock on a CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.host_ms: list[float] = []

    def run(self, fn: Callable[[], Any], n: int, lead_in: int = 0) -> list[float]:
        """``n`` timed steps after ``lead_in`` untimed ones queued just before them: the first step
        after a synchronisation starts on an idle GPU and pays the host's launch latency, which is
        order, not code."""
        if self.cuda:
            marks = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)
            ]
            torch.cuda.synchronize()
            for _ in range(lead_in):
                fn()
            host = []
            for start, end in marks:
                t0 = time.perf_counter()
                start.record()
                fn()
                end.record()
                host.append((time.perf_counter() - t0) * 1000)
            torch.cuda.synchronize()
            # How long the host took to issue each step: when it is close to the device time, the
            # step is host-bound and host jitter shows in the timings.
            self.host_ms = host
            return [start.elapsed_time(end) for start, end in marks]
        for _ in range(lead_in):
            fn()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1000)
        return out


class BusyWork:
    """Extra work of a known duration, for planted slowdowns: a GPU sleep kernel or a host spin."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.seconds = 0.0
        self._cycles_per_s = self._calibrate() if self.cuda else 0.0

    @staticmethod
    def _calibrate() -> float:
        cycles = 20_000_000
        torch.cuda._sleep(cycles)  # first launch loads the kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return cycles / (start.elapsed_time(end) / 1000)

    def __call__(self) -> None:
        if self.seconds <= 0:
            return
        if self.cuda:
            torch.cuda._sleep(int(self.seconds * self._cycles_per_s))
            return
        deadline = time.perf_counter() + self.seconds
        while time.perf_counter() < deadline:
            pass


def pin_cpus(count: int = 4) -> list[int]:
    """Run this side's host work on the same few cores as the other side's.

    Host-bound steps (launch overhead, small kernels) otherwise differ by which cores each process
    happens to land on, a bias between two processes that pairing cannot cancel. Done after the
    compile, which wants every core.
    """
    try:
        available = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return []
    chosen = available[:count]
    try:
        os.sched_setaffinity(0, chosen)
    except OSError:
        return []
    torch.set_num_threads(max(1, min(torch.get_num_threads(), len(chosen))))
    return chosen


class Session:
    def __init__(self, spec: ProbeSpec) -> None:
        self.spec = spec
        self.timer = Timer(spec.device)
        self.busy: BusyWork | None = None
        self.step_ms = 0.0  # the settled step time, which a planted slowdown is a share of
        self.warmup_trace: list[dict[str, Any]] = []  # per block: step times, whether anything compiled
        self.run_step: Callable[[], Any] = lambda: None
        self.one: Callable[[], Any] = lambda: None
        self.frames_after_warmup = 0

    def setup(self) -> dict[str, Any]:
        spec, cfg, wl = self.spec, self.spec.timing, self.spec.workload
        torch._dynamo.reset()
        model, inputs = load_build(wl.entry, Path(spec.tree))(spec.device)
        inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        model = steps.prepare(model, wl.train)
        optimizer = steps.frozen_optimizer(model) if wl.train else None
        target = (
            torch.compile(
                model, backend=spec.compile.backend, mode=spec.compile.mode, dynamic=spec.compile.dynamic
            )
            if cfg.compiled
            else model
        )
        step = steps.make_step(target, wl.train, wl.amp, spec.device, optimizer)
        if spec.device == "cuda":
            torch.cuda.reset_peak_memory_stats()

        def one() -> None:
            step(*inputs)

        start = time.perf_counter()
        one()
        steps.synchronize(spec.device)
        cold = time.perf_counter() - start

        def timed() -> None:
            one()
            if self.busy is not None:
                self.busy()

        self.run_step = timed
        self.one = one
        return {
            "mode": "compiled" if cfg.compiled else "eager",
            "backend": spec.compile.backend if cfg.compiled else None,
            "batch_size": steps.batch_size(inputs),
            "cold_compile_s": round(cold, 4) if cfg.compiled else None,
            "compile_breakdown_s": compile_breakdown() if cfg.compiled else {},
            "first_step_ms": round(cold * 1000, 3),
            "environment": environment(spec.device).model_dump(),
        }

    def warmup(self) -> dict[str, Any]:
        """Run alone (the other side idle): steady state measured under contention is no steady state."""
        cfg = self.spec.timing
        pinned = pin_cpus()
        warm_steps, converged, block_medians = self._warm_up(self.one)
        self.step_ms = block_medians[-1]
        self.plant(self.spec.planted_slowdown_pct)
        if cfg.warmup_extra_steps:
            self.timer.run(self.run_step, cfg.warmup_extra_steps)
        if self.spec.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        self.frames_after_warmup = compiled_frames()
        gc.collect()
        gc.freeze()  # long-lived objects out of the collector's way for the timed rounds
        return {
            "warmup_steps": warm_steps,
            "warmup_converged": converged,
            "warmup_block_medians_ms": [round(m, 4) for m in block_medians],
            "warmup_trace": self.warmup_trace,
            "cpus": pinned,
        }

    def _warm_up(self, one: Callable[[], None]) -> tuple[int, bool, list[float]]:
        """Blocks of steps until nothing compiles any more and two block medians in a row agree."""
        cfg = self.spec.timing
        done, settled, means = 0, 0, []
        while done < cfg.warmup_max_steps:
            before = compile_activity()
            times = self.timer.run(one, cfg.warmup_block)
            block = median(times)  # like the rounds: one interrupted step must not reset the count
            done += cfg.warmup_block
            quiet = compile_activity() == before
            close = bool(means) and abs(block - means[-1]) <= means[-1] * cfg.warmup_tolerance_pct / 100
            settled = settled + 1 if quiet and close else 0
            means.append(block)
            self.warmup_trace.append({"steps_ms": [round(t, 4) for t in times], "compiled": not quiet})
            if settled >= 2:
                return done, True, means
        return done, False, means

    def plant(self, pct: float) -> dict[str, Any]:
        """Benchmark-only: add busy work of ``pct`` % of the step time to every step.

        The step time is measured afresh, here, while the other side waits, so the size of the
        planted slowdown is right even if the machine got faster or slower since warm-up."""
        if pct and self.busy is None:
            self.busy = BusyWork(self.spec.device)
        if self.busy is not None:
            self.busy.seconds = 0.0
            if pct:
                self.step_ms = median(self.timer.run(self.one, 20))
            self.busy.seconds = self.step_ms / 1000 * pct / 100
        return {"planted_slowdown_pct": pct, "step_ms": self.step_ms}

    def round(self, n: int) -> dict[str, Any]:
        # The side that just sat idle while the other ran pays a wake-up cost (cold caches, idle
        # threads, an empty GPU queue): an untimed lead-in step absorbs it.
        gc.disable()
        try:
            times = self.timer.run(self.run_step, n, lead_in=1)
        finally:
            gc.enable()
        # The round's median: robust to an OS interruption landing on one step of the round.
        host = self.timer.host_ms
        return {
            "median_ms": median(times),
            "times_ms": [round(t, 5) for t in times],
            "host_median_ms": median(host) if host else None,
        }

    def finish(self) -> dict[str, Any]:
        if self.spec.device == "cuda":
            peak, kind = torch.cuda.max_memory_allocated() / 2**20, "cuda_max_allocated"
        else:
            peak, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_rss"
        return {
            "peak_memory_mb": round(peak, 2),
            "memory_kind": kind,
            "recompiles_during_timing": compiled_frames() - self.frames_after_warmup,
        }


def serve(spec: ProbeSpec, reply: Any) -> None:
    session = Session(spec)
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "setup": lambda _: session.setup(),
        "warmup": lambda _: session.warmup(),
        "round": lambda msg: session.round(int(msg["steps"])),
        "plant": lambda msg: session.plant(float(msg["pct"])),
        "finish": lambda _: session.finish(),
    }
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("cmd") == "quit":
            return
        try:
            answer = {"ok": True, **handlers[msg["cmd"]](msg)}
        except Exception as err:  # reported to the orchestrator, which turns it into a finding
            frames = traceback.extract_tb(err.__traceback__)
            where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
            answer = {"ok": False, "error": f"{type(err).__name__}: {str(err).strip()[:2000]}{where}"}
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m perfcheck.runner.timing_worker SPEC.json REPLY_FD", file=sys.stderr)
        return 2
    spec = load_model(ProbeSpec, Path(args[0]).read_bytes(), args[0])
    with os.fdopen(int(args[1]), "w") as reply:
        serve(spec, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
