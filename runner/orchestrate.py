"""Run every probe of a review, base and head side by side, each in its own process.

This module imports no torch itself: it only launches workers and reads their results as
untrusted JSON. A worker that dies, hangs or writes nonsense becomes a crashed or timed-out
result for that one probe, and the review goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from perfcheck.config import Config, WorkloadConfig, follow_up_probes, planned_probes
from perfcheck.core import probes
from perfcheck.core.timing_gate import METRIC_LABELS, throughput_figures
from perfcheck.progress import Progress, Task
from perfcheck.runner import channel, forkserver, reaper
from perfcheck.runner.forkserver import ForkServers
from perfcheck.schema import (
    CompileLatency,
    ContractError,
    ProbeResult,
    ProbeStatus,
    Side,
    WorkloadReview,
    load_model,
)
from perfcheck.spec import ProbeSpec

LOG_TAIL_LINES = 12
REAP_WAIT_S = 30.0  # for a killed child's server to report it reaped


@dataclass(frozen=True)
class SideSetup:
    side: Side
    tree: Path
    python: str = sys.executable


@dataclass(frozen=True)
class ReviewRun:
    base: SideSetup
    head: SideSetup
    config: Config
    device: str = "cpu"
    workloads: list[WorkloadConfig] = field(default_factory=list)
    probes: tuple[str, ...] = ()  # empty: each workload's `probes`, else the default ones
    out_dir: Path = Path("perfcheck-out")
    jobs: int = 1


def log_tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    # Drop torch's import-time noise so the tail shows the failure itself.
    lines = [ln for ln in lines if ln.strip() and "Failed to initialize NumPy" not in ln]
    return "\n".join(lines[-LOG_TAIL_LINES:])


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


def side_caches(workdir: Path, workload: str) -> dict[str, Path]:
    """One compile cache per side and workload: the compile probe fills it with its cold compile,
    and the timing probe's processes start warm from it; a side never sees the other's."""
    return {side: workdir / "cache" / f"{side}-{workload}" for side in ("base", "head")}


def timing_cache(workdir: Path, workload: str) -> Path:
    """The one compile cache both sides' timing processes share once the sides' own caches are
    filled (see ``merge_caches``)."""
    return workdir / "cache" / f"timing-{workload}"


def merge_caches(into: Path, sources: Sequence[Path]) -> None:
    """Every file of each source into ``into``; a later source's file replaces an earlier's.

    Why the timing processes share one cache: Inductor autotunes some kernels on their first run
    and keeps the chosen config in the cache beside the kernel. Two cold compiles of identical
    code, made at the same time on one GPU, can choose differently, and every later process of
    that side inherits the choice: measured on the H200, an A/A Llama read -0.73 % device time
    (-0.78 ... -0.67) over 25 process pairs, from the first pair on. Entries are keyed by content,
    so in a merged cache identical kernels share one choice (base's) and code only head has keeps
    head's own. Files are hard-linked where the file system allows: Inductor and Triton replace
    cache files by rename, never in place, so the sources stay as they were.
    """
    for source in sources:
        if not source.is_dir():
            continue
        for path in source.rglob("*"):
            if path.is_dir() or path.is_symlink():
                continue
            dest = into / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.unlink(missing_ok=True)
            try:
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)


# Set to a folder, every probe process of every review compiles into that one cache, warm after
# the first: for test suites and repeated local runs, where the cache is not what is measured.
# Cold-compile figures are then not cold, the sides share what they compiled, and compile latency
# is not measured (runner/latency_runs.py).
SHARED_CACHE_ENV = "PERFCHECK_COMPILE_CACHE"


def probe_env(cache: Path) -> dict[str, str]:
    """The environment of a probe process whose compile cache is ``cache`` (the shared one instead,
    where SHARED_CACHE_ENV names one)."""
    override = os.environ.get(SHARED_CACHE_ENV)
    if override:
        cache = Path(override)
    return {
        # In a shared cache Dynamo would record the shapes it saw and compile the next process
        # dynamic from the start; each process must compile as a fresh run of the code would. A
        # cache of the process's own has no record to read: set there too, so that every probe
        # process of an interpreter has one environment and one fork server (runner/forkserver.py).
        "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "0",
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        # The tree is the PR's: it must not shadow perfcheck itself by sitting first on sys.path.
        "PYTHONSAFEPATH": "1",
        # Both sides hash alike: dict layout is one of the ways two runs of identical code differ.
        "PYTHONHASHSEED": "0",
        # A compiler cache of the probe's own keeps "cold compile" cold and the sides independent.
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
    }


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
) -> Ended:
    """``python -m module SPEC fd:N`` in a session of its own, output to ``log_path``; forked from a
    fork server of ``forks`` where one serves (runner/forkserver.py), else a fresh process. When it
    ends, at its time limit or by itself, its process group is killed and every orphan it left is
    reaped (runner/reaper.py); only then is its result channel read."""
    with log_path.open("wb") as log, channel.open_channel() as result:
        child = None
        if forks is not None and not prefix:
            args = [str(spec_path), f"{channel.PREFIX}{forkserver.RESULT_FD}"]
            child = forks.fork(python, module, args, cwd, env, log.fileno(), result.fileno())
        if child is not None:
            return _ended_child(child, timeout_s, result)
        with reaper.spawning() as ours:
            proc = subprocess.Popen(
                [*prefix, python, "-m", module, str(spec_path), channel.argument(result)],
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
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group, at any ending
        proc.wait()
        reaper.finished(proc.pid)
        reaper.reap_orphans()
        return Ended(code, channel.read_back(result))


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
) -> ProbeResult:
    """Run one probe in a process of its own (forked from one of ``forks``' servers where one
    serves); never raises for anything the probe does. ``tag`` tells apart the logs of several
    processes of one probe; ``prefix`` runs it under another program (valgrind); without ``cache``
    the process compiles into a fresh cache of its own."""
    stem = f"{spec.side}-{spec.workload.name}-{spec.probe}{tag}"
    spec_path, log_path = workdir / f"{stem}.spec.json", workdir / f"{stem}.log"
    spec_path.write_text(spec.model_dump_json())
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"perfcheck-{stem}-") as own:
        env = probe_env(cache if cache is not None else Path(own))
        env.update(extra_env or {})
        if not forkserver.serves(spec.device):
            forks = None
        ended = run_module(
            python, "perfcheck.runner.worker", spec_path, spec.tree, env, timeout_s, log_path, prefix, forks
        )
    code = ended.code
    if ended.lost is not None:
        tail = log_tail(log_path)
        return _failed(spec, "crashed", f"{ended.lost}\n{tail}".strip(), time.monotonic() - start)
    if code is None:
        message = f"no result after {timeout_s:g} s; the process was killed"
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
    kind = probes.get(spec.probe)
    try:
        if kind is not None:
            kind.metrics_of(result)
    except ValueError as err:
        return _failed(spec, "crashed", f"the probe wrote invalid metrics: {err}", duration)
    return result


def _outcome(result: ProbeResult) -> str:
    return (
        result.status
        if result.status == "ok"
        else f"{result.status}: {(result.message or '').splitlines()[0]}"
    )


def probe_spec(run: ReviewRun, wl: WorkloadConfig, probe: str, side: SideSetup) -> ProbeSpec:
    kind = probes.get(probe)
    settings = kind.settings_of(run.config) if kind is not None else None
    return ProbeSpec(
        probe=probe,
        side=side.side,
        tree=str(side.tree.resolve()),
        device=run.device,  # type: ignore[arg-type]
        workload=wl,
        compile=run.config.compile,
        export=run.config.export,
        timing=run.config.timing,
        ddp=run.config.ddp,
        custom_ops=run.config.custom_ops,
        profile=run.config.profile,
        plugins=tuple(run.config.plugins),
        settings=settings.model_dump(mode="json") if settings is not None else {},
    )


def run_review(
    run: ReviewRun,
    progress_factory: Callable[[int], Progress] = Progress,
    forks: ForkServers | None = None,
) -> list[WorkloadReview]:
    """Every probe of ``run``. ``forks``: fork servers a caller running several reviews keeps
    across them (else the review starts its own and ends them with it)."""
    with contextlib.ExitStack() as stack:
        if forks is None:
            forks = stack.enter_context(ForkServers(run.out_dir.resolve() / "probes"))
        return _run_review(run, progress_factory, forks)


def _run_review(
    run: ReviewRun, progress_factory: Callable[[int], Progress], forks: ForkServers
) -> list[WorkloadReview]:
    from perfcheck.runner.timing import run_paired

    reaper.become_subreaper()  # so that no process a probe starts outlives it
    # Absolute: every worker runs with its side's tree as working directory.
    workdir = run.out_dir.resolve() / "probes"
    workdir.mkdir(parents=True, exist_ok=True)
    wanted = planned_probes(run.workloads, run.probes)
    # Per-side probes go base then head, interleaved, so drift over the run hits both sides; with
    # jobs > 1 they overlap (structure does not depend on timing). Timing runs alone, both sides
    # at once in alternating rounds, after everything else has finished.
    paired_names = {k.name for k in probes.kinds() if k.paired}
    single = [(wl, p, side) for wl, p in wanted if p not in paired_names for side in (run.base, run.head)]
    paired = [(wl, p) for wl, p in wanted if p in paired_names]
    progress = progress_factory(len(single) + len(paired))

    def one(item: tuple[WorkloadConfig, str, SideSetup]) -> ProbeResult:
        wl, probe, side = item
        task = progress.begin(f"{side.side} · {wl.name} · {probe}")
        cache = None
        if probe == "compile":
            # Its cold compile fills the cache the timing probe's processes of this side start from.
            cache = side_caches(workdir, wl.name)[side.side]
            shutil.rmtree(cache, ignore_errors=True)
        spec = probe_spec(run, wl, probe, side)
        result = run_probe(spec, side.python, wl.timeout_s, workdir, cache, forks=forks)
        task.finish(_outcome(result))
        return result

    # Per-side probes fork from a pre-imported server; timing and compile latency, which measure
    # what a process costs, start fresh processes (runner/forkserver.py says why).
    with ThreadPoolExecutor(max_workers=max(1, run.jobs)) as pool:
        collected = list(pool.map(one, single))  # map keeps plan order, whatever finishes first
        more = [
            (wl, p, side) for wl, p in _follow_ups(run, wanted, collected) for side in (run.base, run.head)
        ]
        if more:
            progress.total += len(more)
            collected += list(pool.map(one, more))
    collected = _with_compile_latency(run, wanted, collected, workdir, progress)
    for wl, probe in paired:
        task = progress.begin(f"base ⇄ head · {wl.name} · {probe}")

        def on_pair(n: int, state: str, t: Task = task) -> None:
            t.note(f"pair {n} of {run.config.timing.processes}–{run.config.timing.max_processes}: {state}")

        pair = run_paired(
            probe_spec(run, wl, probe, run.base),
            probe_spec(run, wl, probe, run.head),
            run.base,
            run.head,
            workdir,
            run.config.budgets,
            on_pair=on_pair,
        )
        task.finish(_paired_outcome(pair.base, pair.head))
        collected += [pair.base, pair.head]
    # The compile caches served their purpose; they can hold gigabytes, and the review keeps none.
    shutil.rmtree(workdir / "cache", ignore_errors=True)
    reaper.reap_orphans()
    results = {wl.name: WorkloadReview(name=wl.name) for wl in run.workloads}
    for r in collected:
        review = results[r.workload]
        results[r.workload] = review.model_copy(update={r.side: [*getattr(review, r.side), r]})
    return list(results.values())


def _with_compile_latency(
    run: ReviewRun,
    wanted: list[tuple[WorkloadConfig, str]],
    done: list[ProbeResult],
    workdir: Path,
    progress: Progress,
) -> list[ProbeResult]:
    """Each compile result that both sides finished, with its side's cache-cold compile samples."""
    out = list(done)
    if os.environ.get(SHARED_CACHE_ENV) or run.config.compile.measure == "off":
        # One cache for every process, asked for: no compile is cold, so none is measured as one.
        # Or not asked for: its cache-cold compiles cost 2 * compile.runs fresh processes.
        return out
    # Keyed by name: a workload's settings are not hashable (its `probes` is a list).
    for wl in {w.name: w for w, p in wanted if p == "compile"}.values():
        at = {r.side: i for i, r in enumerate(out) if r.workload == wl.name and r.probe == "compile"}
        if set(at) != {"base", "head"} or any(out[i].status != "ok" for i in at.values()):
            continue  # a side that could not compile has no latency to compare
        metrics = {side: out[i].compile for side, i in at.items()}
        if any(m is None for m in metrics.values()):
            continue
        first_s = max(m.cold_compile_s for m in metrics.values() if m is not None)
        measured = _compile_latency(run, wl, first_s, workdir, progress)
        for side, i in at.items():
            m = metrics[side]
            assert m is not None
            out[i] = out[i].model_copy(update={"compile": m.model_copy(update={"latency": measured[side]})})
    return out


def _compile_latency(
    run: ReviewRun, wl: WorkloadConfig, first_s: float, workdir: Path, progress: Progress
) -> dict[Side, CompileLatency]:
    from perfcheck.runner import callgrind, latency_runs

    have_valgrind = callgrind.valgrind() is not None
    choice = latency_runs.choose(run.config.compile, run.device, have_valgrind, first_s)
    progress.total += 1
    task = progress.begin(f"base ⇄ head · {wl.name} · compile latency ({choice.measure})")
    sides = {"base": run.base, "head": run.head}

    def launch(spec: ProbeSpec, side: Side, tag: str, prefix: list[str], env: dict[str, str]) -> ProbeResult:
        task.note(f"{side}{tag}")
        python = sides[side].python
        return run_probe(spec, python, wl.timeout_s, workdir, tag=tag, prefix=prefix, extra_env=env)

    specs: dict[Side, ProbeSpec] = {s: probe_spec(run, wl, "compile", sides[s]) for s in ("base", "head")}
    measured = latency_runs.measure(specs, choice, run.config.compile.runs, launch)
    n = min(len(m.samples) for m in measured.values())
    failed = [f for m in measured.values() for f in m.failures]
    task.finish(f"{choice.measure}, {n} per side" if n else f"not measured: {failed[0] if failed else ''}")
    return measured


def _follow_ups(
    run: ReviewRun, wanted: list[tuple[WorkloadConfig, str]], done: list[ProbeResult]
) -> list[tuple[WorkloadConfig, str]]:
    """Probes the first results call for: custom_ops on a workload whose exported graph (on either
    side) calls a custom op, where its probes were left to the defaults."""
    from perfcheck.core.probes.custom_ops import custom_ops_in_export

    out = []
    for wl in run.workloads:
        planned = {p for w, p in wanted if w.name == wl.name}
        if "custom_ops" not in follow_up_probes(run.config, wl, planned, run.probes):
            continue
        exports = [r for r in done if r.workload == wl.name and r.probe == "export"]
        if any(custom_ops_in_export(r, run.config.custom_ops.namespaces) for r in exports):
            out.append((wl, "custom_ops"))
    return out


def _paired_outcome(base: ProbeResult, head: ProbeResult) -> str:
    figures = throughput_figures(base.timing, head.timing)
    if head.timing and figures:
        name, b, h = figures
        what = METRIC_LABELS[name].replace(" / step", "")
        return f"ok, {len(head.timing.processes)} process pairs, {what} {b:.3f} → {h:.3f} ms"
    return "; ".join(f"{r.side} {_outcome(r)}" for r in (base, head))
