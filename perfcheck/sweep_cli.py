"""`perfcheck sweep WORKLOAD`: one workload across the compile settings of the config's `sweep:`.

Writes OUT/sweep.json, OUT/sweep.md (the table it prints, sorted by step time, the Pareto points
marked) and OUT/sweep.svg (step time against compile latency). Exit codes: 0 every point ran
(skipped points count as run: they were never meant to), 3 some point crashed or timed out,
2 bad input. The rendering is pure; only ``_cmd_sweep`` touches files.
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from perfcheck.config import Config, WorkloadConfig
from perfcheck.core.markdown import cell, code
from perfcheck.runner.workloads import BUILTIN_WORKLOADS
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


# The SVG's geometry, in pixels.
WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 80, 40, 50, 70
R_MIN, R_MAX = 4.0, 14.0
TICKS = 5


def _span(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or max(abs(hi) * 0.1, 1e-3)
    return max(lo - pad, 0.0), hi + pad


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> tuple[float, float]:
    """Slope and offset of the linear map [lo, hi] -> [out_lo, out_hi]."""
    slope = (out_hi - out_lo) / (hi - lo)
    return slope, out_lo - lo * slope


def _radius(mb: float, lo: float, hi: float) -> float:
    # Area, not radius, grows with memory, so a point twice the memory does not look four times it.
    share = (mb - lo) / (hi - lo) if hi > lo else 0.5
    return R_MIN + (R_MAX - R_MIN) * math.sqrt(share)


def _text(x: float, y: float, body: str, **attrs: str) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{html.escape(body, quote=True)}</text>'


def render_svg(report: SweepReport) -> str:
    """Step time against cold compile latency; marker area is memory; the Pareto front connected."""
    title = f"perfcheck sweep · {report.workload} · {report.backend} on {report.device}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f"<title>{html.escape(title, quote=True)}</title>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        _text(WIDTH / 2, 24, title, text_anchor="middle", font_size="14"),
    ]
    plotted = [p for p in report.points if p.measured]
    left, right, top, bottom = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
    if plotted:
        xs = [p.compile_s or 0.0 for p in plotted]
        ys = [p.step_ms or 0.0 for p in plotted]
        mbs = [p.peak_mb or 0.0 for p in plotted]
        (x_lo, x_hi), (y_lo, y_hi) = _span(xs), _span(ys)
        xa, xb = _scale(x_lo, x_hi, left, right)
        ya, yb = _scale(y_lo, y_hi, bottom, top)
        parts.append(
            f'<path d="M{left},{top} V{bottom} H{right}" fill="none" stroke="#444" stroke-width="1"/>'
        )
        for i in range(TICKS + 1):
            xv, yv = x_lo + (x_hi - x_lo) * i / TICKS, y_lo + (y_hi - y_lo) * i / TICKS
            px, py = xa * xv + xb, ya * yv + yb
            parts.append(f'<path d="M{px:.1f},{bottom} v5 M{left},{py:.1f} h-5" stroke="#444"/>')
            parts.append(_text(px, bottom + 18, f"{xv:.3g}", text_anchor="middle"))
            parts.append(_text(left - 8, py + 4, f"{yv:.3g}", text_anchor="end"))
        parts.append(_text((left + right) / 2, HEIGHT - 28, "cold compile latency (s)", text_anchor="middle"))
        mid = (top + bottom) / 2
        parts.append(
            _text(18, mid, "step time (ms)", text_anchor="middle", transform=f"rotate(-90 18 {mid:.1f})")
        )
        front = sorted((p for p in plotted if p.pareto), key=lambda p: (p.compile_s, p.step_ms))
        if len(front) > 1:
            path = " ".join(
                f"{xa * (p.compile_s or 0) + xb:.1f},{ya * (p.step_ms or 0) + yb:.1f}" for p in front
            )
            parts.append(f'<polyline points="{path}" fill="none" stroke="#d9480f" stroke-width="1.5"/>')
        for p, x, y, mb in zip(plotted, xs, ys, mbs, strict=True):
            px, py, r = xa * x + xb, ya * y + yb, _radius(mb, min(mbs), max(mbs))
            fill = "#d9480f" if p.pareto else "#868e96"
            label = f"{p.point.label} · {mb:,.0f} MB"
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{r:.1f}" fill="{fill}" fill-opacity="0.75">'
                f"<title>{html.escape(label, quote=True)}</title></circle>"
            )
            # Labels point inwards, so that those near the right edge stay inside the picture.
            if px > (left + right) / 2:
                parts.append(_text(px - r - 3, py - r / 2, label, text_anchor="end"))
            else:
                parts.append(_text(px + r + 3, py - r / 2, label))
    else:
        parts.append(_text(WIDTH / 2, HEIGHT / 2, "no point was measured", text_anchor="middle"))
    missing = len(report.points) - len(plotted)
    if missing:
        note = f"{missing} point(s) not plotted (crashed, timed out or skipped); see the table"
        parts.append(_text(left, HEIGHT - 8, note))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


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
    (args.out / "sweep.svg").write_text(render_svg(report), encoding="utf-8")
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
