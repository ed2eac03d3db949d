"""Compile latency, more pairs: where the wall clock left a workload's compile latency undecided
against its budget, more pairs of cache-cold compiles, a round at a time, until it decides (the
timing gate's sequential rule, for compiles).

Why: three pairs of fresh-process compiles by wall clock scatter by 10-30 % on a loaded CPU, so
the first look rarely decides against a 20 % budget, and an undecided compile latency used to
pass in silence (issue 40: a head 8 layers deeper, +127 % (+2.8 … +401.6), "no findings"). A
round is one process a side (both at once, as the timing workers make their samples), each
making a warm-up compile and then ``ROUND`` counted ones; its samples join the side's, pair by
pair. More rounds are made only where they can decide: where the estimate's distance from the
budget is one that ``compile.runs``' ceiling of pairs could resolve
(perfcheck/core/compile_latency.py ``pairs_to_decide``), and where what is left of the review's
time budget pays for the round. Whatever stays undecided is a finding that says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import median

from perfcheck.config import Config
from perfcheck.core import compile_latency
from perfcheck.measures import CompileLatency, CompileLatencyChange, CompileMetrics, Side
from perfcheck.runner.latency.runs import samples_of
from perfcheck.schema import ProbeResult
from perfcheck.settings import COMPILE_RUNS_MAX

ROUND = 3  # counted compiles a side per round: a process's warm-up is paid once for them
START_S = 5.0  # a process's own start before its warm-up (imports, the workload's build)


@dataclass(frozen=True)
class Undecided:
    """A workload whose wall-clock compile latency straddles its budget, as it stands now."""

    change: CompileLatencyChange
    latency: Mapping[Side, CompileLatency]
    first_compile_s: float  # a process's first compile, the warm-up a round's process pays


def undecided(compiled: Mapping[str, CompileMetrics], config: Config) -> Undecided | None:
    """``compiled``'s compile latency where it is measured by wall clock and undecided; None where
    it decided, was not measured, or is counted in instructions (which do not scatter)."""
    base, head = compiled.get("base"), compiled.get("head")
    if base is None or head is None or compile_latency.unmeasured(base.latency, head.latency):
        return None
    assert base.latency is not None and head.latency is not None
    change = compile_latency.decide(base.latency, head.latency, config.budgets, config.timing)
    if change.measure != "wall" or change.verdict != "inconclusive":
        return None
    first = max(base.cold_compile_s, head.cold_compile_s)
    return Undecided(change, {"base": base.latency, "head": head.latency}, first)


def round_estimate_s(state: Undecided, compiles: int) -> float:
    """One round: both sides' processes at once, each starting, warming up and making
    ``compiles`` compiles as long as the slowest sample so far."""
    slowest = max(median(s.wall_s for s in m.samples) for m in state.latency.values())
    return START_S + state.first_compile_s + compiles * slowest


def next_round(state: Undecided, left_s: float) -> tuple[int, float, str | None]:
    """How many compiles a side the next round makes (0: none), what it is expected to cost, and
    why none where it is none."""
    pairs = state.change.pairs
    room = COMPILE_RUNS_MAX - pairs
    if room <= 0:
        return 0, 0.0, f"{pairs} pairs, the most compile.runs allows"
    need = compile_latency.pairs_to_decide(state.change, most=COMPILE_RUNS_MAX)
    if need is None:
        return 0, 0.0, f"no more pairs, up to {COMPILE_RUNS_MAX}, would decide it"
    compiles = min(ROUND, room, max(1, need - pairs))
    cost = round_estimate_s(state, compiles)
    if cost > left_s:
        return (
            0,
            cost,
            (
                f"{compiles} more pairs would take about {cost:.0f} s, more than the "
                f"{max(left_s, 0):.0f} s left of review.time_budget_s"
            ),
        )
    return compiles, cost, None


# (side, compiles) -> that side's process's result (a compile_latency probe, wall clock)
Launch = Callable[[Side, int], ProbeResult]


def run_round(launch: Launch, compiles: int) -> dict[Side, CompileLatency]:
    """One process a side at once; each side's counted compiles, and why a side has none."""

    def one(side: Side) -> CompileLatency:
        result = launch(side, compiles)
        try:
            if result.status != "ok":
                raise ValueError(f"{result.status}: {(result.message or '').strip()}")
            return CompileLatency(measure="wall", samples=samples_of(result))
        except ValueError as err:
            return CompileLatency(measure="wall", failures=[(str(err).splitlines() or [""])[0][:500]])

    with ThreadPoolExecutor(max_workers=2) as pool:
        base, head = pool.map(one, ("base", "head"))
    return {"base": base, "head": head}


def joined(state: Undecided, made: Mapping[Side, CompileLatency]) -> dict[Side, CompileLatency]:
    """Each side's samples with a round's: only as many of the round's as both sides made, so
    that sample i of base stays the pair of sample i of head."""
    n = min(len(made["base"].samples), len(made["head"].samples))
    start = min(len(m.samples) for m in state.latency.values())
    out: dict[Side, CompileLatency] = {}
    for side in ("base", "head"):
        was = state.latency[side]
        out[side] = was.model_copy(
            update={
                "samples": [*was.samples[:start], *made[side].samples[:n]],
                "failures": [*was.failures, *made[side].failures][:40],
            }
        )
    return out


@dataclass(frozen=True)
class Outcome:
    """What the rounds made: each side's samples (None: no round ran) and what to say of them."""

    latency: dict[Side, CompileLatency] | None
    said: str  # for the step's line and the compile-latency row's note
    expected_s: float = 0.0  # what its rounds were expected to cost (0: none ran)


def more_pairs(
    compiled: Mapping[str, CompileMetrics],
    config: Config,
    left_s: Callable[[], float],
    launch: Launch,
    note: Callable[[str, float], None] = lambda _line, _s: None,
) -> Outcome | None:
    """Rounds of compiles until the wall clock decides ``compiled``'s compile latency, or no round
    can (``next_round``); None where it is not undecided. ``left_s``: what the review's budget has
    left, asked before each round; ``note``: told before each round what it is for and what it
    is expected to cost."""
    state = undecided(compiled, config)
    if state is None:
        return None
    first = state.change.pairs
    latency: dict[Side, CompileLatency] | None = None
    expected = 0.0
    why: str | None = None
    while state is not None:
        compiles, cost, why = next_round(state, left_s())
        if not compiles:
            break
        expected += cost
        c = state.change
        note(
            f"after {c.pairs} pairs {c.change_pct:+.1f} % ({c.low_pct:+.1f} … {c.high_pct:+.1f}) is "
            f"undecided against {c.budget_pct:g} %: {compiles} more",
            cost,
        )
        made = run_round(launch, compiles)
        grown = joined(state, made)
        if min(len(m.samples) for m in grown.values()) == c.pairs:
            failures = [f for m in made.values() for f in m.failures]
            why = f"a round made no pair: {failures[0] if failures else 'no sample came back'}"
            break
        latency = grown
        state = undecided(
            {s: compiled[s].model_copy(update={"latency": m}) for s, m in grown.items()}, config
        )
    pairs = min(len(m.samples) for m in latency.values()) if latency else first
    if latency is None:
        said = f"undecided after {first} pairs; no more: {why}"
    elif state is None:
        said = f"{pairs - first} more pairs after {first} were undecided: decided"
    else:
        said = f"{pairs - first} more pairs after {first} were undecided; still undecided, no more: {why}"
    return Outcome(latency, said, expected)
