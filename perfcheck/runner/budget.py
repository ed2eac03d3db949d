"""The review's time budget: the plan made up front, what each step was expected to cost and cost,
and what was cut or cheapened to fit. Imports no torch.

A review answers inside ``review.time_budget_s``. The structural probes always run (each under its
own time limit); the costly, optional parts are sized to what is left when they are reached:
callgrind's counted compiles (else compile latency by wall clock), the compile-latency samples in
the timing pairs, and the timing gate's further pairs. Nothing is dropped silently: a step that is
cut says so in the progress log, in result.json (``costs``) and in the comment.

Estimates before anything ran are priors, measured once on the machines docs/benchmarks.md names;
from the workload's first probes on they come from this review's own figures.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from perfcheck.core import probes
from perfcheck.schema import ReviewCosts, StepCost
from perfcheck.settings import TimingConfig

T = TypeVar("T")

PRIOR_UNKNOWN_S = 30.0  # a probe no registered descriptor names

# A compile-latency sample against a process's first compile, measured. With the kernels read
# from their cache (the default): 0.6 of 15 s for the demo on the 2-core CPU. With every kernel
# built anew (compile.rebuild_kernels): 3.2-5 of 11-15 s on the CPU, 30-40 of 37 s for ResNet-50's
# training step on the H200. The cautious side of each.
COLD_OF_FIRST = {False: 0.3, True: 1.0}
# Each timed pair besides its rounds: two warm-ups to steady state, lead-in steps, a device pass.
PAIR_OVERHEAD_S = 3.0


def prior(probe: str, device: str) -> float:
    """A probe's cost before this review measured anything of the workload: its descriptor's
    ``prior_s`` for the device (a built-in's from the demo's classifier on the 2-core CPU and the
    built-in models on the H200, docs/benchmarks.md), a GPU's where the device is another."""
    kind = probes.get(probe)
    if kind is None:
        return PRIOR_UNKNOWN_S
    return kind.prior_s.get(device, kind.prior_s.get("cuda", PRIOR_UNKNOWN_S))


def timing_estimate_s(cfg: TimingConfig, setup_s: float, pairs: int) -> float:
    """``pairs`` pairs of the timing gate: their processes set up ``setup_together`` pairs at a
    time (each set up about as long as ``setup_s``), then timed one pair after the other."""
    rounds_s = cfg.rounds * 2 * cfg.round_ms / 1000
    batches = math.ceil(pairs / max(1, cfg.setup_together))
    return batches * setup_s + pairs * (rounds_s + PAIR_OVERHEAD_S)


def cold_compile_estimate_s(first_compile_s: float, rebuild_kernels: bool = False) -> float:
    return COLD_OF_FIRST[rebuild_kernels] * first_compile_s


def latency_estimate_s(
    first_compile_s: float, pairs: int, cores: int, rebuild_kernels: bool = False, primed: bool = False
) -> float:
    """``pairs`` pairs of compile-latency samples in the timing workers: both sides of a pair at
    once, as many pairs at once as there are cores for two processes each; ``primed``: each
    sample after an untimed one (a worker whose set-up read the compiled model from the caches,
    perfcheck/runner/latency/cold_compile.py)."""
    at_once = max(1, cores // 2)
    per_sample = (2 if primed else 1) * cold_compile_estimate_s(first_compile_s, rebuild_kernels)
    return math.ceil(pairs / at_once) * per_sample


def lightest_last(order: Sequence[T], samples_s: Callable[[T], float]) -> list[T]:
    """The timed workloads in ``order``, but the one whose compile-latency samples are expected to
    cost least moved last: each workload's samples are made while the next one's workers set up,
    and only the last one's are made with nothing beside them (on the H200 suite, ResNet-50's six
    took 68 s, the MLP's 5 s). The others keep their order, and so does everything where the plan's
    last is within noise of the lightest (a quarter, and a second): estimates come from one first
    compile each, which the machine's load moves by that much."""
    if len(order) < 2:
        return list(order)
    lightest = min(range(len(order)), key=lambda i: (samples_s(order[i]), -i))
    if samples_s(order[-1]) <= 1.25 * samples_s(order[lightest]) + 1.0:
        return list(order)
    return [*order[:lightest], *order[lightest + 1 :], order[lightest]]


@dataclass
class Step:
    """One planned step; ``done`` it once it ran."""

    name: str
    expected_s: float | None
    clock: Callable[[], float] = time.monotonic
    spent_s: float | None = None
    note: str | None = None
    started: float = field(default=0.0)
    parts_s: dict[str, float] = field(default_factory=dict)
    reused: bool = False  # not run: an earlier run's result stands for it

    def __post_init__(self) -> None:
        self.started = self.clock()

    def done(self, note: str | None = None, parts_s: dict[str, float] | None = None) -> None:
        self.spent_s = round(self.clock() - self.started, 1)
        self.note = note or self.note
        self.parts_s = {k: round(v, 1) for k, v in (parts_s or {}).items()}

    def as_cost(self) -> StepCost:
        expected = round(self.expected_s, 1) if self.expected_s is not None else None
        cost = StepCost(step=self.name, expected_s=expected, spent_s=self.spent_s, note=self.note)
        return cost.model_copy(update={"parts_s": self.parts_s, "reused": self.reused})


class Budget:
    """The clock and the books of one review (or shard). Safe to use from several threads."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.total_s = total_s
        self.clock = clock
        self.start = clock()
        self.steps: list[Step] = []
        self.cuts: list[str] = []
        self._lock = threading.Lock()

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.spent()

    def deadline(self) -> float:
        """The monotonic time by which the review is to be over."""
        return self.start + self.total_s

    def begin(self, name: str, expected_s: float | None) -> Step:
        step = Step(name, expected_s, self.clock)
        with self._lock:
            self.steps.append(step)
        return step

    def reused(self, name: str, where: str) -> None:
        """A step that did not run because an earlier run's result stands for it (reuse.py)."""
        with self._lock:
            self.steps.append(Step(name, None, self.clock, spent_s=0.0, note=where, reused=True))

    def skip(self, name: str, expected_s: float | None, why: str) -> None:
        """A step that does not run, with why: in the steps and among the cuts."""
        with self._lock:
            self.steps.append(Step(name, expected_s, self.clock, note=why))
            self.cuts.append(f"{name}: {why}")

    def cut(self, what: str) -> None:
        """A step cheapened to fit (fewer samples, another measure), said in words."""
        with self._lock:
            self.cuts.append(what)

    def costs(self) -> ReviewCosts:
        with self._lock:
            return ReviewCosts(
                budget_s=self.total_s,
                spent_s=round(self.spent(), 1),
                steps=[s.as_cost() for s in self.steps],
                cuts=list(self.cuts),
            )
