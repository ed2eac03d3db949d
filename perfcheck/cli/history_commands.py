"""`perfcheck history` (a metric's trend over recorded reviews), `perfcheck history record RESULT.json`
and `perfcheck history noise` (the gate's measured A/A error rates).

Torch-free, like the bot: it reads result.json as untrusted data and talks only to the SQLite store.
Exit codes: 0 done, 2 a bad database, result or config (the message names it).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from perfcheck.cli.argtypes import positive
from perfcheck.cli.trace_commands import table
from perfcheck.core import deltas
from perfcheck.core.markdown import visible

if TYPE_CHECKING:
    from perfcheck.core.history import TrendRow
    from perfcheck.core.noise import Summary

EXIT_BAD_INPUT = 2
BLOCKS = "▁▂▃▄▅▆▇█"
METRIC_UNITS = {
    "step_ms": "ms",
    "peak_memory_mb": "MB",
    "cold_compile_s": "s",
    "graph_count": "graphs",
    "graph_breaks": "breaks",
    "recompiles": "recompiles",
}


def sparkline(values: Sequence[float | None]) -> str:
    """One block per value, scaled between the smallest and largest; a gap (space) where one is missing."""
    present = [v for v in values if v is not None]
    if not present:
        return ""
    low, high = min(present), max(present)
    span = high - low
    top = len(BLOCKS) - 1

    def block(v: float | None) -> str:
        if v is None:
            return " "
        # A flat series sits mid-height so it reads as "steady", not "at the floor".
        return BLOCKS[round(top * (v - low) / span)] if span else BLOCKS[top // 2]

    return "".join(block(v) for v in values)


def _value(x: float | None) -> str:
    return "—" if x is None else f"{x:,.3f}".rstrip("0").rstrip(".")


def _rev(rev: str | None) -> str:
    return "—" if rev is None else rev[:10]


def _where(row: TrendRow) -> str:
    repo = row.repository or ""
    pr = f"#{row.pr}" if row.pr is not None else ""
    return f"{repo}{pr}" or "—"


def render_trend(workload: str, metric: str, rows: Sequence[TrendRow]) -> str:
    """A trend table, oldest first, and a sparkline of the head values under it."""
    unit = METRIC_UNITS.get(metric, "")
    # The name came from a recorded result.json: `table` shows its cells' control characters, this
    # line shows the title's.
    name = visible(workload, one_line=True)
    title = f"{name} · {metric} ({unit}) · {len(rows)} review{'s' if len(rows) != 1 else ''}"
    if not rows:
        return f"{title}\n  nothing recorded"
    body = [
        [
            r.recorded_at.replace("T", " ").removesuffix("+00:00"),
            _where(r),
            _rev(r.base_revision),
            _rev(r.head_revision),
            _value(r.base),
            _value(r.head),
            deltas.relative(r.base, r.head),
        ]
        for r in rows
    ]
    headers = ["recorded (UTC)", "where", "base rev", "head rev", "base", "head", "Δ"]
    heads = [r.head for r in rows]
    spark = f"head trend: {sparkline(heads)}  {_value(_first(heads))} → {_value(_first(heads[::-1]))}"
    return "\n".join([title, "", table(headers, body, "llllrrr"), "", spark])


def _first(values: Sequence[float | None]) -> float | None:
    return next((v for v in values if v is not None), None)


def _db_path(args: argparse.Namespace) -> Path:
    if args.db is not None:
        return Path(args.db)
    from perfcheck.config import load_config

    return Path(load_config(args.config, Path.cwd()).history.path)


def _fail(err: object) -> int:
    print(f"perfcheck history: {err}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _existing_store(args: argparse.Namespace) -> tuple[Path, sqlite3.Connection]:
    """The store the options name, opened and migrated; ConfigError or HistoryError where it cannot
    be (none there: the commands that read do not make one)."""
    from perfcheck.core.history import open_store

    path = _db_path(args)
    return path, open_store(path, create=False)


def _cmd_show(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.core.history import HistoryError, trend, workloads

    try:
        path, conn = _existing_store(args)
    except (ConfigError, HistoryError) as err:
        return _fail(err)
    try:
        names = [args.workload] if args.workload else workloads(conn)
        if not names:
            print("no reviews with metrics recorded yet")
            return 0
        blocks = [render_trend(w, args.metric, trend(conn, w, args.metric, args.limit)) for w in names]
    except sqlite3.Error as err:
        return _fail(f"{path}: cannot read the history ({err})")
    finally:
        conn.close()
    print("\n\n".join(blocks))
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.core.history import HistoryError, open_store, record
    from perfcheck.schema import ContractError, load_review

    try:
        review = load_review(args.result)
        path = _db_path(args)
        conn = open_store(path)
    except (ConfigError, ContractError, HistoryError) as err:
        return _fail(err)
    try:
        review_id = record(conn, review, repository=args.repo, pr=args.pr)
    except (HistoryError, sqlite3.Error) as err:
        return _fail(f"{path}: cannot record the review ({err})")
    finally:
        conn.close()
    print(
        f"perfcheck history: recorded review {review_id} ({review.verdict}, {len(review.workloads)} "
        f"workload(s), {len(review.findings)} finding(s)) in {path}",
        file=sys.stderr,
    )
    return 0


def _pct(x: float) -> str:
    return f"{x:.2f} %"


def render_noise(summaries: Sequence[Summary], warnings: Sequence[str], last: int, where: Path) -> str:
    """A table per runner class: each workload's A/A runs, false alarms and inconclusives, and a row
    per deciding metric with the spread of |head/base - 1|; then the budgets the noise outgrows."""
    headers = ["workload", "runs", "false alarms", "inconclusive", "metric"]
    headers += ["median |Δ|", "p95 |Δ|", "max |Δ|", "upper end", "budget"]
    intro = (
        f"A/A runs in {where} (base and head the same content; every fail is a false alarm), the "
        f"last {last} per workload and runner class. |Δ|: |head/base - 1| of a deciding metric; "
        "upper end: the median of its intervals' upper ends (a budget under it leaves an unchanged "
        "tree undecided)."
    )
    blocks = [textwrap.fill(intro, 100)]
    for klass in sorted({s.runner_class for s in summaries}):
        mine = [s for s in summaries if s.runner_class == klass]
        body: list[list[str]] = []
        for s in mine:
            counts = [s.workload, str(s.runs), str(s.failed), str(s.inconclusive)]
            if not s.spreads:
                body.append([*counts, "—", "", "", "", "", ""])
            for i, x in enumerate(s.spreads):
                figures = [_pct(x.median_pct), _pct(x.p95_pct), _pct(x.max_pct)]
                figures += [f"{x.median_high_pct:+.2f} %", f"{x.budget_pct:g} %"]
                body.append([*(counts if i == 0 else [""] * 4), x.label, *figures])
        span = f"{min(s.first for s in mine)[:10]} … {max(s.last for s in mine)[:10]}"
        title = f"{visible(klass, one_line=True)} · {span}"
        blocks.append("\n".join([title, "", table(headers, body, "lrrrlrrrrr")]))
    if warnings:
        blocks.append("\n".join(["Budgets tighter than this noise:", *(f"- {w}" for w in warnings)]))
    return "\n\n".join(blocks)


def _noise_doc(summaries: Sequence[Summary], warnings: Sequence[str], last: int, where: Path) -> str:
    summaries_doc = [
        {**asdict(s), "spreads": [{**asdict(x), "label": x.label} for x in s.spreads]} for s in summaries
    ]
    doc = {"db": str(where), "last": last, "summaries": summaries_doc, "warnings": list(warnings)}
    return json.dumps(doc, indent=1, ensure_ascii=False)


def _cmd_noise(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.core.history import HistoryError, aa_runs
    from perfcheck.core.noise import budget_warnings, summarise

    try:
        path, conn = _existing_store(args)
    except (ConfigError, HistoryError) as err:
        return _fail(err)
    try:
        runs = aa_runs(conn, args.runner_class, args.workload)
    except (HistoryError, sqlite3.Error) as err:
        return _fail(f"{path}: cannot read the A/A runs ({err})")
    finally:
        conn.close()
    summaries = summarise(runs, args.last)
    # Against the budget each metric was last judged by: what the gate holds this runner to now.
    warnings = budget_warnings(summaries)
    if args.json:
        print(_noise_doc(summaries, warnings, args.last, path))
    elif not summaries:
        which = " ".join(
            f"{flag} {visible(value, one_line=True)}"
            for flag, value in (("--workload", args.workload), ("--runner-class", args.runner_class))
            if value
        )
        print(
            f"no A/A runs in {path}{' for ' + which if which else ''} yet: record reviews of the default "
            "branch against itself (base and head the same commit, history.enabled: true), as "
            "examples/workflows/perfcheck-aa-cpu.yml does"
        )
    else:
        print(render_noise(summaries, warnings, args.last, path))
    return 0


def _store_options(parser: argparse.ArgumentParser, default: object) -> None:
    # `record` passes SUPPRESS so that options given before the word `record` are not reset.
    parser.add_argument(
        "--db",
        type=Path,
        default=default,
        help="the history database (default: history.path of the config, .perfcheck/history.sqlite)",
    )
    parser.add_argument(
        "--config", type=Path, default=default, help="settings file (default: perfcheck.yml here)"
    )


EPILOG = "Exit codes: 0 done, 2 a bad database, result or config."


def add_history_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `history` and `history record` on the `perfcheck` command's subparsers."""
    from perfcheck.core.history import METRICS

    history = subparsers.add_parser(
        "history",
        help="trends of a metric over recorded reviews; `history record` stores a result",
        description="Show how a metric moved over the reviews in the history store (SQLite, one file): "
        "a table oldest first, base and head side by side, and a sparkline of head. Without "
        "--workload, every recorded workload. Needs no torch.",
        epilog=EPILOG,
    )
    _store_options(history, None)
    history.add_argument("--workload", help="the workload to show (default: all)")
    history.add_argument(
        "--metric", choices=METRICS, default="step_ms", help="what to show (default %(default)s)"
    )
    history.add_argument(
        "--limit", type=positive, default=20, help="most recent reviews to show (default %(default)s)"
    )
    history.set_defaults(func=_cmd_show)

    commands = history.add_subparsers(dest="history_command", metavar="COMMAND")
    rec = commands.add_parser(
        "record",
        help="store a result.json in the history",
        description="Validate RESULT.json as untrusted data and store the review: verdict, revisions, "
        "per-workload metrics of both sides and the findings. Creates the database and its folders "
        "if needed, and migrates an older one forward.",
        epilog=EPILOG,
    )
    rec.add_argument("result", type=Path, help="a result.json written by `perfcheck review` or `report`")
    _store_options(rec, argparse.SUPPRESS)
    rec.add_argument("--repo", help="the repository, owner/name")
    rec.add_argument("--pr", type=positive, help="the pull request number")
    rec.set_defaults(func=_cmd_record)

    noise = commands.add_parser(
        "noise",
        help="the gate's measured error rates: A/A runs per workload and runner class",
        description="Read the A/A reviews in the history store (base and head the same commit, as "
        "the default branch's scheduled run records them) and print, per workload and runner class, "
        "the runs, the false alarms (a fail on an unchanged tree), the inconclusives and the spread "
        "of each deciding metric (|head/base - 1|: median, p95 by nearest rank, max; and the median "
        "upper end of its interval), then the budgets tighter than that noise. Needs no torch.",
        epilog=EPILOG,
    )
    _store_options(noise, argparse.SUPPRESS)
    noise.add_argument("--workload", default=argparse.SUPPRESS, help="only this workload")
    noise.add_argument("--runner-class", help="only this runner class, e.g. 'cuda:NVIDIA H200'")
    noise.add_argument(
        "--last",
        type=positive,
        default=30,
        help="newest A/A runs per workload and runner class (default %(default)s)",
    )
    noise.add_argument("--json", action="store_true", help="one JSON document instead of the tables")
    noise.set_defaults(func=_cmd_noise)
