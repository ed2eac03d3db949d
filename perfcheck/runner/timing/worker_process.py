"""One timing worker process and the conversation with it: spawned behind its side's walls, asked
to set up, time rounds and make a device pass, its replies read as untrusted JSON (bounded,
checked), and what it measured kept per side (SideRecord). perfcheck/runner/timing/pairs.py pairs
these processes, base beside head, until the gate decides.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import IO, Any

from perfcheck.core.stats import fast_mean
from perfcheck.measures import CompileSample, DeviceStep, TimingProcess
from perfcheck.runner.process import channel, forkserver, reaper
from perfcheck.runner.process.probe_process import REAP_WAIT_S, behind_walls, log_tail
from perfcheck.runner.process.sides import probe_env, sandboxed_walls
from perfcheck.spec import ProbeSpec

LATENCY_COMPILE_THREADS = 4
MAX_STEPS_PER_ROUND = 2000


MAX_REPLY = 16 * 1024 * 1024  # a reply line longer than this is no reply: the worker runs PR code


class WorkerFailed(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.side = ""  # set by whoever knows which side's worker it was


class TimingWorker:
    """One side's worker process and its channel: a socket of its own, commands and replies as
    JSON lines (nothing the workload prints can reach it). Forked from a fork server of ``forks``
    where one serves (on a CPU: it saves each worker importing torch, Dynamo and Inductor, 7 s of
    CPU here), else a fresh process."""

    def __init__(
        self,
        spec: ProbeSpec,
        python: str,
        workdir: Path,
        tag: str,
        cache: Path,
        forks: forkserver.ForkServers | None = None,
    ) -> None:
        stem = f"{spec.side}-{spec.workload.name}-timing{tag}"
        spec_path = workdir / f"{stem}.spec.json"
        spec_path.write_text(spec.model_dump_json())
        self.log_path = workdir / f"{stem}.log"
        self.started = time.monotonic()
        ours, theirs = socket.socketpair()
        self.channel = ours
        self.replies: IO[str] = ours.makefile("r", encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None
        self.child: forkserver.Child | None = None
        self.quit_sent = False
        env = probe_env(cache)
        if spec.latency is not None and spec.device == "cuda" and spec.compile.rebuild_kernels:
            # Its cache-cold compile uses a small pool of Triton compile workers, started as it sets
            # up: six processes of a first look with a pool each the size of the machine would
            # import torch a hundred times at once.
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(LATENCY_COMPILE_THREADS))
        walls = sandboxed_walls(spec, workdir, cache)
        with self.log_path.open("wb") as log, contextlib.closing(theirs):
            if forks is not None and forkserver.times_forked(spec.device):
                args = [str(spec_path), f"{channel.PREFIX}{forkserver.RESULT_FD}"]
                module = "perfcheck.runner.timing.worker"
                self.child = forks.fork(
                    python,
                    module,
                    args,
                    spec.tree,
                    env,
                    log.fileno(),
                    theirs.fileno(),
                    walls,
                    spec.compile.backend == "inductor",
                )
            if self.child is None:
                with reaper.spawning() as spawned:
                    self.proc = subprocess.Popen(
                        behind_walls(
                            [
                                python,
                                "-m",
                                "perfcheck.runner.timing.worker",
                                str(spec_path),
                                channel.argument_fd(theirs.fileno()),
                            ],
                            walls,
                        ),
                        cwd=spec.tree,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        pass_fds=(theirs.fileno(),),
                        start_new_session=True,
                    )
                    spawned(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.child.pid if self.child is not None else self.proc.pid  # type: ignore[union-attr]

    def send(self, cmd: str, **args: Any) -> None:
        try:
            self.channel.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
        except OSError:
            raise self._death() from None

    def receive(self, timeout_s: float) -> dict[str, Any]:
        ready, _, _ = select.select([self.channel], [], [], timeout_s)
        if not ready:
            self.kill()
            raise WorkerFailed("timeout", f"no answer within {timeout_s:g} s; the worker was killed")
        try:
            line = self.replies.readline(MAX_REPLY)
        except (OSError, UnicodeDecodeError):
            line = ""
        if not line:
            raise self._death()
        try:
            answer = json.loads(line)
        except ValueError:
            raise WorkerFailed("crashed", "the worker sent an unreadable reply") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            if not isinstance(answer, dict):
                raise WorkerFailed("crashed", str(answer)[:2000])
            status = "failed" if answer.get("status") == "failed" else "crashed"
            raise WorkerFailed(status, str(answer.get("error"))[:4000])
        return answer

    def ask(self, cmd: str, timeout_s: float, **args: Any) -> dict[str, Any]:
        self.send(cmd, **args)
        return self.receive(timeout_s)

    def _wait(self, timeout_s: float | None) -> int | None:
        """Its exit code; None when it still runs after ``timeout_s`` (or its server is gone)."""
        if self.child is not None:
            try:
                return self.child.wait(timeout_s)
            except forkserver.ServerLost:
                return None
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _death(self) -> WorkerFailed:
        code = self._wait(30)
        tail = log_tail(self.log_path)
        if code is None:
            how = "stopped answering"
        else:
            how = f"died of {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return WorkerFailed("crashed", f"the timing worker {how}\n{tail}".strip())

    def kill(self) -> None:
        """End the worker, what is left of its process group, and any orphan it left."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.child is not None:
            self._wait(REAP_WAIT_S)  # its server reaps it
            self.child.close()
        else:
            assert self.proc is not None
            self.proc.wait()
            reaper.finished(self.proc.pid)
        reaper.reap_orphans()

    def ask_to_quit(self) -> None:
        """Ask it to end, not waiting for it to (``close`` waits)."""
        if self.channel.fileno() == -1 or self.quit_sent:
            return
        self.quit_sent = True
        with contextlib.suppress(OSError):  # gone already: ``close`` finds out how
            self.channel.sendall(b'{"cmd": "quit"}\n')

    def close(self) -> None:
        if self.channel.fileno() == -1:
            return  # closed already
        if self._wait(0) is None:
            self.ask_to_quit()
            self._wait(30)
        self.kill()
        self.replies.close()
        self.channel.close()


