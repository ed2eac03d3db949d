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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from perfcheck.bot.stats import is_host_bound, sequential_decision
from perfcheck.runner.orchestrate import SideSetup, cache_env
from perfcheck.schema import Environment, ProbeResult, TimingMetrics
from perfcheck.spec import ProbeSpec


class WorkerFailed(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class TimingWorker:
    """One side's worker process and its command/reply pipes."""

    def __init__(self, spec: ProbeSpec, python: str, workdir: Path) -> None:
        stem = f"{spec.side}-{spec.workload.name}-timing"
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


def run_paired(
    base_spec: ProbeSpec,
    head_spec: ProbeSpec,
    base: SideSetup,
    head: SideSetup,
    workdir: Path,
    budget_pct: float,
    on_round: Any = None,
) -> PairedTiming:
    """Time both sides in alternating rounds; returns one ProbeResult per side, never raises for them."""
    cfg = head_spec.timing
    timeout = head_spec.workload.timeout_s
    start = time.monotonic()
    specs = {"base": base_spec, "head": head_spec}
    workers = {
        "base": TimingWorker(base_spec, base.python, workdir),
        "head": TimingWorker(head_spec, head.python, workdir),
    }
    setups: dict[str, dict[str, Any]] = {}
    failed: dict[str, WorkerFailed] = {}
    samples: dict[str, list[float]] = {"base": [], "head": []}
    host: dict[str, list[float]] = {"base": [], "head": []}
    try:
        # Both compile at once: compiling is mostly host work, and it halves the wait.
        for side, worker in workers.items():
            try:
                worker.send("setup")
            except WorkerFailed as err:
                failed[side] = err
        for side, worker in workers.items():
            if side not in failed:
                try:
                    setups[side] = worker.receive(timeout)
                except WorkerFailed as err:
                    failed[side] = err
        if failed:
            raise next(iter(failed.values()))
        # Warm-up one side at a time: a steady state measured while the other compiles is not one.
        for side, worker in workers.items():
            try:
                setups[side] |= worker.ask("warmup", timeout)
            except WorkerFailed as err:
                failed[side] = err
                raise
        timed_since = time.monotonic()
        while True:
            bound = is_host_bound(host["base"], samples["base"]) or is_host_bound(
                host["head"], samples["head"]
            )
            decision = sequential_decision(
                samples["base"],
                samples["head"],
                budget_pct,
                cfg.min_rounds,
                cfg.extra_rounds,
                cfg.max_rounds,
                cfg.confidence,
                bound,
            )
            if decision is not None or time.monotonic() - timed_since > cfg.time_budget_s:
                break
            order = ("base", "head") if len(samples["head"]) % 2 == 0 else ("head", "base")
            for side in order:
                try:
                    answer = workers[side].ask("round", timeout, steps=cfg.steps_per_round)
                except WorkerFailed as err:
                    failed[side] = err
                    raise
                samples[side].append(round(answer["median_ms"], 5))
                if answer.get("host_median_ms") is not None:
                    host[side].append(round(answer["host_median_ms"], 5))
            if on_round is not None:
                on_round(len(samples["head"]))
        finishes = {side: workers[side].ask("finish", timeout) for side in workers}
        elapsed = time.monotonic() - start
        return PairedTiming(
            *(
                _result(specs[s], setups[s], samples[s], host[s], finishes[s], elapsed)
                for s in ("base", "head")
            )
        )
    except WorkerFailed as err:
        elapsed = time.monotonic() - start
        results = {}
        for side in ("base", "head"):
            if side in failed:
                results[side] = _failed(specs[side], failed[side], elapsed)
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
    finally:
        for worker in workers.values():
            worker.close()
