"""One side's timing worker process: ``python -m perfcheck.runner.timing.worker SPEC fd:N``.

The orchestrator runs workers in pairs, one per side, several pairs per workload: the process is
the unit of replication. It asks each worker of a pair, in alternation, for rounds of timed steps,
then (on a GPU) for a device pass of its own, and, for the compile-latency samples, for one
cache-cold compile once the rounds are over. Commands and replies are JSON lines on the socket
``fd:N``, a channel of its own, so nothing the workload prints can corrupt them. On a CPU the
process is forked from a fork server that imported torch (perfcheck/runner/process/forkserver.py).

Timing rules: warm up until compilation, autotuning and recompiles have stopped and step times
have settled, then a few steps more; the host work of both sides runs on one and the same core
(two processes on different cores of a shared machine differ by which neighbours those cores
have, a bias between processes that no pairing of rounds removes); time GPU steps with CUDA
events and read them after one synchronisation per round; never time with the profiler on, and
profile in a pass of its own; garbage collection off inside a round.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from statistics import median
from typing import Any

import torch

from perfcheck.runner import step as steps
from perfcheck.runner.dynamo.stats import compile_activity, compile_breakdown, compiled_frames, reset
from perfcheck.runner.process.channel import PREFIX
from perfcheck.runner.process.end import run_and_end
from perfcheck.runner.process.loader import call_build, load_build
from perfcheck.runner.reuse.fingerprint import environment
from perfcheck.runner.timing.peak_memory import peak_rss_mb
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec

# Steps recorded by the profiler before its window opens: CUPTI's own start-up stays out of it.
PROFILER_WARMUP_STEPS = 1


class Timer:
    """Per-step wall time of device work: CUDA events on a GPU, the host clock on a CPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.host_ms: list[float] = []  # GPU: host time to issue each step of the last run

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
            # How long the host took to issue each step, timed in the same interleaved rounds as
            # the steps, so pairing cancels drift for it too. Where the step is host-bound this is
            # what bounds it; where it is device-bound the launch queue fills and the host waits.
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
    """Benchmark-only extra work of a known duration: a GPU sleep kernel and a host spin."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.device_s = 0.0
        self.host_s = 0.0
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
        if self.cuda:
            # Launched even when empty: a planted side and an unplanted one launch the same
            # kernels, so only time tells them apart.
            torch.cuda._sleep(int(self.device_s * self._cycles_per_s))
        if self.host_s > 0:
            deadline = time.perf_counter() + self.host_s
            while time.perf_counter() < deadline:
                pass


def pin_to(cpu: int | None) -> int | None:
    """Run every thread of this process on ``cpu``, the core the other side's threads use too.

    Every thread, not only the one that issues the steps: backward runs in the autograd engine's
    device thread, which torch started at the first step, and a thread left to wander lands on a
    different core in each process, with a different neighbour: a bias that lasts the process's
    life (measured on the H200, docs/benchmarks.md). The threads take turns (the issuing thread
    waits while backward runs), so one core costs them nothing. Done after the compile, which
    wants every core; threads started later inherit the mask.
    """
    if cpu is None:
        return None
    try:
        tasks = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tasks = [0]
    try:
        for task in tasks:
            with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                os.sched_setaffinity(task, {cpu})
    except (AttributeError, OSError):
        return None
    return cpu


class Session:
    def __init__(self, spec: ProbeSpec) -> None:
        self.spec = spec
        self.cuda = spec.device == "cuda"
        self.timer = Timer(spec.device)
        self.busy: BusyWork | None = BusyWork(spec.device) if spec.plant is not None else None
        self.run_step: Callable[[], Any] = lambda: None
        self.one: Callable[[], Any] = lambda: None
        self.frames_after_warmup = 0
        self.unplanted: dict[str, float] = {}  # device and host time before anything was planted
        self.cores = os.sched_getaffinity(0)  # before warm-up pins every thread to one of them

    def _compile_workers(self) -> bool:
        """Whether this worker's cache-cold compile wants Inductor's Triton compile workers: only
        where it builds every kernel anew (``compile.rebuild_kernels``), on a GPU."""
        spec = self.spec
        return (
            spec.latency is not None
            and self.cuda
            and spec.compile.backend == "inductor"
            and spec.compile.rebuild_kernels
        )

    def setup(self) -> dict[str, Any]:
        spec, cfg, wl = self.spec, self.spec.timing, self.spec.workload
        if self._compile_workers():
            from perfcheck.runner.latency.cold_compile import start_compile_workers

            start_compile_workers()
        if not self.cuda:
            # Set before the first op, so intra-op parallel regions never start more threads.
            torch.set_num_threads(cfg.cpu_threads)
        reset()
        began = time.monotonic()
        built = call_build(load_build(wl.entry, Path(spec.tree)), spec.device)
        built_s = time.monotonic() - began
        model, inputs = built.model, built.inputs
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

        def one() -> None:
            step(*inputs)

        start = time.perf_counter()
        one()
        steps.synchronize(spec.device)
        first = time.perf_counter() - start

        busy = self.busy

        def timed() -> None:
            one()
            if busy is not None:
                busy()

        self.run_step = timed
        self.one = one
        return {
            "mode": "compiled" if cfg.compiled else "eager",
            "backend": spec.compile.backend if cfg.compiled else None,
            "batch_size": steps.batch_size(inputs),
            "first_step_s": round(first, 4),
            # Where set-up went besides its imports (the orchestrator sees when it began, on the
            # same monotonic clock): building the model, its first (compiling) step.
            "began": began,
            "phases_s": {"build": round(built_s, 3), "first step": round(first, 3)},
            "compile_breakdown_s": compile_breakdown() if cfg.compiled else {},
            "threads": torch.get_num_threads() if not self.cuda else None,
            "environment": environment(spec.device).model_dump(),
        }

    def warmup(self, cpu: int | None) -> dict[str, Any]:
        """Run alone (the other side idle): steady state measured under contention is no steady state."""
        cfg = self.spec.timing
        pinned = pin_to(cpu)
        warm_steps, converged, block_minima = self._warm_up()
        if self.busy is not None:
            self.unplanted = {"device_ms": self.device(cfg.device_steps)["busy_ms"]} if self.cuda else {}
            times = self.timer.run(self.one, 20)
            self.unplanted["host_ms"] = median(self.timer.host_ms if self.cuda else times)
            self.plant(self.spec.plant.device_pct, self.spec.plant.host_pct)  # type: ignore[union-attr]
        if cfg.warmup_extra_steps:
            self.timer.run(self.run_step, cfg.warmup_extra_steps)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        self.frames_after_warmup = compiled_frames()
        gc.collect()
        gc.freeze()  # long-lived objects out of the collector's way for the timed rounds
        return {
            "warmup_steps": warm_steps,
            "warmup_converged": converged,
            "warmup_block_minima_ms": [round(m, 4) for m in block_minima],
            "step_ms": block_minima[-1],
            "cpu": pinned,
        }

    def _warm_up(self) -> tuple[int, bool, list[float]]:
        """Blocks of steps until nothing compiles any more and two block minima in a row agree:
        a block's fastest step, since a busy machine only ever adds time to the others."""
        cfg = self.spec.timing
        done, settled = 0, 0
        minima: list[float] = []
        while done < cfg.warmup_max_steps:
            before = compile_activity()
            block = min(self.timer.run(self.one, cfg.warmup_block))
            done += cfg.warmup_block
            quiet = compile_activity() == before
            close = bool(minima) and abs(block - minima[-1]) <= minima[-1] * cfg.warmup_tolerance_pct / 100
            settled = settled + 1 if quiet and close else 0
            minima.append(block)
            if settled >= 2:
                return done, True, minima
        return done, False, minima

    def plant(self, device_pct: float, host_pct: float) -> dict[str, Any]:
        """Benchmark-only: busy work of these shares of the unplanted device and host time."""
        if self.busy is None:
            raise RuntimeError("nothing can be planted: the spec asked for no plant")
        self.busy.device_s = self.unplanted.get("device_ms", 0.0) / 1000 * device_pct / 100
        self.busy.host_s = self.unplanted.get("host_ms", 0.0) / 1000 * host_pct / 100
        return {"device_pct": device_pct, "host_pct": host_pct, **self.unplanted}

    def round(self, n: int) -> dict[str, Any]:
        # The side that just sat idle while the other ran pays a wake-up cost (cold caches, idle
        # threads, an empty GPU queue): an untimed lead-in step absorbs it.
        gc.disable()
        try:
            times = self.timer.run(self.run_step, n, lead_in=1)
        finally:
            gc.enable()
        return {
            "times_ms": [round(t, 6) for t in times],
            "host_ms": [round(t, 6) for t in self.timer.host_ms],
        }

    def device(self, n: int, keep: Path | None = None) -> dict[str, Any]:
        """What the GPU does per step: CUPTI activity only (no CPU ops, shapes or stacks), in a
        window of exactly ``n`` steps queued as the rounds queue them. ``keep``: a copy of the
        trace goes there (benchmarks record it)."""
        from torch.profiler import ProfilerActivity, profile, schedule

        from perfcheck.runner.timing.device_metrics import from_trace

        if not self.cuda:
            raise RuntimeError("the device pass needs a CUDA device")
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="perfcheck-device-") as tmp:
            path = Path(tmp) / "trace.json"
            sched = schedule(wait=0, warmup=PROFILER_WARMUP_STEPS, active=1, repeat=1)
            with profile(
                activities=[ProfilerActivity.CUDA],
                schedule=sched,
                on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
            ) as prof:
                for _ in range(PROFILER_WARMUP_STEPS):
                    self.run_step()
                    torch.cuda.synchronize()
                    prof.step()
                # One profiler "step" holds the n steps, so the window closes after all of them.
                t0 = time.perf_counter()
                for _ in range(n):
                    self.run_step()
                torch.cuda.synchronize()
                wall_ms = (time.perf_counter() - t0) * 1000 / n
                prof.step()
            metrics = from_trace(path, n, wall_ms)
            if keep is not None:
                shutil.copyfile(path, keep)
        return {**metrics.model_dump(), "pass_s": round(time.perf_counter() - started, 3)}

    def latency(self) -> dict[str, Any]:
        """One cache-cold compile of a freshly built model, after the timed rounds (perfcheck/runner/
        cold_compile.py): this process compiled already (once more, untimed, where its set-up read
        the compiled model from the caches), so what a process pays once is paid, and it is idle,
        as is the other side's worker of its pair. The timed model goes first: two
        copies of a model that fills the GPU do not fit."""
        from perfcheck.runner.latency.cold_compile import cold_compile, on_cores, prime, wait_compile_workers
        from perfcheck.runner.probes.base import Workload

        spec = self.spec
        self.run_step = self.one = lambda: None  # the timed model and its step, no longer held
        gc.unfreeze()
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()

        def build() -> Workload:
            built = call_build(load_build(spec.workload.entry, Path(spec.tree)), spec.device)
            return Workload(spec.workload.name, built.model, built.inputs)

        with on_cores(self.cores):
            if self._compile_workers():
                wait_compile_workers()
            primed = prime(spec, build)  # its set-up read the compiled model from the caches
            sample = cold_compile(spec, build, None).model_copy(update={"primed": primed})
        return {"sample": sample.model_dump(mode="json")}

    def finish(self) -> dict[str, Any]:
        total = 0.0
        if self.cuda:
            peak, kind = torch.cuda.max_memory_allocated() / 2**20, "cuda_max_allocated"
            total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**20
        else:
            peak, kind = peak_rss_mb(), "peak_rss"
        return {
            "peak_memory_mb": round(peak, 2),
            "device_memory_mb": round(total, 1),  # how much may wait idle beside it (latency_stage)
            "memory_kind": kind,
            "recompiles": compiled_frames() - self.frames_after_warmup,
        }