@dataclass
class Measured:
    """What one worker measured under one condition (the gate has one; the trust bench several)."""

    times_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)  # GPU: host issue time of each timed step
    device: dict[str, Any] | None = None


@dataclass
class SideRecord:
    """One side's worker of one pair: its setup, warm-up and finish replies and what it measured."""

    first: bool
    ready_s: float = 0.0
    steps_per_round: int = 0
    setup: dict[str, Any] = field(default_factory=dict)
    warmup: dict[str, Any] = field(default_factory=dict)
    finish: dict[str, Any] = field(default_factory=dict)
    conditions: list[Measured] = field(default_factory=list)
    latency: CompileSample | None = None  # its cache-cold compile, where it made one
    latency_failure: str | None = None
    phases_s: dict[str, float] = field(default_factory=dict)  # where its time went, by command

    def spend(self, phase: str, since: float) -> None:
        self.phases_s[phase] = round(self.phases_s.get(phase, 0.0) + time.monotonic() - since, 3)

    def process(self, condition: int = 0) -> TimingProcess:
        m = self.conditions[condition]
        device = None
        if m.device is not None:
            device = DeviceStep.model_validate(
                {k: v for k, v in m.device.items() if k in DeviceStep.model_fields}
            )
        return TimingProcess(
            step_ms=fast_mean(m.times_ms),
            median_step_ms=median(m.times_ms),
            steps=len(m.times_ms),
            host_ms=fast_mean(m.host_ms) if m.host_ms else None,
            device=device,
            peak_memory_mb=self.finish.get("peak_memory_mb"),
            first=self.first,
            ready_s=round(self.ready_s, 3),
            warmup_steps=self.warmup["warmup_steps"],
            warmup_converged=self.warmup["warmup_converged"],
            recompiles=self.finish.get("recompiles", 0),
            phases_s={
                "ready": round(self.ready_s, 3),
                **_numbers(self.setup.get("phases_s")),
                **self.phases_s,
            },
        )


def _numbers(value: Any) -> dict[str, float]:
    """A worker's own phase timings, as far as they are numbers (it runs PR code)."""
    if not isinstance(value, dict):
        return {}
    return {str(k)[:40]: round(float(v), 3) for k, v in list(value.items())[:8] if isinstance(v, int | float)}


@contextlib.contextmanager
def _blaming(side: str) -> Iterator[None]:
    """A worker failure inside says which side's worker it was."""
    try:
        yield
    except WorkerFailed as err:
        err.side = side
        raise


def _ask(
    workers: dict[str, TimingWorker], side: str, cmd: str, timeout: float, **args: Any
) -> dict[str, Any]:
    with _blaming(side):
        return workers[side].ask(cmd, timeout, **args)


def steps_per_round(round_ms: float, settled_ms: Sequence[float]) -> int:
    """As many steps as fill ``round_ms`` at the slower side's settled step time: the same count on
    both sides, so a round of each covers the same work."""
    slowest = max(max(settled_ms), 1e-6)
    return max(1, min(MAX_STEPS_PER_ROUND, round(round_ms / slowest)))
