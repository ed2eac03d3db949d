"""`perfcheck html RESULT.json`: the self-contained HTML report of a recorded review.

Torch-free: the result is read as untrusted data. Exit codes: 0 written, 2 bad input (a result
or history store that cannot be read).
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from pathlib import Path
from typing import Any

from perfcheck.cli.argtypes import positive

EXIT_BAD_INPUT = 2


class _NoHistory(Exception):
    """The history store is unusable; the message says why."""


def _from_history(
    db: Path, reviews: int, by: str = "type"
) -> tuple[dict[tuple[str, str], int] | None, list[Any]]:
    """Break counts (by break type or nesting depth) over the store's last ``reviews`` reviews and
    its A/A runs (plotted over time); (None, []) when this perfcheck has no history reader, so the
    report falls back to the review's own breaks."""
    try:
        history = importlib.import_module("perfcheck.core.history")
    except ImportError:
        return None, []
    if not hasattr(history, "break_heatmap") or not hasattr(history, "open_store"):
        return None, []
    try:
        conn = history.open_store(db, create=False)
    except history.HistoryError as err:
        raise _NoHistory(str(err)) from None
    try:
        counts: dict[tuple[str, str], int] = history.break_heatmap(conn, reviews, by)
        aa_runs: list[Any] = history.aa_runs(conn)
    except (history.HistoryError, sqlite3.Error) as err:
        raise _NoHistory(f"{db}: cannot read the history ({err})") from None
    finally:
        conn.close()
    return counts, aa_runs


def _cmd_html(args: argparse.Namespace) -> int:
    from perfcheck.config import ConfigError, load_config
    from perfcheck.core.matrix import merged
    from perfcheck.core.reports import render_html
    from perfcheck.schema import ContractError, load_review

    try:
        config = load_config(args.config, Path.cwd())  # first: its plugins' categories are known then
        review = load_review(args.result)
        heatmap, aa_runs = _from_history(args.history, args.last, args.by) if args.history else (None, [])
    except (ConfigError, ContractError, _NoHistory) as err:
        print(f"perfcheck: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    html = render_html(review, heatmap, args.templates, merged(config.matrix), aa_runs, heatmap_by=args.by)
    if args.out is None:
        sys.stdout.write(html)
        return 0
    # A folder, as every other command's --out: the file in it has the name review gives it.
    named = args.out.suffix.lower() in (".html", ".htm") and not args.out.is_dir()
    out = args.out if named else args.out / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    print(f"perfcheck: wrote {out}", file=sys.stderr)
    return 0


def add_html_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `html` on the `perfcheck` command's subparsers."""
    html = subparsers.add_parser(
        "html",
        help="render a result.json as one self-contained HTML report",
        description="Render a recorded review as a single HTML file (inline CSS and SVG charts, no "
        "scripts, no network): verdict, per-workload tables, findings with their evidence, kernel "
        "time changes, the GPU time breakdown, a graph-break heatmap and, per frame, the graph breaks "
        "by nesting depth (the if/for/while/with/try/match blocks around each in its function).",
        epilog="Exit codes: 0 written, 2 unreadable result or history store.",
    )
    html.add_argument("result", type=Path, help="a result.json written by `perfcheck review` or `report`")
    html.add_argument(
        "--out",
        type=Path,
        help="where to write: a folder (report.html in it, as `perfcheck review --out` writes) or a "
        ".html file (default: standard output)",
    )
    html.add_argument("--templates", type=Path, help="a folder whose report.html.j2 replaces perfcheck's")
    html.add_argument(
        "--config", type=Path, help="settings file: its plugins and matrix (default: perfcheck.yml here)"
    )
    html.add_argument(
        "--db",
        "--history",
        dest="history",
        type=Path,
        help="a history database (as `perfcheck history --db`): the heatmap then shows graph breaks "
        "across its recent reviews instead of this review's new ones, and its A/A runs are plotted "
        "(each deciding metric's estimate per run, against its budget)",
    )
    html.add_argument(
        "--last",
        type=positive,
        default=50,
        help="with --db: how many recent reviews the heatmap covers (default %(default)s)",
    )
    html.add_argument(
        "--by",
        choices=("type", "depth"),
        default="type",
        help="the heatmap's rows: Dynamo's break type, or the nesting depth of each break (depth 0, 1, "
        "2, 3+: the blocks around its line in its function; 'depth unknown' for breaks recorded "
        "before perfcheck measured it), with or without --db (default %(default)s)",
    )
    html.set_defaults(func=_cmd_html)
