"""One cache-cold compile of a freshly built model, timed (and, under callgrind, counted) per stage.

What a cold compile costs is measured on compiles that find every compiler cache empty (a fresh
Inductor/Triton/AOTAutograd cache each, Dynamo reset, sympy's cache cleared) in a process that has
compiled once already: that first compile pays what a process pays once whatever the code (lazy
imports, Inductor's CPU-ISA probes and first C++ toolchain runs, CUDA and Triton start-up), and it
swamps the difference between two trees. Measured on the demo's classifier under Inductor on a
2-core CPU: the first compile of a process took 10.5-11 s, of which 8.7 s were ten C++ builds, the
next fresh-cache compiles 3.1-3.2 s, within 3 % of each other.

A process that has compiled "once already" must have traced and lowered a graph itself: one whose
compiled code was only read from the caches handed out (an FX-graph or AOTAutograd cache hit, as
a timing worker's set-up is) has not, and its first cache-cold compile pays those first runs too.
Measured on a 6-layer MLP's training step under Inductor on the 2-core CPU: after a warm-up that
compiled in full, cache-cold compiles took 2.07-2.17 s; after one that read both graphs from the
caches, the first took 2.63 s (AOTAutograd 0.64 s against 0.34 s) and the next ones 2.11 s. Two
sides whose warm-ups differ so (a base reused from a store whose cache does not match this
review's tree, a head whose cache is base's copy) read as a slower compile where nothing changed.
``prime`` makes one untimed cache-cold compile first wherever the process's warm-up read from the
caches, so every sample is taken in a process that has done the whole path once.

Three kinds of process run it: a timing worker after its timed rounds (the default: both sides'
processes of a pair are there already, warm, and idle), and where no timing runs, a process of its
own a side, both at once, by wall clock or under callgrind (perfcheck/runner/probes/compile_latency_probe.py).
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import torch
import torch._dynamo

from perfcheck.measures import CompileSample
from perfcheck.runner import step as steps
from perfcheck.runner.latency.callgrind import Counter
from perfcheck.runner.probes.base import Workload
from perfcheck.spec import ProbeSpec

# torch's compile events (dynamo_timed phases) and the stage each one opens; the innermost open
# event decides, as torch's own calculate_time_spent splits it.
_STAGE_OF_EVENT = {
    "entire_frame_compile": "dynamo",
    "backend_compile": "aot_autograd",
    "entire_backward_compile": "aot_autograd",  # a training step compiles backward lazily
    "inductor_compile": "inductor",
}


class _Stages:
    """Seconds (and, under callgrind, instructions) per stage of one compile: every transition
    between stages closes a segment, attributed to the stage that was open."""

    def __init__(self, counter: Counter | None) -> None:
        self.counter = counter
        self.open: list[str] = []
        self.seconds: dict[str, float] = {}
        self.labels: list[str] = []  # the stage of each callgrind dump, in order
        self._since = time.perf_counter()

    def current(self) -> str:
        return self.open[-1] if self.open else "other"

    def close_segment(self) -> None:
        now = time.perf_counter()
        stage = self.current()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._since
        self._since = now
        if self.counter is not None:
            self.labels.append(stage)
            self.counter.dump(stage)

    def event(self, name: str, starting: bool) -> None:
        stage = _STAGE_OF_EVENT.get(name)
        if stage is None:
            return
        self.close_segment()
        if starting:
            self.open.append(stage)
        elif stage in self.open:
            del self.open[len(self.open) - 1 - self.open[::-1].index(stage)]


@contextmanager
def _watching(stages: _Stages) -> Iterator[None]:
    """torch's chromium event logger, wrapped so that each compile phase's start and end reach
    ``stages``; the logger is one object per process."""
    logger: Any = torch._dynamo.utils.get_chromium_event_logger()
    start, end = logger.log_event_start, logger.log_event_end

    def on_start(event_name: str, *args: Any, **kwargs: Any) -> Any:
        stages.event(event_name, True)
        return start(event_name, *args, **kwargs)

    def on_end(event_name: str, *args: Any, **kwargs: Any) -> Any:
        out = end(event_name, *args, **kwargs)
        stages.event(event_name, False)
        return out

    logger.log_event_start, logger.log_event_end = on_start, on_end
    try:
        yield
    finally:
        logger.log_event_start, logger.log_event_end = start, end


def _fresh_state() -> None:
    """Forget everything an earlier compile of this process left to reuse."""
    import sympy.core.cache  # type: ignore[import-untyped]

    torch._dynamo.reset()
    sympy.core.cache.clear_cache()  # Inductor's shape reasoning warms it; a fresh process has it cold
    gc.collect()


@contextmanager
def _no_gc() -> Iterator[None]:
    """The collector off in the region: when it runs depends on what earlier code allocated and
    its cost on the addresses of what it finds, noise in a count meant to see the compiler only."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def start_compile_workers() -> None:
    """Start Inductor's pool of Triton compile worker processes, not waiting for it.

    A fresh process starts it at its first compile; a timing worker, which only read compiled code
    from a warm cache, never did, and its cache-cold compile would pay the start (each worker
    imports torch: seconds) on top of the compile. Started as the process sets up, the workers
    import while every pair is setting up anyway, and sit idle through the timed rounds. GPU only:
    on a CPU Inductor builds C++ kernels on threads, and this pool would only cost imports."""
    from torch._inductor.async_compile import AsyncCompile

    AsyncCompile.warm_pool()
    AsyncCompile.use_process_pool()  # submits the job that starts the workers


