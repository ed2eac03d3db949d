"""The review's compile-latency stage: where each workload's compile latency is measured, and its
measuring. Callgrind's counted compiles once the per-side probes are through; the samples the
timing pairs' workers make (how many each workload's timing step makes, and those whose workers
wait, idle, to make them together with other workloads'); more pairs of compiles where the wall
clock left a workload undecided; each joined to its workload's compile results, within what is
left of the review's time budget. The driver (perfcheck/runner/orchestrate.py) calls each at its
place in the review and passes in what the earlier stages made.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from statistics import median

from perfcheck.measures import CompileLatency, CompileMetrics, Side
from perfcheck.progress import Progress, Task
from perfcheck.runner.budget import Budget, Step, cold_compile_estimate_s, latency_estimate_s, prior
from perfcheck.runner.latency import callgrind
from perfcheck.runner.latency import more_pairs as latency_more
from perfcheck.runner.latency import runs as latency_runs
from perfcheck.runner.latency.results import (
    compiled_both,
    noted_more,
    samples_said,
    stopped_at_limit,
    with_latency,
    with_sample_phases,
)
from perfcheck.runner.process import forkserver
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.probe_process import probe_spec, run_probe
from perfcheck.runner.review_run import ReviewRun
from perfcheck.runner.timing.pairs import PairedTiming, PendingLatency, take_latency
from perfcheck.schema import ProbeResult
from perfcheck.settings import WorkloadConfig
from perfcheck.spec import LatencyPlan, ProbeSpec

# How long before the review's deadline a compile-latency process hands back what it measured.
STOP_MARGIN_S = 5.0


class LatencyStage:
    """The compile latency of one review's workloads: where each is measured, what is owed, and
    the measuring, from callgrind's counts to the samples the timing workers make."""

    def __init__(
        self,
        run: ReviewRun,
        workdir: Path,
        forks: ForkServers,
        budget: Budget,
        progress: Progress,
        latency_at: dict[str, latency_runs.Where | None],
        latency_owed: set[str],
    ) -> None:
        self.run_ = run
        self.workdir = workdir
        self.forks = forks
        self.budget = budget
        self.progress = progress
        # Where each workload's compile latency is measured (None: nowhere).
        self.latency_at = latency_at
        # The workloads whose compile latency has a step of the progress plan, not yet begun.
        self.latency_owed = latency_owed
        # Why a workload's compile latency is not callgrind's, or not measured at all.
        self.notes: dict[str, str] = {}
        # Timing pairs whose workers wait, idle, to make their compile-latency samples together with
        # other workloads' (perfcheck/runner/timing/pairs.py ``take_latency``), and what those are expected to
        # cost.
        self.pending: list[PendingLatency] = []
        self.reserved_s = 0.0
        # The workload whose callgrind processes ran past their limit, once one has: this machine
        # is slower than callgrind's estimates, so auto takes the wall clock for the rest.
        self.callgrind_overran: str | None = None
        # A cache-cold compile against a process's first, as this review's rounds measured it.
        self.cold_of_first: float | None = None

    def callgrind_latency(self, collected: list[ProbeResult]) -> list[ProbeResult]:
        """Compile latency under callgrind where it was asked for (``auto`` measures by wall clock
        first, and takes callgrind only where that leaves it undecided: ``more_latency``); the
        wall clock's first round where no timing pairs make its samples."""
        out = list(collected)
        for wl in self.run_.workloads:
            where = self.latency_at[wl.name]
            compiled = compiled_both(out, wl.name)
            if where is None or compiled is None:
                continue
            if where != "callgrind":
                if where == "rounds":
                    out = self._first_round(out, wl, compiled)
                continue
            counted = self._run_callgrind(wl, latency_runs.Choice("callgrind"))
            out = with_latency(out, wl.name, counted)
        return out

    def _escalate(self, wl: WorkloadConfig, out: list[ProbeResult]) -> tuple[list[ProbeResult], bool]:
        """Callgrind's counts where ``auto``'s wall clock left ``wl``'s compile latency undecided
        and its estimate, made from those wall-clock samples, fits (``latency_runs.choose``), and
        whether they stand: not where callgrind was not taken, or stopped at its limit (the wall
        clock's samples stand, saying so, and more pairs of them may be bought)."""
        compiled = compiled_both(out, wl.name)
        cfg = self.run_.config.compile
        if compiled is None or cfg.measure != "auto" or self.run_.device != "cpu":
            return out, False
        state = latency_more.undecided(compiled, self.run_.config)
        if state is None:
            return out, False
        cold_s = max(median(s.wall_s for s in m.samples) for m in state.latency.values())
        have_valgrind = callgrind.valgrind() is not None
        choice = latency_runs.choose(
            cfg, self.run_.device, have_valgrind, cold_s, self.budget.left(), self.callgrind_overran
        )
        if choice.measure != "callgrind":
            return out, False
        c = state.change
        why = (
            f"callgrind: the wall clock's {c.pairs} pairs left it undecided ({c.change_pct:+.1f} %, "
            f"{c.low_pct:+.1f} … {c.high_pct:+.1f}, against {c.budget_pct:g} %)"
        )
        counted = self._run_callgrind(wl, dataclasses.replace(choice, note=why))
        if stopped_at_limit(counted):
            # A machine busier than the estimate: the wall clock's samples stand, for the review's
            # other workloads too, whose estimates are made the same way.
            self.callgrind_overran = wl.name
            said = f"callgrind was {choice.limit_words()}; the wall clock stands"
            self.budget.cut(f"{wl.name}: compile latency: {said}")
            note = (
                f"wall-clock: callgrind was {choice.limit_words()}; the machine is busier than that estimate"
            )
            kept = {s: m.model_copy(update={"note": note}) for s, m in state.latency.items()}
            return with_latency(out, wl.name, kept), False
        self.latency_at[wl.name] = "callgrind"
        counted = {s: m.model_copy(update={"note": why}) for s, m in counted.items()}
        return with_latency(out, wl.name, counted), True

    def _first_round(
        self, collected: list[ProbeResult], wl: WorkloadConfig, compiled: Mapping[str, CompileMetrics]
    ) -> list[ProbeResult]:
        """Compile latency by wall clock where no timing pairs make it: one round of fresh-cache
        compiles, a process a side at once (perfcheck/runner/latency/more_pairs.py ``run_round``), so
        that each pair of samples is made in the same moment. Made one side after the other (in
        each side's compile probe, as before), a busy moment on a shared CPU moved one side's
        samples only: an A/A read +48.5 % (+46.5 … +50.6) on a CI worker running a second suite."""
        runs = self.run_.config.compile.runs
        first_s = max(m.cold_compile_s for m in compiled.values())
        expected = latency_more.START_S + first_s + runs * self._cold_estimate_s(first_s)
        label = f"base ⇄ head · {wl.name} · compile latency"
        task = self.latency_task(wl.name, label)
        left = self.budget.left()
        if expected > left:
            why = (
                f"not measured: {runs} compiles a side would take about {expected:.0f} s, more than "
                f"the {max(left, 0):.0f} s left of review.time_budget_s"
            )
            self.budget.skip(label, expected, why)
            task.finish(why)
            unmade = {s: CompileLatency(measure="wall", failures=[why]) for s in ("base", "head")}
            return self.with_samples(collected, wl.name, unmade)
        step = self.budget.begin(label, expected)
        made = {
            str(side): m for side, m in latency_more.run_round(self._wall_launch(wl, "-first"), runs).items()
        }
        said = f"{samples_said(made)}, both sides at once"
        stopped = self._stopped(label, made, runs)
        if stopped:
            said += f"; {stopped}"
        self._learn(made, first_s)
        step.done(said)
        task.finish(said)
        return self.with_samples(collected, wl.name, made)

    def _cold_estimate_s(self, first_s: float) -> float:
        """A cache-cold compile's expected cost against a process's first compile: the ratio this
        review measured in its rounds so far where it has, else the prior (budget.COLD_OF_FIRST)."""
        if self.cold_of_first is not None:
            return self.cold_of_first * first_s
        return cold_compile_estimate_s(first_s, self.run_.config.compile.rebuild_kernels)

    def _learn(self, made: Mapping[str, CompileLatency], first_s: float) -> None:
        """The ratio of a cache-cold compile to the first, as these samples have it (the slower
        side's mean), for the estimates of the steps after."""
        means = [sum(s.wall_s for s in m.samples) / len(m.samples) for m in made.values() if m.samples]
        if means and first_s > 0:
            ratio = max(means) / first_s
            self.cold_of_first = max(ratio, self.cold_of_first or 0.0)

    def _stop_by(self) -> float:
        """The review's deadline on the clock a probe process reads (seconds since the epoch), a
        few seconds early: the process hands back its samples and ends before it is killed."""
        return time.time() + (self.budget.deadline() - time.monotonic()) - STOP_MARGIN_S

    def _stopped(self, label: str, made: Mapping[str, CompileLatency], runs: int) -> str | None:
        """Where a side's process stopped before its ``runs`` compiles (the budget's deadline), the
        cut that says so, in the books and the Time line."""
        n = min((len(m.samples) for m in made.values()), default=0)
        if n >= runs or any(m.failures for m in made.values()):
            return None  # all made, or a side failed (which its failures say)
        why = f"stopped after {n} of {runs} compiles a side, when review.time_budget_s was nearly spent"
        self.budget.cut(f"{label}: {why}")
        return why

    def _wall_launch(self, wl: WorkloadConfig, tag: str) -> latency_more.Launch:
        """Starts one side's process of wall-clock compiles of ``wl``: a warm-up compile, then the
        counted fresh-cache ones (its files named with ``tag``)."""
        run = self.run_
        sides = {"base": run.base, "head": run.head}

        def launch(side: Side, compiles: int) -> ProbeResult:
            plan = LatencyPlan(measure="wall", compiles=compiles, stop_by=self._stop_by())
            spec = probe_spec(run, wl, "compile", sides[side])
            spec = spec.model_copy(update={"probe": "compile_latency", "latency": plan})
            forks = self.forks if forkserver.times_forked(run.device) else None
            return run_probe(
                spec, sides[side].python, wl.timeout_s, self.workdir, tag=tag, forks=forks,
                deadline=self.budget.deadline(),
            )  # fmt: skip

        return launch

    def _run_callgrind(self, wl: WorkloadConfig, choice: latency_runs.Choice) -> dict[Side, CompileLatency]:
        run = self.run_
        label = f"base ⇄ head · {wl.name} · compile latency (callgrind)"
        if wl.name in self.latency_owed:
            task = self.latency_task(wl.name, label)
        else:  # a workload whose compile latency has no step of the plan (none is left for it)
            self.progress.total += 1
            task = self.progress.begin(label)
        step = self.budget.begin(label, choice.estimate_s)
        sides = {"base": run.base, "head": run.head}

        def launch(
            spec: ProbeSpec, side: Side, tag: str, prefix: list[str], env: dict[str, str], dumps: Path
        ) -> ProbeResult:
            python = sides[side].python
            return run_probe(
                spec,
                python,
                min(wl.timeout_s, choice.limit_s),
                self.workdir,
                tag=tag,
                prefix=prefix,
                extra_env=env,
                writable=[dumps],
                deadline=self.budget.deadline(),  # never past the review's budget
            )

        specs: dict[Side, ProbeSpec] = {s: probe_spec(run, wl, "compile", sides[s]) for s in ("base", "head")}
        measured = latency_runs.measure_callgrind(specs, run.config.compile.runs, launch, choice.note)
        n = min(len(m.samples) for m in measured.values())
        failed = [f for m in measured.values() for f in m.failures]
        outcome = f"{n} per side" if n else f"not measured: {failed[0] if failed else ''}"
        if stopped_at_limit(measured):
            outcome = f"{choice.limit_words()}: the wall clock instead"
        step.done(outcome)
        task.finish(outcome)
        return measured

    def samples_cost(self, wl: WorkloadConfig, collected: list[ProbeResult]) -> float:
        """What ``wl``'s compile-latency samples in its timing workers are expected to cost (0 where
        they are not made there), for the order the workloads are timed in."""
        if self.latency_at[wl.name] != "timing" or compiled_both(collected, wl.name) is None:
            return 0.0
        return self.latency_estimate(wl, collected, self.run_.config.compile.runs)

    def latency_pairs(self, wl: WorkloadConfig, collected: list[ProbeResult], timing_s: float) -> int:
        """How many of the timing pairs also make the compile-latency samples: ``compile.runs``, or
        fewer where what is left of the budget after the timing's first look cannot pay for them
        (at least two, else none), said in the cuts and the compile-latency row."""
        if self.latency_at[wl.name] != "timing" or compiled_both(collected, wl.name) is None:
            return 0
        runs = self.run_.config.compile.runs
        left = self.budget.left() - self.reserved_s - timing_s
        affordable = next(
            (n for n in range(runs, 1, -1) if self.latency_estimate(wl, collected, n) <= left), 0
        )
        if affordable >= runs:
            return runs
        what = f"{wl.name}: compile latency"
        if affordable >= 2:
            self.budget.cut(
                f"{what}: {affordable} cache-cold compiles per side instead of {runs}, to fit "
                "review.time_budget_s"
            )
            return affordable
        cost = self.latency_estimate(wl, collected, runs)
        why = (
            f"not measured: {runs} pairs of cache-cold compiles would take about {cost:.0f} s, more "
            f"than the review's time budget leaves"
        )
        self.budget.cut(f"{what}: {why}")
        self.notes[wl.name] = why
        return 0

    def latency_estimate(self, wl: WorkloadConfig, collected: list[ProbeResult], pairs: int) -> float:
        compiled = compiled_both(collected, wl.name)
        first = compiled["base"].cold_compile_s if compiled else prior("compile", self.run_.device)
        cores = len(os.sched_getaffinity(0))
        cfg = self.run_.config.compile
        # Only Inductor's compiled code is cached, so only its workers' set-up reads it and primes.
        return latency_estimate_s(first, pairs, cores, cfg.rebuild_kernels, primed=cfg.backend == "inductor")

    def may_hold(self, pending: PendingLatency) -> bool:
        """Whether ``pending``'s workers may wait, idle, beside those waiting already: their device
        memory (each process's peak, a quarter again for the allocator's cache, 768 MiB for its
        context) within 70 % of the GPU's, which leaves the rest to the next workload's processes,
        and the host's memory more than a third free. (The suite's ResNet-50 and ViT-B/16 training
        steps peak at 5.6 and 5.2 GB a process on the H200: both wait, in 90 of its 141 GB.)"""
        waiting = [*self.pending, pending]
        device_total = max(p.device_total_mb() for p in waiting)
        if device_total > 0:
            processes = sum(2 * len(p.pairs) for p in waiting)
            need = 1.25 * sum(p.held_device_mb() for p in waiting) + 768 * processes
            if need > 0.7 * device_total:
                return False
        return host_memory_free_share() > 1 / 3

    def hold(self, pending: PendingLatency, latency_s: float) -> None:
        """``pending``'s workers wait to make their samples later; ``latency_s``, what those are
        expected to cost, is kept back from the review's budget until then."""
        self.pending.append(pending)
        self.reserved_s += latency_s

    def joined(
        self, out: list[ProbeResult], workload: str, pair: PairedTiming, latency_pairs: int
    ) -> list[ProbeResult]:
        """``out`` with the compile latency ``workload``'s timing step made: its samples, or the
        note that says why there are none; the step counted for them finished where they were made
        in the timing step."""
        if pair.pending is None and latency_pairs:
            spent = pair.parts_s.get("compile latency", 0.0)
            self.latency_task(workload).finish(
                f"{samples_said(pair.latency)}, made in the timing step above ({spent:.0f} s of it)"
            )
        if latency_pairs and pair.latency:
            out = self.with_samples(out, workload, pair.latency)
        elif self.latency_at[workload] == "timing" and (note := self.notes.get(workload)):
            out = with_latency(
                out, workload, dict.fromkeys(("base", "head"), CompileLatency(measure="wall", note=note))
            )
        return out

    def take_pending(self, collected: list[ProbeResult], during: str | None = None) -> list[ProbeResult]:
        """The samples the waiting workers owe, made all at once, joined to their workloads'
        compile results; within what is left of the review's time budget, else cut, saying so.
        ``during``: the workload whose timing workers set up meanwhile, said in the step's line."""

        if not self.pending:
            return collected
        pending, expected = self.pending, self.reserved_s
        self.pending, self.reserved_s = [], 0.0
        names = [p.workload for p in pending]
        label = f"base ⇄ head · {', '.join(names)} · compile latency"
        tasks = {name: self.latency_task(name) for name in names}
        if self.budget.left() < expected:
            why = (
                f"not measured: its samples would take about {expected:.0f} s, more than the "
                f"{max(self.budget.left(), 0):.0f} s left of review.time_budget_s"
            )
            for p in pending:
                p.close()
            self.budget.skip(label, expected, why)
            for name, task in tasks.items():
                self.notes[name] = why
                task.finish(why)
            return collected
        step = self.budget.begin(label, expected)
        measured = take_latency(pending)
        step.done()
        others = {name: [n for n in names if n != name] for name in names}
        for name, task in tasks.items():
            beside = f", made beside {', '.join(others[name])}'s" if others[name] else ""
            if during is not None:
                beside += f", while {during}'s timing workers set up"
            task.finish(f"{samples_said(measured.get(name, {}))}{beside}")
            if measured.get(name):
                collected = self.with_samples(collected, name, measured[name])
        return [with_sample_phases(r, pending) for r in collected]

    def more_latency(self, collected: list[ProbeResult]) -> list[ProbeResult]:
        """More pairs of compiles where the wall clock left a workload's compile latency undecided
        (perfcheck/runner/latency/more_pairs.py), within what is left of the review's budget."""
        run, out = self.run_, list(collected)
        for wl in run.workloads:
            compiled = compiled_both(out, wl.name)
            if compiled is None or self.latency_at[wl.name] is None:
                continue
            out, counted = self._escalate(wl, out)
            if counted:
                continue
            compiled = compiled_both(out, wl.name) or compiled
            launch = self._wall_launch(wl, "-more")
            label = f"base ⇄ head · {wl.name} · compile latency, more pairs"
            began: list[tuple[Task, Step]] = []  # the step, once a round starts

            def note(
                line: str, expected_s: float, label: str = label, began: list[tuple[Task, Step]] = began
            ) -> None:
                if not began:
                    self.progress.total += 1
                    began.append((self.progress.begin(label), self.budget.begin(label, expected_s)))
                began[0][0].note(line)

            outcome = latency_more.more_pairs(compiled, run.config, self.budget.left, launch, note)
            if outcome is None:
                continue
            if outcome.latency is None:
                self.budget.cut(f"{wl.name}: compile latency: {outcome.said}")
            else:
                out = with_latency(out, wl.name, noted_more(outcome.latency, compiled, outcome.said))
            for task, step in began:
                step.expected_s = outcome.expected_s
                step.done(outcome.said)
                task.finish(outcome.said)
        return out

    def with_samples(
        self, results: list[ProbeResult], workload: str, latency: Mapping[str, CompileLatency]
    ) -> list[ProbeResult]:
        note = self.notes.get(workload)
        return with_latency(
            results, workload, {s: m.model_copy(update={"note": note or m.note}) for s, m in latency.items()}
        )

    def latency_task(self, workload: str, label: str | None = None) -> Task:
        """The step of the progress plan counted for ``workload``'s compile latency, begun."""
        self.latency_owed.discard(workload)
        return self.progress.begin(label or f"base ⇄ head · {workload} · compile latency")

    def close_pending(self) -> None:
        """Ends the workers that still wait to make their samples (a review stopped on the way)."""
        for pending in self.pending:
            pending.close()

    def finish_owed(self) -> None:
        """The steps of the plan counted for compile latency that was never measured, finished
        saying why."""
        for name in sorted(self.latency_owed):
            unmade = (
                "a side's compile probe failed or did not run"
                if self.latency_at.get(name) == "rounds"
                else "its timing did not run"
            )
            self.latency_task(name).finish(f"not measured: {self.notes.get(name, unmade)}")


def host_memory_free_share() -> float:
    """The share of the host's memory the kernel says is available (1.0 where it does not say)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return int(fields["MemAvailable"].split()[0]) / int(fields["MemTotal"].split()[0])
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        return 1.0
