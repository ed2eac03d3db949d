"""`perfcheck history` (a metric's trend over recorded reviews) and `perfcheck history record RESULT.json`.

Torch-free, like the bot: it reads result.json as untrusted data and talks only to the SQLite store.
Exit codes: 0 done, 2 a bad database, result or config (the message names it).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from perfcheck.argtypes import positive
from perfcheck.core import deltas
from perfcheck.core.markdown import visible
from perfcheck.trace_cli import table

if TYPE_CHECKING:
    from perfcheck.core.history import TrendRow

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


def _cmd_show(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError
    from perfcheck.core.history import HistoryError, open_store, trend, workloads

    try:
        path = _db_path(args)
        conn = open_store(path, create=False)
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
