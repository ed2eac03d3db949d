"""Run one workload across a matrix of compile settings, each point in a fresh process.

Imports no torch. Points run one after another (they are timed, so they must not share the
machine), each with its own empty compiler caches, so no point's compile helps the next. A
point whose process raises, dies or hangs is reported as such and the sweep goes on.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from perfcheck.core.pareto import pareto_front
from perfcheck.measures import Environment
from perfcheck.progress import Progress
from perfcheck.runner.process import reaper
from perfcheck.runner.process.probe_process import log_tail, run_module, signal_name
from perfcheck.runner.process.sides import probe_env
from perfcheck.schema import ContractError, load_model
from perfcheck.settings import SweepConfig, WorkloadConfig
from perfcheck.sweep_schema import (
    DEFAULT_MODE,
    PointMeasurement,
    PointResult,
    PointSpec,
    PointStatus,
    SweepPoint,
    SweepReport,
)

WARMUP_STEPS = 5


@dataclass(frozen=True)
class SweepJob:
    tree: Path
    workload: WorkloadConfig
    backend: str
    sweep: SweepConfig
    device: str = "cpu"
    out_dir: Path = Path("perfcheck-sweep")
    python: str = sys.executable


def plan_points(sweep: SweepConfig) -> list[SweepPoint]:
    """Every combination of mode, dynamic and options (none, then each dict), in config order."""
    modes = [None if m in (None, DEFAULT_MODE) else m for m in sweep.modes]
    options: list[dict[str, object] | None] = [None, *sweep.options]
    return [
        SweepPoint(mode=m, dynamic=d, options=o)
        for m, d, o in itertools.product(modes, sweep.dynamic, options)
    ]


def skip_reason(point: SweepPoint, backend: str) -> str | None:
    if point.mode is not None and backend != "inductor":
        return (
            f"mode {point.mode!r} applies to the inductor backend only; this sweep compiles with {backend!r}"
        )
    return None


def _result(point: SweepPoint, status: PointStatus, message: str, duration: float) -> PointResult:
    return PointResult(point=point, status=status, message=message, duration_s=round(duration, 3))


def run_point(
    spec: PointSpec, python: str, timeout_s: float, workdir: Path, stem: str
) -> tuple[PointResult, Environment | None]:
    """Run one point in a fresh process, with the environment it ran in when it got that far.

    Never raises for anything the point's process does."""
    spec_path, log_path = workdir / f"{stem}.spec.json", workdir / f"{stem}.log"
    spec_path.write_text(spec.model_dump_json())
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"perfcheck-sweep-{stem}-") as cache:
        env = probe_env(Path(cache))
        ended = run_module(
            python, "perfcheck.runner.sweep_worker", spec_path, spec.tree, env, timeout_s, log_path
        )
    code = ended.code
    if code is None:
        message = f"no result after {timeout_s:g} s; the process was killed"
        return _result(spec.point, "timeout", message, time.monotonic() - start), None
    duration = time.monotonic() - start
    tail = log_tail(log_path)
    if code < 0:
        message = f"the process died of {signal_name(code)}\n{tail}".strip()
        return _result(spec.point, "crashed", message, duration), None
    if code != 0 or not ended.result:
        how = f"exited with code {code}" if code != 0 else "ended without a result"
        message = f"the process {how}\n{tail}".strip()
        return _result(spec.point, "crashed", message, duration), None
    try:
        got = load_model(PointMeasurement, ended.result, stem)
    except ContractError as err:
        return _result(spec.point, "crashed", f"the point wrote an invalid result: {err}", duration), None
    result = PointResult(
        point=spec.point,
        status=got.status,
        message=got.message,
        step_ms=got.step_ms,
        peak_mb=got.peak_mb,
        memory_kind=got.memory_kind,
        compile_s=got.compile_s,
        duration_s=round(duration, 3),
    )
    return result, got.environment


def mark_pareto(results: list[PointResult]) -> list[PointResult]:
    measured = [i for i, r in enumerate(results) if r.measured]
    # ``measured`` guarantees all three are set; the ``or`` only tells the type checker so.
    objectives = [
        (results[i].step_ms or 0.0, results[i].peak_mb or 0.0, results[i].compile_s or 0.0) for i in measured
    ]
    front = {measured[k] for k in pareto_front(objectives)}
    return [r.model_copy(update={"pareto": i in front}) for i, r in enumerate(results)]


def _outcome(r: PointResult) -> str:
    if r.status == "ok":
        return f"ok, {r.step_ms:.3f} ms/step, {r.peak_mb:.0f} MB, compile {r.compile_s:.2f} s"
    return f"{r.status}: {(r.message or '').splitlines()[0] if r.message else ''}"


def run_sweep(job: SweepJob, progress: Progress | None = None) -> SweepReport:
    reaper.become_subreaper()  # no process a point starts outlives it
    points = plan_points(job.sweep)
    progress = progress or Progress(len(points))
    # Absolute: every worker runs with the tree as its working directory.
    workdir = job.out_dir.resolve() / "points"
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[PointResult] = []
    environment: Environment | None = None
    for n, point in enumerate(points, 1):
        task = progress.begin(point.label)
        reason = skip_reason(point, job.backend)
        if reason is not None:
            result = PointResult(point=point, status="skipped", message=reason)
        else:
            spec = PointSpec(
                tree=str(job.tree.resolve()),
                device=job.device,  # type: ignore[arg-type]
                workload=job.workload,
                backend=job.backend,
                point=point,
                steps=job.sweep.steps,
                warmup_steps=WARMUP_STEPS,
            )
            result, seen = run_point(spec, job.python, job.sweep.timeout_s, workdir, f"point-{n:03d}")
            environment = environment or seen
        task.finish(_outcome(result))
        results.append(result)
    return SweepReport(
        workload=job.workload.name,
        backend=job.backend,
        device=job.device,  # type: ignore[arg-type]
        steps=job.sweep.steps,
        points=mark_pareto(results),
        environment=environment,
    )
