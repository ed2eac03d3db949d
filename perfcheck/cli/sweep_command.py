"""`perfcheck sweep WORKLOAD`: one workload across the compile settings of the config's `sweep:`.

Writes OUT/sweep.json, OUT/sweep.md (the table it prints, sorted by step time, the Pareto points
marked) and OUT/sweep.svg (step time against compile latency). Exit codes: 0 every point ran
(skipped points count as run: they were never meant to), 3 some point crashed or timed out,
2 bad input. The rendering is pure; only ``_cmd_sweep`` touches files.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfcheck.config import Config
from perfcheck.core.charts import svg_sweep
from perfcheck.core.markdown import cell, code
from perfcheck.runner.workloads import BUILTIN_WORKLOADS
from perfcheck.settings import WorkloadConfig
from perfcheck.sweep_schema import PointResult, SweepReport

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_SOME_FAILED = 3
PARETO_MARK = "★"
MESSAGE_CHARS = 300


class SweepUsageError(ValueError):
    """Input the sweep cannot run with; the message is meant for the user."""


def pick_workload(config: Config, name: str) -> WorkloadConfig:
    """The config's workload of that name, else a built-in one."""
    try:
        return config.workload(name)
    except KeyError:
        pass
    if name in BUILTIN_WORKLOADS:
        return WorkloadConfig(name=name, entry=name)
    known = sorted({w.name for w in config.workloads} | set(BUILTIN_WORKLOADS))
    raise SweepUsageError(
        f"unknown workload {name!r}; the config's and the built-in ones: {', '.join(known)}"
    )


def exit_code(report: SweepReport) -> int:
    return EXIT_SOME_FAILED if report.failed else EXIT_OK


def by_step_time(points: Sequence[PointResult]) -> list[PointResult]:
    """Measured points fastest first, then the others in plan order."""
    measured = sorted((p for p in points if p.measured), key=lambda p: p.step_ms or 0.0)
    return [*measured, *(p for p in points if not p.measured)]


def _num(value: float | None, unit: str, fmt: str) -> str:
    return "—" if value is None else f"{value:{fmt}} {unit}"


def _memory_heading(report: SweepReport) -> str:
    kinds = {p.memory_kind for p in report.points if p.memory_kind}
    if kinds == {"cuda_max_allocated"}:
        return "peak memory (CUDA)"
    return "peak RSS" if kinds == {"peak_rss"} else "peak memory"


def _first_line(message: str | None) -> str:
    line = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    return line[:MESSAGE_CHARS]


def render_table(report: SweepReport) -> str:
    """A Markdown table that also reads as plain text in a terminal."""
    head = (
        f"**perfcheck sweep** · {code(report.workload)} · backend {code(report.backend)} on "
        f"{report.device} · median of {report.steps} steps"
    )
    rows = [
        f"| {PARETO_MARK if p.pareto else ''} | {cell(p.point.label)} | {p.status} | "
        f"{_num(p.step_ms, 'ms', '.3f')} | {_num(p.peak_mb, 'MB', ',.0f')} | "
        f"{_num(p.compile_s, 's', '.2f')} |"
        for p in by_step_time(report.points)
    ]
    out = [
        head,
        "",
        f"| | point | status | step time | {_memory_heading(report)} | cold compile |",
        "|---|---|---|---:|---:|---:|",
        *rows,
        "",
        f"{PARETO_MARK} Pareto front: no other point is as good in step time, memory and compile latency "
        "and better in one.",
    ]
    notes = [p for p in report.points if not p.measured]
    if notes:
        out += ["", "Not measured:"]
        out += [f"- {cell(p.point.label)}: {p.status}, {cell(_first_line(p.message))}" for p in notes]
    return "\n".join(out) + "\n"


def _cmd_sweep(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, load_config
    from perfcheck.progress import Progress
    from perfcheck.runner.sweep import SweepJob, plan_points, run_sweep

    try:
        if not args.tree.is_dir():
            raise SweepUsageError(f"--tree {args.tree}: not a folder")
        config = load_config(args.config, args.tree)
        workload = pick_workload(config, args.workload)
        if not plan_points(config.sweep):
            raise SweepUsageError(f"{config.source}: sweep: no points (empty modes or dynamic)")
    except (ConfigError, SweepUsageError) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    job = SweepJob(
        tree=args.tree,
        workload=workload,
        backend=config.compile.backend,
        sweep=config.sweep,
        device=args.device,
        out_dir=args.out,
    )
    report = run_sweep(job, Progress(len(plan_points(config.sweep))))
    table = render_table(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(report.model_dump_json(indent=1))
    (args.out / "sweep.md").write_text(table, encoding="utf-8")
    (args.out / "sweep.svg").write_text(svg_sweep(report), encoding="utf-8")
    print(table)
    counts = {s: sum(p.status == s for p in report.points) for s in ("ok", "crashed", "timeout", "skipped")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(
        f"perfcheck sweep: {summary} — wrote {args.out / 'sweep.json'}, sweep.md, sweep.svg", file=sys.stderr
    )
    return exit_code(report)


def add_sweep_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `sweep` on the `perfcheck` command's subparsers."""
    sweep = subparsers.add_parser(
        "sweep",
        help="time one workload across compile settings and show the Pareto front",
        description="Run WORKLOAD once per combination of the config's sweep.modes, sweep.dynamic and "
        "sweep.options, each in a fresh process with empty compiler caches, and measure the step time "
        "(median of sweep.steps steps after warm-up), peak memory and cold compile latency. Modes other "
        "than default apply to inductor only; with another backend those points are skipped. Writes "
        "OUT/sweep.json, OUT/sweep.md and OUT/sweep.svg.",
        epilog="Exit codes: 0 every point ran, 2 bad input, 3 some point crashed or timed out.",
    )
    sweep.add_argument("workload", help="a workload name from the config, or a built-in one (e.g. mlp-tiny)")
    sweep.add_argument("--tree", type=Path, default=Path("."), help="the code to run (default: here)")
    sweep.add_argument("--config", type=Path, help="settings file (default: perfcheck.yml in --tree)")
    sweep.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default %(default)s)"
    )
    sweep.add_argument(
        "--out", type=Path, default=Path("perfcheck-sweep"), help="output folder (default %(default)s)"
    )
    sweep.set_defaults(func=_cmd_sweep)
