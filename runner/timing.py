"""Paired, interleaved A/B timing of one workload: base and head in long-lived workers.

Imports no torch. Both workers set up (compile, warm up) at the same time; then rounds
alternate which side goes first (A B, B A, ...), so drift and order effects hit both sides.
An inconclusive verdict buys more rounds, up to ``max_rounds`` and the time budget.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from perfcheck.bot.stats import Decision, is_host_bound, sequential_decision
from perfcheck.runner.orchestrate import SideSetup, cache_env
from perfcheck.schema import Environment, ProbeResult, TimingMetrics
from perfcheck.spec import ProbeSpec


class WorkerFailed(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.side = ""  # set by whoever knows which side's worker it was


class TimingWorker:
    """One side's worker process and its command/reply pipes."""

    def __init__(self, spec: ProbeSpec, python: str, workdir: Path, tag: str = "") -> None:
        stem = f"{spec.side}-{spec.workload.name}-timing{tag}"
        spec_path = workdir / f"{stem}.spec.json"
        spec_path.write_text(spec.model_dump_json())
        self.log_path = workdir / f"{stem}.log"
        read_fd, write_fd = os.pipe()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [python, "-m", "perfcheck.runner.timing_worker", str(spec_path), str(write_fd)],
                cwd=spec.tree,
                env=cache_env(stem),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        os.close(write_fd)
        self.replies: IO[str] = os.fdopen(read_fd, "r")

    def send(self, cmd: str, **args: Any) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._death() from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        ready, _, _ = select.select([self.replies], [], [], timeout_s)
        if not ready:
            self.kill()
            raise WorkerFailed("timeout", f"no answer within {timeout_s:g} s; the worker was killed")
        line = self.replies.readline()
        if not line:
            raise self._death()
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerFailed("crashed", "the worker sent an unreadable reply") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            raise WorkerFailed("crashed", str(answer.get("error") if isinstance(answer, dict) else answer))
        return answer

    def ask(self, cmd: str, timeout_s: float, **args: Any) -> dict[str, Any]:
        self.send(cmd, **args)
        return self.receive(timeout_s)

    def _death(self) -> WorkerFailed:
        code = self.proc.wait()
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-12:])
        how = f"died of {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return WorkerFailed("crashed", f"the timing worker {how}\n{tail}".strip())

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=30)
            except (WorkerFailed, subprocess.TimeoutExpired, OSError):
                pass
        self.kill()
        self.replies.close()


@dataclass(frozen=True)
class PairedTiming:
    base: ProbeResult
    head: ProbeResult


def _result(
    spec: ProbeSpec,
    setup: dict[str, Any],
    samples: list[float],
    host: list[float],
    generation_rounds: list[int],
    finish: dict[str, Any],
    duration: float,
) -> ProbeResult:
    metrics = TimingMetrics(
        mode=setup["mode"],
        backend=setup["backend"],
        steps_per_round=spec.timing.steps_per_round,
        samples_ms=samples,
        batch_size=setup["batch_size"],
        warmup_steps=setup["warmup_steps"],
        warmup_converged=setup["warmup_converged"],
        cold_compile_s=setup["cold_compile_s"],
        compile_breakdown_s=setup["compile_breakdown_s"],
        peak_memory_mb=finish["peak_memory_mb"],
        memory_kind=finish["memory_kind"],
        recompiles_during_timing=finish["recompiles_during_timing"],
        planted_slowdown_pct=spec.planted_slowdown_pct,
        host_issue_ms=host,
        generation_rounds=generation_rounds,
    )
    return ProbeResult(
        probe="timing",
        workload=spec.workload.name,
        side=spec.side,
        status="ok",
        duration_s=round(duration, 3),
        environment=Environment.model_validate(setup["environment"]),
        timing=metrics,
        details={"warmup_block_medians_ms": setup["warmup_block_medians_ms"]},
    )


def _failed(spec: ProbeSpec, err: WorkerFailed, duration: float) -> ProbeResult:
    return ProbeResult(
        probe="timing",
        workload=spec.workload.name,
        side=spec.side,
        status=err.status,
        duration_s=round(duration, 3),
        message=str(err),
    )  # type: ignore[arg-type]


@dataclass
class _Generation:
    """One pair of worker processes and what they measured."""

    setups: dict[str, dict[str, Any]] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=lambda: {"base": [], "head": []})
    host: dict[str, list[float]] = field(default_factory=lambda: {"base": [], "head": []})
    finishes: dict[str, dict[str, Any]] = field(default_factory=dict)