def _rejected_by_torch(err: BaseException) -> bool:
    """torch.compile raising inside torch on the side's code (Dynamo, fake tensors, a backend)."""
    exc = sys.modules.get("torch._dynamo.exc")  # not loaded: nothing was compiled to raise it
    return exc is not None and isinstance(err, exc.TorchDynamoException)


def serve(spec: ProbeSpec, commands: Iterable[str], reply: Any) -> None:
    session = Session(spec)
    handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "setup": lambda _: session.setup(),
        "warmup": lambda msg: session.warmup(msg.get("cpu")),
        "round": lambda msg: session.round(int(msg["steps"])),
        "device": lambda msg: session.device(int(msg["steps"])),
        "plant": lambda msg: session.plant(float(msg["device_pct"]), float(msg["host_pct"])),
        "finish": lambda _: session.finish(),
        "latency": lambda _: session.latency(),
    }
    for line in commands:
        msg = json.loads(line)
        if msg.get("cmd") == "quit":
            return
        try:
            answer = {"ok": True, **handlers[msg["cmd"]](msg)}
        except Exception as err:  # reported to the orchestrator, which turns it into a finding
            frames = traceback.extract_tb(err.__traceback__)
            where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
            answer = {
                "ok": False,
                # torch.compile rejecting the side's code is the compile probe's finding to make;
                # this side is then not timed, and the worker did not crash.
                "status": "failed" if _rejected_by_torch(err) else "crashed",
                "error": f"{type(err).__name__}: {str(err).strip()[:2000]}{where}",
            }
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].removeprefix(PREFIX).isdigit():
        print("usage: python -m perfcheck.runner.timing.worker SPEC.json fd:N (a socket)", file=sys.stderr)
        return 2
    spec = load_model(ProbeSpec, Path(args[0]).read_bytes(), args[0])
    with (
        socket.socket(fileno=int(args[1].removeprefix(PREFIX))) as channel,
        channel.makefile("r", encoding="utf-8") as commands,
        channel.makefile("w", encoding="utf-8") as reply,
    ):
        serve(spec, commands, reply)
    return 0


if __name__ == "__main__":
    run_and_end(main)
