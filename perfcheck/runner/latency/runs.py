"""Compile latency: how it is measured, and the processes of its own that callgrind needs.

A cache-cold compile is measured in a process that has compiled already
(perfcheck/runner/latency/cold_compile.py says why), and those processes are there anyway: by wall clock, each
timing pair's two workers compile once more after their timed rounds, alternating which side goes first as the
pairs do (``Where`` "timing"); where no timing runs, a round of processes of their own, one a side at once
after the compile probes, each a warm-up compile and ``compile.runs`` counted ones ("rounds": the
two samples of a pair made in the same moment, as the timing workers' are). Callgrind's
instruction counts need processes of their own too, started under valgrind: one a side,
``compile.runs`` counted compiles each after one warm-up. Instruction counts do not
depend on the machine's load, so the two sides' processes run at the same time. Every measured
compile starts from empty caches of its own, whatever ``PERFCHECK_COMPILE_CACHE`` says.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from perfcheck.measures import CompileLatency, CompileMeasure, CompileSample, Side
from perfcheck.runner.latency import callgrind
from perfcheck.schema import ProbeResult
from perfcheck.settings import CompileConfig
from perfcheck.spec import LatencyPlan, ProbeSpec

# Measured on the 2-core CPU (docs/benchmarks.md): a process under callgrind needs about this long
# to start (torch imported uninstrumented), and each of its compiles, the warm-up or a counted one,
# takes about this many times a wall-clock cache-cold compile of the same workload made in this
# review: the demo's classifier under Inductor, 0.34 s a compile by the wall clock, took 77 s under
# callgrind for a warm-up and three counted compiles (2026-12-07). The estimate is made from the
# review's own wall-clock samples, so it follows the machine and the model; made from a process's
# first compile (its C++ builds included, which callgrind does not follow), it was off by more than
# twice in both directions.
CALLGRIND_STARTUP_S = 20.0
CALLGRIND_PER_COLD = 42.0

# Under valgrind: Inductor must not generate AVX-512 (valgrind 3.19 cannot run it, and the ISA
# probes run natively in subprocesses, so they would pick it); it compiles in this process rather
# than in a pool of workers whose waits would be counted; and ATen runs on one thread, because
# OpenMP workers spin while they wait and how long they spin depends on the machine's load (an A/A
# on a loaded machine spread by ±1.4 % with two threads).
CALLGRIND_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

Where = Literal["timing", "rounds", "callgrind"]


@dataclass(frozen=True)
class Choice:
    measure: CompileMeasure
    note: str | None = None  # why it is not what was asked for
    estimate_s: float = 0.0  # callgrind's expected cost, both sides at once
    # How long auto's callgrind processes may run before they are stopped and the wall clock
    # counts instead: an estimate made from one fast compile cannot know the load that follows.
    limit_s: float = math.inf

    def limit_words(self) -> str:
        """'stopped at its limit of 96 s (expected about 48 s)'."""
        return f"stopped at its limit of {self.limit_s:.0f} s (expected about {self.estimate_s:.0f} s)"


def estimated_callgrind_s(cold_s: float, runs: int) -> float:
    """One side's cost under callgrind: start-up, then the warm-up and ``runs`` counted compiles,
    each ``CALLGRIND_PER_COLD`` times ``cold_s``, the wall clock's cache-cold compile."""
    return CALLGRIND_STARTUP_S + (runs + 1) * cold_s * CALLGRIND_PER_COLD


def choose(
    cfg: CompileConfig,
    device: str,
    have_valgrind: bool,
    cold_s: float,
    left_s: float | None = None,
    slower_than_estimated: str | None = None,
) -> Choice:
    """The measure of one workload where the wall clock left its compile latency undecided.
    ``callgrind`` asked for explicitly was checked before the review (preflight) and is measured
    from the start; ``auto`` measures by wall clock first (its samples cost nothing where timing
    runs) and takes callgrind only where those leave it undecided, on a CPU with valgrind, and
    where its estimate, made from the wall clock's own cache-cold compiles (``cold_s``, the slower
    side's), fits ``compile.callgrind_budget_s`` and ``left_s`` (what is left of the review's time
    budget), and not once callgrind has run past its limit in this review
    (``slower_than_estimated``: for which workload)."""
    if cfg.measure in ("wall", "callgrind"):
        return Choice(cfg.measure)
    if device != "cpu":
        return Choice("wall")
    if not have_valgrind:
        return Choice("wall", "wall-clock: valgrind is not installed")
    if slower_than_estimated is not None:
        return Choice(
            "wall",
            f"wall-clock: callgrind ran past its limit for {slower_than_estimated} in this review, "
            "so this machine is slower than its estimates",
        )
    cost = estimated_callgrind_s(cold_s, cfg.runs)
    if cost > cfg.callgrind_budget_s:
        return Choice(
            "wall",
            f"wall-clock: callgrind would take about {cost:.0f} s, over compile.callgrind_budget_s "
            f"({cfg.callgrind_budget_s:g} s)",
        )
    if left_s is not None and cost > left_s:
        return Choice(
            "wall",
            f"wall-clock: callgrind would take about {cost:.0f} s, more than the {max(left_s, 0):.0f} s left "
            "of review.time_budget_s",
        )
    # Twice the estimate (a loaded machine is slower), never less than the budget it fitted.
    return Choice("callgrind", estimate_s=cost, limit_s=max(2 * cost, cfg.callgrind_budget_s))


# (spec, side, tag, prefix, extra environment, a folder it writes) -> the process's result
Launch = Callable[[ProbeSpec, Side, str, list[str], dict[str, str], Path], ProbeResult]


def samples_of(result: ProbeResult) -> list[CompileSample]:
    """The samples a compile_latency process handed back, validated: it ran PR code. Raises
    ValueError when there are none or they do not fit the schema."""
    try:
        return CompileLatency.model_validate(result.metrics.get("latency")).samples
    except ValidationError as err:
        raise ValueError(f"an invalid result: {err.errors()[0]['msg']}") from None


def measure_callgrind(
    specs: dict[Side, ProbeSpec], runs: int, launch: Launch, note: str | None = None
) -> dict[Side, CompileLatency]:
    """One process a side under callgrind, both at once; each side's counted compiles, and why its
    process gave none."""
    with tempfile.TemporaryDirectory(prefix="perfcheck-callgrind-") as root:

        def one(side: Side) -> CompileLatency:
            # A folder of dumps per side: what one side's process writes the other never reads.
            dumps = Path(root) / side
            dumps.mkdir()
            prefix = callgrind.command(dumps)
            env = {**CALLGRIND_ENV, callgrind.OUT_ENV: str(dumps)}
            plan = LatencyPlan(measure="callgrind", compiles=runs)
            spec = specs[side].model_copy(update={"probe": "compile_latency", "latency": plan})
            result = launch(spec, side, "-callgrind", prefix, env, dumps)
            try:
                if result.status != "ok":
                    raise ValueError(f"{result.status}: {(result.message or '').strip()}")
                samples, failures = samples_of(result), []
            except ValueError as err:
                samples, failures = [], [(str(err).splitlines() or [""])[0][:500]]
            return CompileLatency(measure="callgrind", samples=samples, note=note, failures=failures)

        with ThreadPoolExecutor(max_workers=2) as pool:
            base, head = pool.map(one, ("base", "head"))
    return {"base": base, "head": head}