def wait_compile_workers() -> None:
    from torch._inductor.async_compile import AsyncCompile

    wait = getattr(AsyncCompile, "wait_pool_ready", None)  # torch >= 2.9
    if wait is not None:
        wait()


def _threads() -> list[int]:
    """The ids of this process's threads (0, the calling one, where /proc cannot say)."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _set_all(cores: set[int]) -> None:
    for task in _threads():
        with suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(task, cores)


@contextmanager
def on_cores(cores: set[int]) -> Iterator[None]:
    """Every thread of this process on ``cores`` while inside, and back on the core it was pinned
    to after: a timing worker keeps all its threads to one core for its rounds (timing_worker's
    ``pin_to``), and a compile wants all it may use, in every thread. The calling thread alone
    is not enough: a training step on a GPU compiles its backward lazily, in the autograd
    engine's device thread, and left on the timing core the backward compiles of all the samples
    made at once would share that one core (looked into when six ResNet-50 samples made at once on
    the H200 took 144 s together, where six of a Llama took 33 s)."""
    pinned = os.sched_getaffinity(0)
    try:
        _set_all(cores)
        yield
    finally:
        _set_all(pinned)


@contextmanager
def _compiler_caches_off() -> Iterator[None]:
    """Torch's compiler caches out of the way, the kernels' not: Dynamo, AOTAutograd and Inductor
    run in full (no FX-graph or AOTAutograd cache, Inductor's in-memory caches cleared), and each
    kernel they generate is looked up in the process's kernel cache by its source (Triton's
    binaries, the C++ libraries, their autotuning results) and built only where it is new. In
    process: one thread, no pool of compile workers to start."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import clear_caches

    clear_caches()
    with (
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False, compile_threads=1),
        functorch_config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=False),
    ):
        yield


def cold_compile(spec: ProbeSpec, build: Callable[[], Workload], counter: Counter | None) -> CompileSample:
    """One compile of a freshly built model, torch.compile and the first step, with Dynamo reset and
    torch's compiler caches out of the way. Kernels come from the process's cache where their
    source is there already, unless ``compile.rebuild_kernels`` asks for empty caches.

    Why the kernels' builds are left out by default: they are the kernel compilers' work (gcc,
    Triton's ptxas), which grows with the number of kernels, not with what Dynamo, AOTAutograd and
    Inductor do, and which every run after the first reads from its cache. Measured on the H200,
    a cache-cold compile of ResNet-50's training step in a warm process took 30-40 s with every
    Triton kernel built anew, most of it ptxas; the compile-latency samples of one review would
    have taken three to four minutes of a five-minute budget. Callgrind, as PyTorch's own gate
    counts, never followed the C++ builds either."""
    from torch._inductor.utils import fresh_cache

    wl, cfg = spec.workload, spec.compile
    _fresh_state()
    built = build()
    model = steps.prepare(built.model, wl.train)
    compiled = torch.compile(model, backend=cfg.backend, mode=cfg.mode, dynamic=cfg.dynamic)
    step = steps.make_step(compiled, wl.train, wl.amp, spec.device)
    before = _inductor_counts()
    with fresh_cache() if cfg.rebuild_kernels else _compiler_caches_off(), _no_gc():
        stages = _Stages(counter)
        with _watching(stages):
            if counter is not None:
                counter.start()
            start = stages._since = time.perf_counter()
            step(*built.inputs)
            steps.synchronize(spec.device)
            stages.close_segment()
            wall = time.perf_counter() - start
        counts = counter.stop() if counter is not None else []
    by_stage: dict[str, int] = {}
    # Dumps come back in order; each is the count since the one before (the first since start).
    for (_, n), stage in zip(counts, stages.labels, strict=False):
        by_stage[stage] = by_stage.get(stage, 0) + n
    after = _inductor_counts()
    work = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}
    return CompileSample(
        wall_s=round(wall, 4),
        stages_s={k: round(v, 4) for k, v in stages.seconds.items()},
        instructions=sum(by_stage.values()) if counter is not None else None,
        stage_instructions=by_stage,
        work=dict(list(work.items())[:64]),
        earlier={k: v for k, v in list(before.items())[:64] if v},
    )


def read_from_caches() -> bool:
    """Whether any graph this process compiled so far had its compiled code read from torch's
    compiler caches (an FX-graph or AOTAutograd cache hit) instead of traced and lowered here."""
    counts = _inductor_counts()
    return counts.get("fxgraph_cache_hit", 0) > 0 or counts.get("aot_autograd.autograd_cache_hit", 0) > 0


def prime(spec: ProbeSpec, build: Callable[[], Workload]) -> bool:
    """One untimed cache-cold compile where this process's compiles so far were read from the
    caches (module docstring); whether it made one."""
    if not read_from_caches():
        return False
    cold_compile(spec, build, None)
    return True


def _inductor_counts() -> dict[str, int]:
    """Inductor's counters now (kernel cache hits and misses, autotuning benchmarks, FX-graph
    cache events) and AOTAutograd's (its cache's hits and misses, prefixed ``aot_autograd.``):
    ints only, names as torch spells them."""
    from torch._dynamo.utils import counters

    counts = {str(k): int(v) for k, v in counters["inductor"].items() if isinstance(v, int)}
    counts |= {f"aot_autograd.{k}": int(v) for k, v in counters["aot_autograd"].items() if isinstance(v, int)}
    return counts
