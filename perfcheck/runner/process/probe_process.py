"""Starting and ending one probe process: forked from its side's fork server or started fresh,
behind its side's walls, timed out and killed whole, its result read as untrusted JSON and its
log's tail kept. A worker that dies, hangs or writes nonsense becomes a crashed or timed-out
result for that one probe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from perfcheck.core import probes
from perfcheck.measures import ProbeStatus
from perfcheck.runner.process import channel, forkserver, reaper, sandbox
from perfcheck.runner.process.forkserver import ForkServers
from perfcheck.runner.process.sides import TRACE_ENV, probe_env, sandboxed_walls, side_walls
from perfcheck.runner.review_run import ReviewRun, SideSetup
from perfcheck.schema import ContractError, ProbeResult, load_model
from perfcheck.settings import WorkloadConfig
from perfcheck.spec import ProbeSpec, Walls, side_files

if TYPE_CHECKING:
    pass


LOG_TAIL_LINES = 12


REAP_WAIT_S = 30.0  # for a killed child's server to report it reaped


# What of a probe's log is read for its tail: its end, never the whole of it (a probe may write
# hundreds of megabytes; read whole, a 400 MB log took the orchestrator to 1.09 GB).
LOG_TAIL_BYTES = 256 * 1024


def log_tail(log: Path, lines_wanted: int = LOG_TAIL_LINES) -> str:
    """The last lines of a probe's log, read from at most its last ``LOG_TAIL_BYTES``."""
    try:
        with log.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - LOG_TAIL_BYTES))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    if size > LOG_TAIL_BYTES:
        lines = lines[1:]  # the first line read may start mid-line
    # Drop torch's import-time noise so the tail shows the failure itself.
    lines = [ln for ln in lines if ln.strip() and "Failed to initialize NumPy" not in ln]
    return "\n".join(lines[-lines_wanted:])


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _failed(spec: ProbeSpec, status: ProbeStatus, message: str, duration: float) -> ProbeResult:
    return ProbeResult(
        probe=spec.probe,
        workload=spec.workload.name,
        side=spec.side,
        status=status,
        duration_s=round(duration, 3),
        message=message,
    )


@dataclass(frozen=True)
class Ended:
    """How a probe process ended: its exit code (None: killed at its time limit) and what it handed
    back through its result channel (None: more than the channel carries); ``lost``: why its exit
    code is unknown, when it is."""

    code: int | None
    result: bytes | None
    lost: str | None = None


def run_module(
    python: str,
    module: str,
    spec_path: Path,
    cwd: str,
    env: dict[str, str],
    timeout_s: float,
    log_path: Path,
    prefix: Sequence[str] = (),
    forks: ForkServers | None = None,
    walls: Walls | None = None,
    deadline: float | None = None,
    inductor: bool = True,
) -> Ended:
    """``python -m module SPEC fd:N`` in a session of its own, output to ``log_path``; forked from a
    fork server of ``forks`` where one serves (perfcheck/runner/process/forkserver.py), else a fresh process.
    When it ends, at its time limit or by itself, its process group is killed and every orphan it left is
    reaped (perfcheck/runner/process/reaper.py); only then is its result channel read. With ``walls``, it runs
    in that sandbox (perfcheck/runner/process/sandbox.py), forked or fresh. ``deadline`` (monotonic): its time
    limit ends there at the latest, however long a fork server took to start before it.
    ``inductor``: it may compile with Inductor (a server for it warms Inductor up)."""
    with log_path.open("wb") as log, channel.open_channel() as result:
        child = None
        if forks is not None and not prefix:
            args = [str(spec_path), f"{channel.PREFIX}{forkserver.RESULT_FD}"]
            child = forks.fork(python, module, args, cwd, env, log.fileno(), result.fileno(), walls, inductor)
        if child is not None:
            return _ended_child(child, _until(timeout_s, deadline), result)
        argv = [*prefix, python, "-m", module, str(spec_path), channel.argument(result)]
        with reaper.spawning() as ours:
            proc = subprocess.Popen(
                behind_walls(argv, walls),
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(result.fileno(),),
            )
            ours(proc.pid)
        try:
            code: int | None = proc.wait(timeout=_until(timeout_s, deadline))
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group, at any ending
        proc.wait()
        reaper.finished(proc.pid)
        reaper.reap_orphans()
        return Ended(code, channel.read_back(result))


def _until(timeout_s: float, deadline: float | None) -> float:
    # At least a moment: a socket given no time at all would not wait (EAGAIN), it would fail.
    return timeout_s if deadline is None else max(0.01, min(timeout_s, deadline - time.monotonic()))


def behind_walls(argv: list[str], walls: Walls | None) -> list[str]:
    """``argv``, behind ``walls`` where there are any."""
    return argv if walls is None else sandbox.command(walls.model_dump_json(), argv)