def _ask(
    workers: dict[str, TimingWorker], side: str, cmd: str, timeout: float, **args: Any
) -> dict[str, Any]:
    try:
        return workers[side].ask(cmd, timeout, **args)
    except WorkerFailed as err:
        err.side = side
        raise


def _generation(
    specs: dict[str, ProbeSpec],
    sides: dict[str, SideSetup],
    workdir: Path,
    tag: str,
    budget_pct: float,
    on_round: Any,
) -> tuple[_Generation, Decision | None]:
    cfg, timeout = specs["head"].timing, specs["head"].workload.timeout_s
    gen = _Generation()
    workers = {side: TimingWorker(specs[side], sides[side].python, workdir, tag) for side in ("base", "head")}
    try:
        # Both compile at once: compiling is mostly host work, and it halves the wait.
        for side, worker in workers.items():
            try:
                worker.send("setup")
            except WorkerFailed as err:
                err.side = side
                raise
        for side, worker in workers.items():
            try:
                gen.setups[side] = worker.receive(timeout)
            except WorkerFailed as err:
                err.side = side
                raise
        # Warm-up one side at a time: a steady state measured while the other compiles is not one.
        for side in workers:
            gen.setups[side] |= _ask(workers, side, "warmup", timeout)
        timed_since = time.monotonic()
        while True:
            s, h = gen.samples, gen.host
            bound = is_host_bound(h["base"], s["base"]) or is_host_bound(h["head"], s["head"])
            decision = sequential_decision(
                s["base"],
                s["head"],
                budget_pct,
                cfg.min_rounds,
                cfg.extra_rounds,
                cfg.max_rounds,
                cfg.confidence,
                bound,
            )
            if decision is not None or time.monotonic() - timed_since > cfg.time_budget_s:
                break
            for side in ("base", "head") if len(s["head"]) % 2 == 0 else ("head", "base"):
                answer = _ask(workers, side, "round", timeout, steps=cfg.steps_per_round)
                s[side].append(round(answer["median_ms"], 5))
                if answer.get("host_median_ms") is not None:
                    h[side].append(round(answer["host_median_ms"], 5))
            if on_round is not None:
                on_round(len(s["head"]))
        gen.finishes = {side: _ask(workers, side, "finish", timeout) for side in workers}
        return gen, decision
    finally:
        for worker in workers.values():
            worker.close()


def run_paired(
    base_spec: ProbeSpec,
    head_spec: ProbeSpec,
    base: SideSetup,
    head: SideSetup,
    workdir: Path,
    budget_pct: float,
    on_round: Any = None,
) -> PairedTiming:
    """Time both sides in alternating rounds; returns one ProbeResult per side, never raises for them.

    Two processes running identical code can differ by several percent for their whole life
    (memory layout, placement): a bias no pairing of rounds cancels. So a fail must reproduce in a
    second, fresh pair of workers (``timing.confirm_fail``); passes cost one pair only.
    """
    start = time.monotonic()
    specs = {"base": base_spec, "head": head_spec}
    sides = {"base": base, "head": head}
    gens: list[_Generation] = []
    try:
        for n in range(2 if head_spec.timing.confirm_fail else 1):
            gen, decision = _generation(specs, sides, workdir, f"-g{n + 1}", budget_pct, on_round)
            gens.append(gen)
            if decision is None or decision.verdict != "fail":
                break
    except WorkerFailed as err:
        elapsed = time.monotonic() - start
        results = {}
        for side in ("base", "head"):
            if side == err.side:
                results[side] = _failed(specs[side], err, elapsed)
            else:
                # The other side is fine but has nothing to be compared with: skipped, with why.
                results[side] = ProbeResult(
                    probe="timing",
                    workload=specs[side].workload.name,
                    side=side,  # type: ignore[arg-type]
                    status="skipped",
                    duration_s=round(elapsed, 3),
                    message=f"not compared: the other side's timing worker failed ({err.status})",
                )
        return PairedTiming(results["base"], results["head"])
    elapsed = time.monotonic() - start
    return PairedTiming(*(_merged(specs[s], gens, s, elapsed) for s in ("base", "head")))


def _merged(spec: ProbeSpec, gens: list[_Generation], side: str, elapsed: float) -> ProbeResult:
    first = gens[0]
    finish = {
        "peak_memory_mb": max(g.finishes[side]["peak_memory_mb"] for g in gens),
        "memory_kind": first.finishes[side]["memory_kind"],
        "recompiles_during_timing": sum(g.finishes[side]["recompiles_during_timing"] for g in gens),
    }
    return _result(
        spec,
        first.setups[side],
        [x for g in gens for x in g.samples[side]],
        [x for g in gens for x in g.host[side]],
        [len(g.samples[side]) for g in gens],
        finish,
        elapsed,
    )
