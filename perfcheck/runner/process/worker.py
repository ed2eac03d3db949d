"""The process one probe runs in: ``python -m perfcheck.runner.process.worker SPEC.json RESULT.json``.

It imports the side's code, runs one probe and writes one ProbeResult. Anything the workload
or the probe raises becomes a ``crashed`` result with a readable message; a death by signal or
a hang is seen by the orchestrator, which owns the timeout.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from perfcheck import plugins
from perfcheck.runner.probes.base import Workload
from perfcheck.runner.probes.lookup import get_probe
from perfcheck.runner.process.channel import write_result
from perfcheck.runner.process.end import run_and_end
from perfcheck.runner.process.loader import WorkloadError, call_build, load_build
from perfcheck.runner.reuse.fingerprint import environment
from perfcheck.runner.reuse.reads import Reads
from perfcheck.runner.source.locate import exception_location, relative_path
from perfcheck.schema import ProbeResult, load_model
from perfcheck.spec import ProbeSpec


class _BuildError(Exception):
    """The workload's own code failed; wraps the cause so it is reported as the user's error."""


def _builder(spec: ProbeSpec) -> Workload:
    tree = Path(spec.tree)
    build = load_build(spec.workload.entry, tree)
    try:
        built = call_build(build, spec.device)
    except (Exception, SystemExit) as err:
        raise _BuildError(err) from err
    return Workload(spec.workload.name, built.model, built.inputs, built.second, built.second_given)


USER_FRAMES = 8  # the innermost frames of the user's own code a crash keeps


def user_frames(err: BaseException, tree: Path) -> list[str]:
    """The frames of ``err``'s traceback that lie in the side's tree, innermost last, one line each;
    a syntax error adds the line it could not parse (which no frame holds)."""
    frames = [
        (rel, f.lineno, f.name, (f.line or "").strip())
        for f in traceback.extract_tb(err.__traceback__)
        if (rel := relative_path(f.filename, tree)) is not None
    ]
    if isinstance(err, SyntaxError) and err.filename and (rel := relative_path(err.filename, tree)):
        frames.append((rel, err.lineno, "<module>", (err.text or "").strip()))
    return [f"  {rel}:{line} in {name}: {code}" for rel, line, name, code in frames[-USER_FRAMES:]]


def _describe(err: BaseException, tree: Path, workload: str) -> str:
    cause = err.__cause__ if isinstance(err, _BuildError) and err.__cause__ else err
    where = exception_location(cause, tree)
    if isinstance(cause, SyntaxError) and cause.filename and relative_path(cause.filename, tree):
        where_text = f"{relative_path(cause.filename, tree)}:{cause.lineno}"
    else:
        where_text = f"{where.path}:{where.line}" if where is not None else ""
    at = f" (at {where_text})" if where_text else ""
    text = str(cause).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(err, WorkloadError):
        return f"{first}{at}"
    if isinstance(err, _BuildError):
        head = f"workload {workload!r} raised {type(cause).__name__}: {first}{at}"
    elif isinstance(err, ImportError | SyntaxError):
        head = f"cannot import the workload: {type(cause).__name__}: {first}{at}"
    else:
        head = f"{type(cause).__name__}: {first}{at}"
    frames = user_frames(cause, tree)
    return "\n".join([head, "user code, innermost last:", *frames]) if frames else head


def run(spec: ProbeSpec) -> ProbeResult:
    start = time.perf_counter()
    tree = Path(spec.tree)
    building = False  # True while the workload's own import and build() run
    reads = Reads(tree) if spec.track_reads else None
    if reads is not None:  # before any of the tree is imported
        reads.start()

    def build() -> Workload:
        nonlocal building
        building = True
        built = _builder(spec)
        building = False
        return built

    try:
        plugins.load_all(spec.plugins)  # a plugin probe's descriptor says where its run function is
        output = get_probe(spec.probe).run(spec, build)
        status, message, metrics, details = (
            output.status,
            output.message,
            output.metrics_json(),
            output.details,
        )
    except (Exception, SystemExit) as err:  # the crash is the finding; the review goes on
        traceback.print_exception(err, file=sys.stderr)  # whole, into the probe's log
        status, message, metrics, details = "crashed", _describe(err, tree, spec.workload.name), {}, {}
    return ProbeResult(
        probe=spec.probe,
        workload=spec.workload.name,
        side=spec.side,
        status=status,  # type: ignore[arg-type]
        duration_s=round(time.perf_counter() - start, 3),
        message=message,
        workload_failed=status == "crashed" and building,
        environment=environment(spec.device),
        metrics=metrics,
        details=details,
        read_files=reads.files() if reads is not None else None,
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m perfcheck.runner.process.worker SPEC.json fd:N|RESULT.json", file=sys.stderr)
        return 2
    spec = load_model(ProbeSpec, Path(args[0]).read_bytes(), args[0])
    write_result(args[1], run(spec).model_dump_json(indent=1))
    return 0


if __name__ == "__main__":
    run_and_end(main)