def _ended_child(child: forkserver.Child, timeout_s: float, result: IO[bytes]) -> Ended:
    """``run_module``'s ending for a forked child: its server waits for it, this process kills."""
    code, lost = None, None
    try:
        try:
            code = child.wait(timeout_s)
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)  # what is left of its group, at any ending
        if code is None:  # killed at its time limit: its server reaps it, then nothing of it runs
            with contextlib.suppress(forkserver.ServerLost):
                child.wait(REAP_WAIT_S)
    except forkserver.ServerLost as err:
        lost = str(err)
    finally:
        child.close()
    reaper.reap_orphans()  # the child itself too, if its server died: it was re-parented here
    return Ended(code, channel.read_back(result), lost)


def run_probe(
    spec: ProbeSpec,
    python: str,
    timeout_s: float,
    workdir: Path,
    cache: Path | None = None,
    *,
    tag: str = "",
    prefix: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    forks: ForkServers | None = None,
    writable: Sequence[Path] = (),
    deadline: float | None = None,
) -> ProbeResult:
    """Run one probe in a process of its own (forked from one of ``forks``' servers where one
    serves); never raises for anything the probe does. ``tag`` tells apart the logs of several
    processes of one probe; ``prefix`` runs it under another program (valgrind); without ``cache``
    the process compiles into a fresh cache of its own. In a sandbox (``spec.walls``) it may write
    that cache and ``writable``, nothing else of the machine's but its side's scratch folder."""
    stem = f"{spec.side}-{spec.workload.name}-{spec.probe}{tag}"
    spec_path, log_path = workdir / f"{stem}.spec.json", workdir / f"{stem}.log"
    spec_path.write_text(spec.model_dump_json())
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"perfcheck-{stem}-") as own:
        folder = cache if cache is not None else Path(own)
        env = probe_env(folder, side_files(workdir, spec.side) / "torch_trace")
        env.update(extra_env or {})
        if not forkserver.serves(spec.device) or TRACE_ENV in env:
            # A server that imported torch with TORCH_TRACE set opened its trace file there (its
            # warm-up compile), and a forked child shares, then closes, that descriptor.
            forks = None
        walls = sandboxed_walls(spec, workdir, folder, *writable)
        ended = run_module(
            python,
            "perfcheck.runner.process.worker",
            spec_path,
            spec.tree,
            env,
            timeout_s,
            log_path,
            prefix,
            forks,
            walls,
            deadline,
            inductor=spec.compile.backend == "inductor",
        )
    code = ended.code
    if ended.lost is not None:
        tail = log_tail(log_path)
        return _failed(spec, "crashed", f"{ended.lost}\n{tail}".strip(), time.monotonic() - start)
    if code is None:
        message = f"no result after {timeout_s:g} s; the process was killed"
        if deadline is not None and time.monotonic() >= deadline:
            message = (
                f"no result by its deadline, after {time.monotonic() - start:.0f} s; the process was killed"
            )
        return _failed(spec, "timeout", message, time.monotonic() - start)
    duration = time.monotonic() - start
    tail = log_tail(log_path)
    if code < 0:
        return _failed(
            spec, "crashed", f"the probe process died of {signal_name(code)}\n{tail}".strip(), duration
        )
    if code != 0 or not ended.result:
        how = f"exited with code {code}"
        if code == 0:
            how = "handed back a result over 64 MB" if ended.result is None else "ended without a result"
        return _failed(spec, "crashed", f"the probe process {how}\n{tail}".strip(), duration)
    try:
        result = load_model(ProbeResult, ended.result, stem)
    except ContractError as err:
        return _failed(spec, "crashed", f"the probe wrote an invalid result: {err}", duration)
    if (result.side, result.workload, result.probe) != (spec.side, spec.workload.name, spec.probe):
        return _failed(spec, "crashed", "the probe wrote a result for another probe", duration)
    return result  # its metrics were checked against its probe's model as it was read


def _outcome(result: ProbeResult) -> str:
    return (
        result.status
        if result.status == "ok"
        else f"{result.status}: {(result.message or '').splitlines()[0]}"
    )


def probe_spec(run: ReviewRun, wl: WorkloadConfig, probe: str, side: SideSetup) -> ProbeSpec:
    return ProbeSpec(
        probe=probe,
        side=side.side,
        tree=str(side.tree.resolve()),
        device=run.device,  # type: ignore[arg-type]
        workload=wl,
        compile=run.config.compile,
        timing=run.config.timing,
        plugins=tuple(run.config.plugins),
        settings={
            k.name: section.model_dump(mode="json")
            for k in probes.kinds()
            if (section := k.settings_of(run.config)) is not None
        },
        walls=side_walls(run, side),
    )
