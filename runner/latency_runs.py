"""Compile latency, measured after the compile probe: cache-cold compiles in processes of their own.

Two measures. Under callgrind (valgrind's instruction counter) a compile costs the same count on
any machine load, so each side runs one process of ``compile.runs`` counted compiles, base then
head. Wall-clock compiles are at the mercy of the machine, so they interleave: ``runs`` rounds of
one base and one head process, which side goes first alternating (A B, B A, ...), one compile
each. Every process compiles once unmeasured first (runner/probes/compile_latency_probe.py says
why) and every measured compile starts from empty caches of its own, whatever
``PERFCHECK_COMPILE_CACHE`` says: with a cache shared between sides, the side that compiled
second read what the first had written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from perfcheck.config import CompileConfig
from perfcheck.runner import callgrind
from perfcheck.schema import CompileLatency, CompileMeasure, CompileSample, ProbeResult, Side
from perfcheck.spec import LatencyPlan, ProbeSpec

# Measured on the 2-core CPU (docs/benchmarks.md, bench/compile_latency.py): a process under
# callgrind needs about this long to start (torch imported uninstrumented), and each compile in it,
# the warm-up or a counted one, takes at most about this many times the process's first compile
# at native speed (7-8x for a tiny model under aot_eager, 2-3x under Inductor, whose C++ builds
# run natively in subprocesses).
CALLGRIND_STARTUP_S = 20.0
CALLGRIND_SLOWDOWN = 8.0

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


@dataclass(frozen=True)
class Choice:
    measure: CompileMeasure
    note: str | None = None  # why it is not what was asked for


def estimated_callgrind_s(first_compile_s: float, runs: int) -> float:
    """One side's cost under callgrind: start-up, then the warm-up and ``runs`` counted compiles."""
    return CALLGRIND_STARTUP_S + (runs + 1) * first_compile_s * CALLGRIND_SLOWDOWN


def choose(cfg: CompileConfig, device: str, have_valgrind: bool, first_compile_s: float) -> Choice:
    """The measure of one workload. ``callgrind`` asked for explicitly was checked before the review
    (preflight); ``auto`` takes it on a CPU with valgrind where its estimated cost fits the budget."""
    if cfg.measure == "wall":
        return Choice("wall")
    if cfg.measure == "callgrind":
        return Choice("callgrind")
    if device != "cpu":
        return Choice("wall")
    if not have_valgrind:
        return Choice("wall", "wall-clock: valgrind is not installed")
    cost = estimated_callgrind_s(first_compile_s, cfg.runs)
    if cost > cfg.callgrind_budget_s:
        return Choice(
            "wall",
            f"wall-clock: callgrind would take about {cost:.0f} s per side, over compile.callgrind_budget_s "
            f"({cfg.callgrind_budget_s:g} s)",
        )
    return Choice("callgrind")


def schedule(measure: CompileMeasure, runs: int) -> list[tuple[Side, int]]:
    """(side, counted compiles) per process, in the order they run."""
    if measure == "callgrind":
        return [("base", runs), ("head", runs)]
    rounds: list[tuple[Side, int]] = []
    for i in range(runs):
        order: tuple[Side, Side] = ("base", "head") if i % 2 == 0 else ("head", "base")
        rounds += [(order[0], 1), (order[1], 1)]
    return rounds


# (spec, side, tag, prefix, extra environment) -> the process's result
Launch = Callable[[ProbeSpec, Side, str, list[str], dict[str, str]], ProbeResult]


def samples_of(result: ProbeResult) -> list[CompileSample]:
    """The samples a compile_latency process handed back, validated: it ran PR code. Raises
    ValueError when there are none or they do not fit the schema."""
    try:
        return CompileLatency.model_validate(result.metrics.get("latency")).samples
    except ValidationError as err:
        raise ValueError(f"an invalid result: {err.errors()[0]['msg']}") from None


def measure(
    specs: dict[Side, ProbeSpec], choice: Choice, runs: int, launch: Launch
) -> dict[Side, CompileLatency]:
    """Run the schedule; each side's samples in order, and why a process gave none."""
    got: dict[Side, list[CompileSample]] = {"base": [], "head": []}
    failures: dict[Side, list[str]] = {"base": [], "head": []}
    with tempfile.TemporaryDirectory(prefix="perfcheck-callgrind-") as dumps:
        prefix = callgrind.command(Path(dumps)) if choice.measure == "callgrind" else []
        env = {**CALLGRIND_ENV, callgrind.OUT_ENV: dumps} if choice.measure == "callgrind" else {}
        for i, (side, compiles) in enumerate(schedule(choice.measure, runs)):
            plan = LatencyPlan(measure=choice.measure, compiles=compiles)
            spec = specs[side].model_copy(update={"probe": "compile_latency", "latency": plan})
            result = launch(spec, side, f"-{i}", prefix, env)
            try:
                if result.status != "ok":
                    raise ValueError(f"{result.status}: {(result.message or '').strip()}")
                got[side] += samples_of(result)
            except ValueError as err:
                failures[side].append((str(err).splitlines() or [""])[0][:500])
    return {
        side: CompileLatency(
            measure=choice.measure, samples=got[side], note=choice.note, failures=failures[side]
        )
        for side in got
    }
