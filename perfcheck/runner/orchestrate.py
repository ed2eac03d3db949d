"""Run every probe of a review, base and head side by side, each in its own process.

This module imports no torch itself: it only launches workers and reads their results as
untrusted JSON. A worker that dies, hangs or writes nonsense becomes a crashed or timed-out
result for that one probe, and the review goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from perfcheck.config import planned_probes
from perfcheck.core import probes
from perfcheck.core.timing_gate import METRIC_LABELS, throughput_figures
from perfcheck.measures import CompileMetrics, TimingMetrics
from perfcheck.progress import Progress, Task
from perfcheck.runner.budget import Budget, lightest_last, prior, timing_estimate_s
from perfcheck.runner.latency.results import (
    latency_place,
    shares_compile_cache,
)
from perfcheck.runner.latency.stage import LatencyStage
from perfcheck.runner.process import reaper
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.probe_process import (
    _outcome,
    probe_spec,
    run_probe,
)
from perfcheck.runner.process.sides import (
    copy_base_for_head,
    side_caches,
)
from perfcheck.runner.reuse.store import BaseStore
from perfcheck.runner.review_plan import follow_ups, parts_said, plan_line
from perfcheck.runner.review_run import ReviewRun, SideSetup
from perfcheck.runner.timing import pairs as paired_timing
from perfcheck.runner.timing.pairs import run_paired
from perfcheck.schema import ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import WorkloadConfig
from perfcheck.stopping import STOPS


def run_review(
    run: ReviewRun,
    progress_factory: Callable[[int], Progress] = Progress,
    forks: ForkServers | None = None,
    budget: Budget | None = None,
    partial: list[ProbeResult] | None = None,
) -> list[WorkloadReview]:
    """Every probe of ``run``. ``forks``: fork servers a caller running several reviews keeps
    across them (else the review starts its own and ends them with it). ``budget``: the review's
    clock and books (a fresh one of ``review.time_budget_s`` if not given), for the caller to read
    what was spent and cut. Stopped (Ctrl-C, SIGTERM), it adds the results that finished before
    the stop to ``partial`` and lets the stop through."""
    budget = budget or Budget(run.config.review.time_budget_s)
    with contextlib.ExitStack() as stack:
        if forks is None:
            forks = stack.enter_context(ForkServers(run.out_dir.resolve() / "probes"))
        review = _Review(run, progress_factory, forks, budget)
        try:
            return review.run()
        except STOPS:
            if partial is not None:  # what finished before the stop, for the caller to write
                partial.extend(review.kept.values())
            raise


def grouped(workloads: list[WorkloadConfig], results: list[ProbeResult]) -> list[WorkloadReview]:
    """The results by workload, in the run's order, each side's in the order they came."""
    out = {wl.name: WorkloadReview(name=wl.name) for wl in workloads}
    for r in results:
        if r.workload in out:
            review = out[r.workload]
            out[r.workload] = review.model_copy(update={r.side: [*getattr(review, r.side), r]})
    return list(out.values())


Item = tuple[WorkloadConfig, str, SideSetup]


class _Review:
    """One run of the orchestrator: the per-side probes, then timing, with the compile-latency
    stage (perfcheck/runner/latency/stage.py) called around and inside it."""

    def __init__(
        self, run: ReviewRun, progress_factory: Callable[[int], Progress], forks: ForkServers, budget: Budget
    ) -> None:
        self.run_ = run
        self.forks = forks
        self.budget = budget
        # Absolute: every worker runs with its side's tree as working directory.
        self.workdir = run.out_dir.resolve() / "probes"
        self.wanted = planned_probes(run.workloads, run.probes)
        paired_names = {k.name for k in probes.kinds() if k.paired}
        self.single: list[Item] = [
            (wl, p, side) for wl, p in self.wanted if p not in paired_names for side in (run.base, run.head)
        ]
        self.paired = [(wl, p) for wl, p in self.wanted if p in paired_names]
        latency_at = {
            wl.name: latency_place(run, {p for w, p in self.wanted if w.name == wl.name})
            for wl in run.workloads
        }
        # One step of the progress plan per workload whose compile latency is measured apart from
        # its compile probe: under callgrind, in its timing pairs' workers, or in rounds of its own.
        latency_owed = {wl.name for wl, _ in self.paired if latency_at[wl.name] in ("timing", "callgrind")}
        latency_owed |= {name for name, where in latency_at.items() if where == "rounds"}
        self.progress = progress_factory(len(self.single) + len(self.paired) + len(latency_owed))
        self.latency = LatencyStage(run, self.workdir, forks, budget, self.progress, latency_at, latency_owed)
        self.base_compiles: dict[str, Future[ProbeResult]] = {}
        # Base's recorded results, read now, before any probe runs (perfcheck/runner/reuse/store.py).
        self.store = BaseStore(run, self.workdir, forks, self.progress.say)
        # Every result as it finishes (the latest of each workload, probe and side).
        self.kept: dict[tuple[str, str, str], ProbeResult] = {}

    def run(self) -> list[WorkloadReview]:

        run, workdir = self.run_, self.workdir
        reaper.become_subreaper()  # so that no process a probe starts outlives it
        workdir.mkdir(parents=True, exist_ok=True)
        # Each side starts from an empty /tmp and files folder: what an earlier review's PR code
        # left there (the same output folder, reviewed again) is never this review's.
        for folder in ("scratch", "files"):
            shutil.rmtree(workdir / folder, ignore_errors=True)
        self.progress.say(plan_line(run, self.wanted, self.latency.latency_at, self.budget.total_s))
        # Per-side probes, base's compile probes first: with one at a time, head's compile of a
        # workload starts from a copy of base's compile cache (``_compile_cache``). With jobs > 1
        # they overlap (structure does not depend on timing). Timing runs alone, both sides at
        # once in alternating rounds, after everything else has finished.
        first = [i for i in self.single if i[1] == "compile" and i[2].side == "base"]
        # With several slots, head's compiles that start from base's cache go last: each waits
        # for base's, and its slot would idle meanwhile. (One at a time, base's is done first.)
        last = [
            i
            for i in self.single
            if run.jobs > 1 and i[1] == "compile" and i[2].side == "head" and self._shares(i[0])
        ]
        order = first + [i for i in self.single if i not in first and i not in last] + last
        paired = list(self.paired)
        with ThreadPoolExecutor(max_workers=max(1, run.jobs)) as pool:
            futures = []
            for item in order:
                future = pool.submit(self._one, item)
                if item in first:
                    self.base_compiles[item[0].name] = future
                futures.append((item, future))
            lead = self._tail_lead(futures, paired)
            try:
                if lead is None:
                    collected = self._keep(self._structural(futures, pool))
                else:
                    # The first timed workload's workers set up while the last per-side probes end:
                    # set-up times nothing, and no pair is timed before those probes are through.
                    paired.remove(lead)
                    partial = [f.result() for _, f in futures if f.done()]
                    whole: list[list[ProbeResult]] = []

                    def finish() -> None:
                        whole.append(self._structural(futures, pool))

                    out = self._keep(self._timed(*lead, partial, run_paired, also_beside=finish))
                    rest = whole[0] if whole else self._structural(futures, pool)  # (timing skipped)
                    collected = self._keep(_rejoined(rest, partial, out, lead[0].name))
                collected = self._keep(self.latency.callgrind_latency(collected))
                samples_s = {wl.name: self.latency.samples_cost(wl, collected) for wl, _ in paired}
                paired = lightest_last(paired, lambda item: samples_s[item[0].name])
                for wl, probe in paired:
                    collected = self._keep(self._timed(wl, probe, collected, run_paired))
                collected = self._keep(self.latency.take_pending(collected))
                collected = self._keep(self.latency.more_latency(collected))
            finally:
                self.latency.close_pending()  # stopped on the way: their workers end with the review
        self.latency.finish_owed()  # counted in the plan, and never measured
        self.store.record(collected)  # every probe has ended: none of their processes runs now
        # The compile caches served their purpose; they can hold gigabytes, and the review keeps none.
        shutil.rmtree(workdir / "cache", ignore_errors=True)
        reaper.reap_orphans()
        return grouped(run.workloads, collected)

    def _keep(self, results: list[ProbeResult]) -> list[ProbeResult]:
        """``results``, remembered as the latest of each (workload, probe, side): what a stop
        leaves of the review."""
        for r in results:
            self.kept[(r.workload, r.probe, r.side)] = r
        return results

    def _structural(
        self, futures: list[tuple[Item, Future[ProbeResult]]], pool: ThreadPoolExecutor
    ) -> list[ProbeResult]:
        """Every per-side probe's result, in plan order whatever finished first, and the
        follow-ups they call for, run on the same slots."""
        run = self.run_
        done = {id(item): f.result() for item, f in futures}
        collected = [done[id(item)] for item in self.single]
        more = [
            (wl, p, side)
            for wl, p in follow_ups(run, self.wanted, collected)
            for side in (run.base, run.head)
        ]
        if more:
            # Known only now: said as a line of the plan before the count grows.
            names = ", ".join(dict.fromkeys(wl.name for wl, _, _ in more))
            self.progress.say(
                f"plan: + custom_ops ×{len(more)} for {names} (torch.compile or torch.export failed on a "
                "side, or the exported graph calls a custom op: custom_ops names the op and the check)"
            )
            self.progress.total += len(more)
            collected += list(pool.map(self._one, more))
        return collected

    def _tail_lead(
        self, futures: list[tuple[Item, Future[ProbeResult]]], paired: list[tuple[WorkloadConfig, str]]
    ) -> tuple[WorkloadConfig, str] | None:
        """The timed workload whose workers may set up while the last per-side probes run, once
        it has one: the first (in plan order) whose own per-side probes are done, found once no
        probe waits for a slot, where the machine has a core for every probe still running and
        every process of a first look. None (after waiting for every probe) where there is none:
        one slot, a workload whose compile latency callgrind counts after the per-side probes, or
        too few cores."""
        run = self.run_
        first_look = 2 * run.config.timing.processes
        if run.jobs <= 1 or not paired or any(w == "callgrind" for w in self.latency.latency_at.values()):
            return None
        waiting = {f for _, f in futures}
        while waiting:
            if all(f.running() or f.done() for _, f in futures):
                running = sum(1 for _, f in futures if not f.done())
                if running + first_look > host_cores():
                    return None
                for wl, probe in paired:
                    own = [f for item, f in futures if item[0].name == wl.name]
                    if all(f.done() for f in own):
                        return (wl, probe) if running else None
            _, waiting = wait(waiting, return_when=FIRST_COMPLETED)
        return None

    def _one(self, item: Item) -> ProbeResult:
        wl, probe, side = item
        label = f"{side.side} · {wl.name} · {probe}"
        spec = self.store.spec(probe_spec(self.run_, wl, probe, side))
        reused = self.store.reused(spec)
        if reused is not None:  # a recorded run of this content and environment probed it
            self.budget.reused(label, "reused")
            self.progress.begin(label).finish("reused")
            self._keep([reused])
            return reused
        cache, from_base = None, False
        if probe == "compile":
            # Its cold compile fills the cache the timing probe's processes of this side start from;
            # head's waits here for base's (its cost starts after).
            cache, from_base = self._compile_cache(wl, side.side)
        expected = self._expected(wl, probe, side.side)
        left = self.budget.left()
        if left < expected:
            why = (
                f"not run: it is expected to take about {expected:.0f} s, more than the "
                f"{max(left, 0):.0f} s left of review.time_budget_s ({self.budget.total_s:g} s)"
            )
            return self._cut(item, label, expected, why)
        step = self.budget.begin(label, expected)
        task = self.progress.begin(label)
        # Never past the review's budget: a probe still running when it is spent is stopped there,
        # and says so (not run to its end), rather than a probe that hung.
        deadline = self.budget.deadline()
        result = run_probe(
            spec,
            side.python,
            wl.timeout_s,
            self.workdir,
            cache,
            extra_env=self._compile_threads(),
            forks=self.forks,
            deadline=deadline,
        )
        reaper.check_stopping()  # killed by a stop (Ctrl-C, SIGTERM): not a crash to report
        if result.status == "timeout" and time.monotonic() >= deadline:
            total = self.budget.total_s
            why = (
                f"stopped after {result.duration_s:.0f} s, when review.time_budget_s ({total:g} s) was spent"
            )
            result = result.model_copy(update={"status": "skipped", "message": why})
            self.budget.cut(f"{label}: {why}")
        if cache is not None and side.side == "base":
            self.store.keep_cache(spec, cache)  # as the probe left it, before anything else reads it
        compiled = probe_metrics(result, CompileMetrics)
        if from_base and compiled is not None:
            result = result.with_metrics(compiled.model_copy(update={"from_base_cache": True}))
        step.done()
        task.finish(_outcome(result))
        self._keep([result])
        return result

    def _cut(self, item: Item, label: str, expected: float, why: str) -> ProbeResult:
        """A per-side probe that does not run: the review's budget cannot pay for it."""
        wl, probe, side = item
        self.budget.skip(label, expected, why)
        self.progress.begin(label).finish(why)  # a step of the plan, counted, that did not run
        result = ProbeResult(
            probe=probe, workload=wl.name, side=side.side, status="skipped", duration_s=0.0, message=why
        )
        self._keep([result])
        return result

    def _compile_threads(self) -> dict[str, str]:
        """With several probes at once on a GPU runner, each gets its share of Triton's compile
        workers (at least four): four compile probes with a pool the size of the machine each started
        64 workers,
        each importing torch, on 16 cores."""
        run = self.run_
        if run.jobs <= 1 or run.device != "cuda" or "TORCHINDUCTOR_COMPILE_THREADS" in os.environ:
            return {}
        return {"TORCHINDUCTOR_COMPILE_THREADS": str(max(4, len(os.sched_getaffinity(0)) // run.jobs))}

    def _expected(self, wl: WorkloadConfig, probe: str, side: str) -> float:
        """A per-side probe's expected cost: what the other side's run of it took where it
        finished (base's compile, which head's waits for), else the prior."""
        if side == "head" and probe == "compile" and wl.name in self.base_compiles:
            done = self.base_compiles[wl.name]
            if done.done() and not done.cancelled() and done.exception() is None:
                return done.result().duration_s
        other = self.kept.get((wl.name, probe, "head" if side == "base" else "base"))
        if other is not None and other.status == "ok":
            return other.duration_s
        return prior(probe, self.run_.device) * self._slowness(wl)

    def _slowness(self, wl: WorkloadConfig) -> float:
        """How much longer than their priors ``wl``'s probes have taken in this review so far (1
        where none finished, never below 1): a model ten times the demo's takes about ten times
        each probe's prior, and its next probe's estimate says so before it is started, rather than
        running into the review's deadline."""
        device = self.run_.device
        done = [
            (r.duration_s, prior(p, device))
            for (w, p, _), r in self.kept.items()
            if w == wl.name and r.status == "ok"
        ]
        spent, planned = sum(d for d, _ in done), sum(p for _, p in done)
        return max(1.0, spent / planned) if planned > 0 else 1.0

    def _shares(self, wl: WorkloadConfig) -> bool:
        return shares_compile_cache(self.run_, wl, busy=len(self.single) > self.run_.jobs)

    def _compile_cache(self, wl: WorkloadConfig, side: str) -> tuple[Path, bool]:
        """The cache a side's compile probe compiles into, and whether it starts from base's.

        Head's starts from a copy of base's once base's probe is through: what both sides compile
        identically (most of a PR's graphs) is compiled once, and head compiles only what it
        changed (ResNet-50's compile probe took 122-128 s per side on the H200, both cold). A copy,
        not a link: head's code runs in that process and must not change what base compiled.
        Not where the workload's first compile is held to ``budgets.compile_latency_s``, which
        needs head's to be cold, nor across two interpreters, whose caches do not match."""
        cache = side_caches(self.workdir, wl.name)[side]
        shutil.rmtree(cache, ignore_errors=True)
        if side != "head" or not self._shares(wl) or wl.name not in self.base_compiles:
            return cache, False
        base = self.base_compiles[wl.name].result()  # submitted first: running or done
        source = side_caches(self.workdir, wl.name)["base"]
        if base.status != "ok" or not source.is_dir():
            return cache, False
        shutil.copytree(source, cache, symlinks=True)
        copy_base_for_head(self.workdir, wl.name)
        return cache, True

    def _timing_estimate(
        self, wl: WorkloadConfig, collected: list[ProbeResult], pairs: int | None = None
    ) -> float:
        """The timing gate's first look (or ``pairs`` pairs) for ``wl``: a warm process sets up in
        about the time base's compile probe took (both import, build and compile)."""
        cfg = self.run_.config.timing
        base = next(
            (r for r in collected if r.workload == wl.name and r.probe == "compile" and r.side == "base"),
            None,
        )
        setup_s = base.duration_s if base is not None else prior("compile", self.run_.device)
        return timing_estimate_s(cfg, setup_s, pairs or cfg.processes)

    def _timed(
        self,
        wl: WorkloadConfig,
        probe: str,
        collected: list[ProbeResult],
        run_paired: Callable[..., Any],
        also_beside: Callable[[], None] | None = None,
    ) -> list[ProbeResult]:
        """``wl``'s timing step; ``also_beside``: more host work to do while its workers set up."""
        run, budget = self.run_, self.budget
        label = f"base ⇄ head · {wl.name} · {probe}"
        expected = self._timing_estimate(wl, collected)
        left = budget.left() - self.latency.reserved_s  # less what the samples still owed will take
        if left < expected:
            why = (
                f"not run: its first {run.config.timing.processes} pairs would take about {expected:.0f} s, "
                f"more than the {max(left, 0):.0f} s left of review.time_budget_s "
                f"({budget.total_s:g} s)"
            )
            budget.skip(label, expected, why)
            self.progress.begin(label).finish(why)  # a step of the plan, counted, that did not run
            return collected + _skipped(run, wl, probe, why)

        latency_pairs = self.latency.latency_pairs(wl, collected, expected)
        # Its samples wait where one batch of compiles has room for them: for the next workload's
        # set-up, or failing that for other workloads' samples.
        # (through the module: how many pairs one batch of compiles takes, looked up where used)
        defer = 0 < latency_pairs <= paired_timing.latency_batch_pairs()
        owed = sum(len(p.pairs) for p in self.latency.pending)
        # Earlier workloads' samples are made while this one's first look sets up where the machine
        # has a core for each of those processes (the samples' and the set-up's): the set-up is
        # host work that times nothing, and both sides of each sample pair see it alike. Else they
        # wait on for this workload's, while one batch has room for all, or are made now.
        beside = owed > 0 and owed + run.config.timing.processes <= paired_timing.latency_batch_pairs()
        if not beside and defer and owed + latency_pairs > paired_timing.latency_batch_pairs():
            collected = self.latency.take_pending(collected)
        taken: list[list[ProbeResult]] = []  # what the samples made beside the set-up joined

        def make_pending(so_far: list[ProbeResult] = collected) -> None:
            taken.append(self.latency.take_pending(so_far, during=wl.name))

        latency_s = self.latency.latency_estimate(wl, collected, latency_pairs) if latency_pairs else 0.0
        step = budget.begin(label, expected + (0.0 if defer else latency_s))
        task = self.progress.begin(label)

        def on_pair(n: int, state: str, t: Task = task) -> None:
            t.note(f"pair {n} of {run.config.timing.processes}–{run.config.timing.max_processes}: {state}")

        pair = run_paired(
            probe_spec(run, wl, probe, run.base),
            probe_spec(run, wl, probe, run.head),
            run.base,
            run.head,
            self.workdir,
            run.config.budgets,
            on_pair=on_pair,
            latency_pairs=latency_pairs,
            deadline=budget.deadline() - self.latency.reserved_s,
            forks=self.forks,
            defer_latency=self.latency.may_hold if defer else None,
            beside_setup=_in_turn([make_pending] if beside else [], also_beside),
        )
        if taken:
            collected = taken[0]
        outcome = _paired_outcome(pair.base, pair.head)
        if pair.pending is not None:
            self.latency.hold(pair.pending, latency_s)
        more = f"more pairs: {'; '.join(pair.held_open)}" if pair.held_open else None
        step.done(more, parts_s=pair.parts_s)
        task.finish(f"{outcome}{parts_said(pair.parts_s)}{f' ({more})' if more else ''}")
        return self.latency.joined([*collected, pair.base, pair.head], wl.name, pair, latency_pairs)


def host_cores() -> int:
    return len(os.sched_getaffinity(0))


def _in_turn(works: list[Callable[[], None]], last: Callable[[], None] | None) -> Callable[[], None] | None:
    """One callable doing ``works`` then ``last``, or None where there is nothing to do."""
    todo = [*works, *([last] if last is not None else [])]
    if not todo:
        return None

    def run_all() -> None:
        for work in todo:
            work()

    return run_all


def _rejoined(
    whole: list[ProbeResult], partial: list[ProbeResult], timed: list[ProbeResult], workload: str
) -> list[ProbeResult]:
    """Every per-side result (``whole``) with ``workload``'s as its timing step left them
    (``timed``, which began from ``partial``: samples joined, timing results added), and any of
    ``workload``'s that ended later (a follow-up)."""
    began = {id(r) for r in partial}
    later = [r for r in whole if r.workload == workload and id(r) not in began]
    return [r for r in whole if r.workload != workload] + [r for r in timed if r.workload == workload] + later


def _skipped(run: ReviewRun, wl: WorkloadConfig, probe: str, why: str) -> list[ProbeResult]:
    return [
        ProbeResult(probe=probe, workload=wl.name, side=side, status="skipped", duration_s=0.0, message=why)
        for side in ("base", "head")
    ]


def _paired_outcome(base: ProbeResult, head: ProbeResult) -> str:
    timed = probe_metrics(head, TimingMetrics)
    figures = throughput_figures(probe_metrics(base, TimingMetrics), timed)
    if timed and figures:
        name, b, h = figures
        what = METRIC_LABELS[name].replace(" / step", "")
        return f"ok, {len(timed.processes)} process pairs, {what} {b:.3f} → {h:.3f} ms"
    return "; ".join(f"{r.side} {_outcome(r)}" for r in (base, head))
