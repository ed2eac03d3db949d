"""Timing of one workload over pairs of worker processes, base beside head. Imports no torch.

The worker process is the unit of replication: two processes running identical code can differ
for their whole life, so one pair of processes, however many rounds it times, measures one draw
of that bias. Each pair is a base and a head worker spawned together; they warm up one at a time
and time rounds in alternation (A B, B A, ...) so drift hits both; on a GPU each then runs a
device pass (CUPTI) alone. Pairs alternate which side goes first. Every process starts from its
side's compile cache, which the compile probe filled (or, when it did not run, the first pair),
so a respawn costs seconds, not a cold compile. After ``timing.processes`` pairs, and every
``timing.extra_processes`` more, the gate's own rule (``bot.timing_gate.sequential``) says whether
the verdict is reached.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from perfcheck.core.timing_gate import decide, held_open, sequential
from perfcheck.measures import CompileLatency, CompileSample, Environment, Plant, TimingMetrics
from perfcheck.runner.process import forkserver
from perfcheck.runner.process.sides import pair_caches, side_caches
from perfcheck.runner.review_run import SideSetup
from perfcheck.runner.timing.device_metrics import pooled
from perfcheck.runner.timing.worker_process import (
    Measured,
    SideRecord,
    TimingWorker,
    WorkerFailed,
    _ask,
    _blaming,
    steps_per_round,
)
from perfcheck.schema import ProbeResult
from perfcheck.settings import BudgetsConfig, TimingConfig
from perfcheck.spec import LatencyPlan, ProbeSpec

SIDES = ("base", "head")


@dataclass(frozen=True)
class Condition:
    """What a pair measures in one go: the gate measures one, with no plant; the trust bench several."""

    plant: Plant | None = None  # head's plant; base then gets an empty one, so both launch alike
    rounds: int | None = None  # wall-clock rounds, timing.rounds if None (a GPU's device pass always runs)


@dataclass
class _Pair:
    index: int
    order: tuple[str, ...]
    workers: dict[str, TimingWorker]
    records: dict[str, SideRecord]


def _spawn(
    specs: dict[str, ProbeSpec],
    sides: dict[str, SideSetup],
    workdir: Path,
    index: int,
    caches: dict[str, Path],
    forks: forkserver.ForkServers | None,
    latency_pairs: int = 0,
) -> _Pair:
    order = SIDES if index % 2 == 0 else SIDES[::-1]
    if index < latency_pairs:  # its workers make a cache-cold compile after the rounds
        plan = LatencyPlan(measure="wall", compiles=1)
        specs = {side: spec.model_copy(update={"latency": plan}) for side, spec in specs.items()}
    # Spawned back to back in this pair's order, so neither side is always the newer process.
    workers = {
        side: TimingWorker(specs[side], sides[side].python, workdir, f"-p{index + 1}", caches[side], forks)
        for side in order
    }
    return _Pair(index, order, workers, {side: SideRecord(first=side == order[0]) for side in SIDES})


def run_pairs(
    specs: dict[str, ProbeSpec],
    sides: dict[str, SideSetup],
    workdir: Path,
    indices: Sequence[int],
    cpu: int | None,
    caches: dict[str, Path],
    conditions: Sequence[Condition] = (Condition(),),
    latency_pairs: int = 0,
    forks: forkserver.ForkServers | None = None,
    parts: dict[str, float] | None = None,
    keep: list[_Pair] | None = None,
    beside_setup: Callable[[], None] | None = None,
) -> list[dict[str, SideRecord]]:
    """Spawn these pairs' workers, set all of them up at once, then time one pair at a time.

    Setting up (import, build, compile from the warm cache, a first step) is host work, done by
    all together; timing is done by one pair alone, the others idle (blocked on their command
    pipe), so nothing else runs on the GPU or the shared core while a pair is timed. Where the
    time went is added up in ``parts`` (set-up, pairs, compile latency, ending). With ``keep``,
    the pairs that make compile-latency samples are not asked for them here: they are added to
    ``keep``, their workers idle and alive, for ``take_latency`` to ask later. ``beside_setup``
    runs in a thread of its own while the workers set up (other host work that measures nothing
    of these pairs); no pair is timed before it has ended, and what it took past the set-up is
    booked as "waiting beside".
    """
    timeout = specs["head"].workload.timeout_s
    books = parts if parts is not None else {}
    pairs: list[_Pair] = []
    kept: list[_Pair] = []
    beside = _Beside(beside_setup)
    try:
        with _part(books, "set-up"):
            for index in indices:
                pairs.append(_spawn(specs, sides, workdir, index, caches, forks, latency_pairs))
            for pair in pairs:
                for side in pair.order:
                    with _blaming(side):
                        pair.workers[side].send("setup")
            beside.start()
            for pair in pairs:
                for side in pair.order:
                    with _blaming(side):
                        pair.records[side].setup = setup = pair.workers[side].receive(timeout)
                    pair.records[side].ready_s = time.monotonic() - pair.workers[side].started
                    if isinstance(setup.get("began"), float):  # the same monotonic clock
                        imports = max(0.0, setup["began"] - pair.workers[side].started)
                        pair.records[side].phases_s["imports"] = round(imports, 3)
        if beside.thread is not None:
            with _part(books, "waiting beside"):
                beside.join()
        with _part(books, "pairs"):
            for pair in pairs:
                _measure(pair, specs, cpu, conditions)
        sampling = [p for p in pairs if p.index < latency_pairs]
        if keep is not None:
            kept = sampling
        else:
            with _part(books, "compile latency"):
                _cold_compiles(sampling, timeout)
        with _part(books, "ending"):
            _close_all([p for p in pairs if p not in kept])
        if keep is not None:
            keep.extend(kept)
        return [pair.records for pair in pairs]
    finally:
        _close_all([p for p in pairs if p not in kept])
        with contextlib.suppress(Exception):  # what ended the set-up early is what is raised
            beside.join()  # and the work beside it ends first


class _Beside:
    """Work run in a thread beside a set-up; ``join`` waits for it and raises what it raised."""

    def __init__(self, work: Callable[[], None] | None) -> None:
        self.work = work
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        assert self.work is not None
        try:
            self.work()
        except BaseException as err:  # handed to the caller's thread by join
            self.error = err

    def start(self) -> None:
        if self.work is not None:
            self.thread = threading.Thread(target=self._run, name="perfcheck-beside-setup", daemon=True)
            self.thread.start()

    def join(self) -> None:
        thread, self.thread = self.thread, None
        if thread is None:
            return
        thread.join()
        error, self.error = self.error, None
        if error is not None:
            raise error


def _close_all(pairs: Sequence[_Pair]) -> None:
    """Every worker of these pairs asked to quit at once, then each waited for: a worker's exit
    (its atexit handlers, CUDA's teardown) takes as long alone as beside the others."""
    workers = [w for pair in pairs for w in pair.workers.values()]
    for worker in workers:
        worker.ask_to_quit()
    for worker in workers:
        worker.close()


@contextlib.contextmanager
def _part(parts: dict[str, float], name: str) -> Iterator[None]:
    """The time inside, added to ``parts[name]``."""
    since = time.monotonic()
    try:
        yield
    finally:
        parts[name] = parts.get(name, 0.0) + time.monotonic() - since


def _measure(
    pair: _Pair, specs: dict[str, ProbeSpec], cpu: int | None, conditions: Sequence[Condition]
) -> None:
    cfg, timeout = specs["head"].timing, specs["head"].workload.timeout_s
    cuda = specs["head"].device == "cuda"
    workers, records, order = pair.workers, pair.records, pair.order
    # Warm-up one side at a time: a steady state measured while the other works is not one.
    for side in order:
        since = time.monotonic()
        records[side].warmup = _ask(workers, side, "warmup", timeout, cpu=cpu)
        records[side].spend("warmup", since)
    per_round = steps_per_round(cfg.round_ms, [records[s].warmup["step_ms"] for s in SIDES])
    for condition in conditions:
        if condition.plant is not None:
            for side in order:
                pct = condition.plant if side == "head" else Plant()
                _ask(workers, side, "plant", timeout, device_pct=pct.device_pct, host_pct=pct.host_pct)
        measured = {side: Measured() for side in SIDES}
        for r in range(cfg.rounds if condition.rounds is None else condition.rounds):
            for side in order if r % 2 == 0 else order[::-1]:
                since = time.monotonic()
                answer = _ask(workers, side, "round", timeout, steps=per_round)
                records[side].spend("rounds", since)
                measured[side].times_ms += answer["times_ms"]
                measured[side].host_ms += answer["host_ms"]
        if cuda:
            # Two device passes a side, the second time in the other order (A B B A), pooled: on
            # the H200 the suite's 7B layers (big bf16 GEMMs, the GPU at its power limit) read
            # 1.5-2 % more device time in whichever side's single pass came first, an order effect
            # that alternating pairs cancel in the mean but not in the spread (an identical tree
            # read -4.0 ... +4.4 % at 3 pairs). Balanced within the pair, it cancels there.
            passes: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for side in (*order, *order[::-1]):
                since = time.monotonic()
                passes[side].append(_ask(workers, side, "device", timeout, steps=cfg.device_steps))
                records[side].spend("device", since)
            for side in SIDES:
                measured[side].device = pooled(passes[side])
        for side in SIDES:
            records[side].conditions.append(measured[side])
            records[side].steps_per_round = per_round
    for side in order:
        since = time.monotonic()
        records[side].finish = _ask(workers, side, "finish", timeout)
        records[side].spend("finish", since)


def _cold_compiles(pairs: Sequence[_Pair], timeout: float) -> None:
    """Each worker of these pairs compiles the workload once more with the compiler's caches off
    (perfcheck/runner/latency/cold_compile.py), once every pair is timed: as many pairs at once as the machine
    has cores for (each compile keeps to one thread), both sides of a pair always together, so that
    whatever else the machine does hits both sides of a pair alike. A failure costs that side's
    sample only; the pair's timing is measured already."""
    at_once = latency_batch_pairs()
    for first in range(0, len(pairs), at_once):
        batch = [(pair, side) for pair in pairs[first : first + at_once] for side in pair.order]
        asked = []
        for pair, side in batch:
            try:
                pair.workers[side].send("latency")
                asked.append((pair, side, time.monotonic()))
            except WorkerFailed as err:
                _latency_failed(pair.records[side], err)
        for pair, side, since in asked:
            record = pair.records[side]
            try:
                answer = pair.workers[side].receive(timeout)
                record.spend("latency", since)
                record.latency = CompileSample.model_validate(answer.get("sample"))
            except WorkerFailed as err:
                _latency_failed(record, err)
            except ValidationError as err:
                record.latency_failure = f"an invalid sample: {err.errors()[0]['msg']}"


def _latency_failed(record: SideRecord, err: WorkerFailed) -> None:
    record.latency_failure = f"{err.status}: {(str(err).strip().splitlines() or [''])[0][:300]}"


@dataclass(frozen=True)
class PairedTiming:
    base: ProbeResult
    head: ProbeResult
    # Each side's cache-cold compiles made in the pairs' processes, where they were asked for.
    latency: dict[str, CompileLatency] = field(default_factory=dict)
    # Where the time went: the caches handed out, the workers' set-up, the timed pairs, the
    # compile-latency samples, the workers' ending (seconds, over every look).
    parts_s: dict[str, float] = field(default_factory=dict)
    # The pairs whose workers wait, idle, to make their compile-latency samples later, with the
    # workloads of other timing steps (``take_latency``); None where they made them already.
    pending: PendingLatency | None = None
    # Why the gate asked for more pairs after each look that left its verdict open ("after 3, step
    # time +0.41 % (-0.90 … +1.73) is undecided against 2.3 %"): a review that took more than the first
    # look's pairs says why, in its progress line and its costs.
    held_open: list[str] = field(default_factory=list)


@dataclass
class PendingLatency:
    """One workload's pairs that still owe their compile-latency samples: their workers are alive
    and idle (timed, finished), holding what their processes hold."""

    workload: str
    pairs: list[_Pair]
    timeout_s: float

    def held_device_mb(self) -> float:
        """The device memory their processes held at their peak (0 on a CPU, which reports RSS)."""
        peaks = [
            r.finish.get("peak_memory_mb")
            for p in self.pairs
            for r in p.records.values()
            if r.finish.get("memory_kind") == "cuda_max_allocated"
        ]
        return sum(float(m) for m in peaks if isinstance(m, int | float) and m > 0)

    def device_total_mb(self) -> float:
        """The GPU's memory as base's workers report it (0 on a CPU); a scheduling hint only."""
        reported = [p.records["base"].finish.get("device_memory_mb") for p in self.pairs]
        return max((float(m) for m in reported if isinstance(m, int | float) and m > 0), default=0.0)

    def latency_s(self) -> dict[str, dict[int, float]]:
        """Per side, the seconds each pair's worker spent on its sample, by the pair's index."""
        return {
            side: {
                p.index: p.records[side].phases_s["latency"]
                for p in self.pairs
                if "latency" in p.records[side].phases_s
            }
            for side in SIDES
        }

    def close(self) -> None:
        _close_all(self.pairs)


def take_latency(pending: Sequence[PendingLatency]) -> dict[str, dict[str, CompileLatency]]:
    """The compile-latency samples that ``pending`` workers owe, made all at once (as many pairs
    at a time as there are cores for), then the workers ended: each workload's samples per side,
    in pair order, as ``run_paired`` gives them."""
    try:
        _cold_compiles([p for w in pending for p in w.pairs], max(w.timeout_s for w in pending))
    finally:
        for w in pending:
            w.close()
    return {w.workload: latency_samples([p.records for p in w.pairs]) for w in pending}


def latency_batch_pairs() -> int:
    """How many pairs make their compile-latency samples at once: both processes of a pair on a
    core each."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


def shared_cpu() -> int | None:
    """The core both sides' host work runs on: the last one this process may use (the first
    cores of a machine take most interrupts)."""
    try:
        return max(os.sched_getaffinity(0))
    except (AttributeError, OSError, ValueError):
        return None


def run_paired(
    base_spec: ProbeSpec,
    head_spec: ProbeSpec,
    base: SideSetup,
    head: SideSetup,
    workdir: Path,
    budgets: BudgetsConfig,
    on_pair: Callable[[int, str], None] | None = None,
    latency_pairs: int = 0,
    deadline: float | None = None,
    forks: forkserver.ForkServers | None = None,
    defer_latency: Callable[[PendingLatency], bool] | None = None,
    beside_setup: Callable[[], None] | None = None,
) -> PairedTiming:
    """Time both sides over pairs of processes until the gate decides; one ProbeResult per side,
    never raising for what the workers do. The first ``latency_pairs`` pairs' workers then each
    make one cache-cold compile, the compile-latency samples (``PairedTiming.latency``). No look
    starts that would end after ``deadline`` (monotonic; the review's time budget), estimated from
    what the last look cost. Where ``defer_latency`` says yes to the pairs that owe samples (once
    their look is timed), they are handed back as ``PairedTiming.pending`` instead: their workers
    idle while the gate's further looks and other workloads are timed, and make their samples
    beside other workloads' (``take_latency``), which costs one batch of compiles for several.
    ``beside_setup`` runs while the first look's workers set up (``run_pairs``), before any pair
    is timed: where earlier workloads' waiting workers make their samples."""
    start = time.monotonic()
    specs = {"base": base_spec, "head": head_spec}
    sides = {"base": base, "head": head}
    cfg = head_spec.timing
    own = side_caches(workdir, head_spec.workload.name)
    cold = not any(c.exists() for c in own.values())
    cpu = shared_cpu()
    pairs: list[dict[str, SideRecord]] = []
    parts: dict[str, float] = {}
    stopped: str | None = None
    owing: list[_Pair] = []  # pairs timed whose samples are not made yet
    looks: list[str] = []  # why each look that left the verdict open asked for more pairs
    pending: PendingLatency | None = None
    try:
        while True:
            look = time.monotonic()
            with _part(parts, "caches"):
                caches = pair_caches(workdir, head_spec.workload.name, first=not pairs and cold)
            batch = _next_batch(len(pairs), cfg, cold)
            keep = owing if defer_latency is not None and any(i < latency_pairs for i in batch) else None
            pairs += run_pairs(
                specs,
                sides,
                workdir,
                batch,
                cpu,
                caches,
                latency_pairs=latency_pairs,
                forks=forks,
                parts=parts,
                keep=keep,
                beside_setup=beside_setup,
            )
            beside_setup = None  # the first look's set-up only
            if owing and pending is None and len(pairs) >= latency_pairs:
                pending = _defer_or_take(head_spec, owing, defer_latency, parts)
            per_pair = (time.monotonic() - look) / len(batch)
            procs = {s: [p[s].process() for p in pairs] for s in SIDES}
            decided = sequential(procs["base"], procs["head"], budgets, cfg)
            if decided is None:
                held = held_open(decide(procs["base"], procs["head"], budgets, cfg), cfg.alpha)
                looks.append(f"after {len(pairs)}, {'; '.join(held) or 'no metric decided yet'}")
            stopped = None if decided is not None else _stop_reason(cfg, pairs, start, per_pair, deadline)
            if on_pair is not None:
                on_pair(len(pairs), decided.verdict if decided else ("stopped" if stopped else "more"))
            if decided is not None or stopped is not None:
                if owing and pending is None:  # decided before every pair that owes one was timed
                    pending = _defer_or_take(head_spec, owing, defer_latency, parts)
                break
    except WorkerFailed as err:
        _close_all(owing)  # what owed samples is ended with the rest (closing twice is a no-op)
        failed = _failed_pair(specs, err, time.monotonic() - start)
        return dataclasses.replace(failed, parts_s=parts)
    except BaseException:
        _close_all(owing)
        raise
    elapsed = time.monotonic() - start
    base_result, head_result = (
        _result(specs[s], [p[s] for p in pairs], cold, cpu, elapsed, stopped) for s in SIDES
    )
    latency = latency_samples(pairs) if latency_pairs and pending is None else {}
    return PairedTiming(
        base_result, head_result, latency=latency, parts_s=parts, pending=pending, held_open=looks
    )


def _defer_or_take(
    spec: ProbeSpec,
    owing: list[_Pair],
    defer_latency: Callable[[PendingLatency], bool] | None,
    parts: dict[str, float],
) -> PendingLatency | None:
    """The pairs that owe samples handed back for later where ``defer_latency`` agrees, else their
    samples made now."""
    pending = PendingLatency(spec.workload.name, list(owing), spec.workload.timeout_s)
    if defer_latency is not None and defer_latency(pending):
        return pending
    with _part(parts, "compile latency"):
        take_latency([pending])
    return None


def _stop_reason(
    cfg: TimingConfig,
    pairs: Sequence[dict[str, SideRecord]],
    start: float,
    per_pair_s: float,
    deadline: float | None,
) -> str | None:
    """Why no further look is timed although the verdict is open, or None: go on."""
    if len(pairs) >= cfg.max_processes:
        return f"timing.max_processes ({cfg.max_processes})"
    now = time.monotonic()
    if len(pairs) >= 2 and now - start > cfg.time_budget_s:
        return f"timing.time_budget_s ({cfg.time_budget_s:g} s)"
    more = min(cfg.extra_processes, cfg.max_processes - len(pairs))
    if len(pairs) >= 2 and deadline is not None and now + more * per_pair_s > deadline:
        return f"review.time_budget_s ({more} more pairs would take about {more * per_pair_s:.0f} s)"
    return None


def latency_samples(pairs: Sequence[dict[str, SideRecord]]) -> dict[str, CompileLatency]:
    """Each side's cache-cold compiles, in pair order; a pair where either side has none gives
    neither a sample, so sample i of base and of head are still a pair."""
    both = [p for p in pairs if p["base"].latency is not None and p["head"].latency is not None]
    return {
        side: CompileLatency(
            measure="wall",
            samples=[p[side].latency for p in both],  # type: ignore[misc]
            failures=[f for p in pairs if (f := p[side].latency_failure)],
        )
        for side in SIDES
    }


def _next_batch(done: int, cfg: TimingConfig, cold: bool) -> list[int]:
    """The pairs to set up together next: up to the next look of the sequential rule, at most
    ``setup_together`` at once; but where nothing compiled the workload yet, the first pair alone
    (its compile is the cold one, and a cold cache is no cache to share)."""
    if done == 0 and cold:
        return [0]
    look = cfg.processes if done < cfg.processes else done + cfg.extra_processes
    count = max(1, min(look, cfg.max_processes) - done)
    return list(range(done, done + min(count, cfg.setup_together)))


def _result(
    spec: ProbeSpec,
    records: list[SideRecord],
    cold: bool,
    cpu: int | None,
    elapsed: float,
    stopped: str | None = None,
) -> ProbeResult:
    first = records[0]
    setup = first.setup
    metrics = TimingMetrics(
        mode=setup["mode"],
        backend=setup["backend"],
        batch_size=setup["batch_size"],
        steps_per_round=first.steps_per_round,
        cold_compile_s=setup["first_step_s"] if cold and setup["mode"] == "compiled" else None,
        compile_breakdown_s=setup["compile_breakdown_s"] if cold else {},
        memory_kind=first.finish["memory_kind"],
        cpu=cpu,
        threads=setup.get("threads"),
        plant=spec.plant,
        processes=[r.process() for r in records],
        stopped=stopped,
    )
    return ProbeResult(
        probe="timing",
        workload=spec.workload.name,
        side=spec.side,
        status="ok",
        duration_s=round(elapsed, 3),
        environment=Environment.model_validate(setup["environment"]),
        metrics=metrics.model_dump(mode="json"),
        details={"warmup_block_minima_ms": [r.warmup.get("warmup_block_minima_ms", []) for r in records]},
    )


def _failed_pair(specs: dict[str, ProbeSpec], err: WorkerFailed, elapsed: float) -> PairedTiming:
    results = {}
    for side in SIDES:
        spec = specs[side]
        if side == err.side:
            results[side] = ProbeResult(
                probe="timing",
                workload=spec.workload.name,
                side=spec.side,
                status=err.status,  # type: ignore[arg-type]
                duration_s=round(elapsed, 3),
                message=f"torch.compile fails: {err}" if err.status == "failed" else str(err),
            )
        else:
            # The other side is fine but has nothing to be compared with: skipped, with why.
            results[side] = ProbeResult(
                probe="timing",
                workload=spec.workload.name,
                side=side,  # type: ignore[arg-type]
                status="skipped",
                duration_s=round(elapsed, 3),
                message="not compared: torch.compile rejects the other side's code"
                if err.status == "failed"
                else f"not compared: the other side's timing worker failed ({err.status})",
            )
    return PairedTiming(results["base"], results["head"])
