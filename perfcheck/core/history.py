"""The review history store: every recorded review in one SQLite file, queried for trends.

Torch-free, stdlib ``sqlite3`` only. The schema version lives in ``PRAGMA user_version`` and
moves forward through ``MIGRATIONS``, one transaction per step, so a store written by an older
perfcheck keeps its rows; a store written by a newer one, or at a version that was never
perfcheck's (a negative one), is refused rather than misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from perfcheck.core.timing_gate import peak_memory, side_figure
from perfcheck.measures import CompileMetrics, TimingMetrics
from perfcheck.schema import Finding, ProbeResult, Review, WorkloadReview, probe_metrics


class HistoryError(RuntimeError):
    """A store that cannot be opened, migrated or written; the message says which and why."""


# What `record` keeps per workload and side. Names are the CLI's --metric choices.
METRICS: tuple[str, ...] = (
    "step_ms",
    "device_ms",
    "host_ms",
    "peak_memory_mb",
    "cold_compile_s",
    "graph_count",
    "graph_breaks",
    "recompiles",
)


def _v1(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE reviews (
            id INTEGER PRIMARY KEY,
            recorded_at TEXT NOT NULL,
            pr INTEGER,
            verdict TEXT NOT NULL,
            base_revision TEXT,
            head_revision TEXT,
            tool_version TEXT NOT NULL
        )"""
    )
    conn.execute(
        """CREATE TABLE findings (
            id INTEGER PRIMARY KEY,
            review_id INTEGER NOT NULL REFERENCES reviews(id),
            category TEXT NOT NULL,
            severity TEXT NOT NULL,
            workload TEXT NOT NULL,
            message TEXT NOT NULL,
            path TEXT,
            line INTEGER,
            break_type TEXT
        )"""
    )
    conn.execute("CREATE INDEX findings_by_review ON findings(review_id)")


def _v2(conn: sqlite3.Connection) -> None:
    # ADD COLUMN keeps every v1 row; older reviews simply have no repository.
    conn.execute("ALTER TABLE reviews ADD COLUMN repository TEXT")
    # One row per (review, workload, side, metric): a new metric needs no further migration.
    conn.execute(
        """CREATE TABLE workload_metrics (
            review_id INTEGER NOT NULL REFERENCES reviews(id),
            workload TEXT NOT NULL,
            side TEXT NOT NULL CHECK (side IN ('base', 'head')),
            metric TEXT NOT NULL,
            value REAL NOT NULL,
            PRIMARY KEY (review_id, workload, side, metric)
        )"""
    )
    conn.execute("CREATE INDEX metrics_by_series ON workload_metrics(workload, metric)")


# Append only: entry i takes a store from version i to i + 1. Never edit or drop a shipped step.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2)
LATEST = len(MIGRATIONS)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front, so two processes migrating at once serialise.
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as err:
        raise HistoryError(f"the history store cannot be written now ({err}); nothing was recorded") from None
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _refuse_unknown(version: int, path: Path) -> None:
    """Only versions 0 (a new file) to LATEST are perfcheck's; a negative one would index
    MIGRATIONS from its end and run the wrong steps, so it is refused before anything is written."""
    if version > LATEST:
        raise HistoryError(
            f"{path}: history schema version {version} is newer than this perfcheck understands "
            f"({LATEST}); upgrade perfcheck to read it"
        )
    if version < 0:
        raise HistoryError(
            f"{path}: history schema version {version} was never perfcheck's (0 to {LATEST}); "
            "not a perfcheck history database"
        )


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Apply the missing migrations in order, each in its own transaction; return the version reached."""
    _refuse_unknown(_version(conn), path)
    for target in range(_version(conn) + 1, LATEST + 1):
        with _transaction(conn):
            # Re-read under the lock: another process may have migrated since we looked.
            current = _version(conn)
            _refuse_unknown(current, path)
            if current >= target:
                continue
            MIGRATIONS[current](conn)
            # PRAGMA takes no parameters; the value is our own integer.
            conn.execute(f"PRAGMA user_version = {current + 1}")
    return _version(conn)


def open_store(path: Path, *, create: bool = True) -> sqlite3.Connection:
    """Open (creating it and its folders unless ``create`` is false) and migrate the store at ``path``."""
    path = Path(path)
    if not path.exists():
        if not create:
            raise HistoryError(f"{path}: no history database there (record a review first)")
        path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise HistoryError(f"{path}: is a folder, not a history database")
    # Autocommit mode: transactions are explicit (`_transaction`), never opened behind our back.
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        migrate(conn, path)
    except sqlite3.OperationalError as err:
        conn.close()
        if "locked" in str(err) or "busy" in str(err):
            raise HistoryError(f"{path}: in use by another process ({err}); nothing was recorded") from None
        raise HistoryError(f"{path}: not a usable history database ({err})") from None
    except sqlite3.DatabaseError as err:
        conn.close()
        raise HistoryError(f"{path}: not a usable history database ({err})") from None
    except HistoryError:
        conn.close()
        raise
    except BaseException:
        conn.close()
        raise
    conn.row_factory = sqlite3.Row
    return conn


def side_metrics(results: Sequence[ProbeResult]) -> dict[str, float]:
    """The METRICS one side's probe results carry; absent ones are left out, not zeroed."""
    out: dict[str, float] = {}
    timing = next((t for r in results if (t := probe_metrics(r, TimingMetrics))), None)
    compiled = next((c for r in results if (c := probe_metrics(r, CompileMetrics))), None)
    if timing is not None:
        for name in ("step_ms", "device_ms", "host_ms"):
            value = side_figure(timing, name)
            if value is not None:
                out[name] = value
        peak = peak_memory(timing)
        if peak is not None:
            out["peak_memory_mb"] = peak
        if timing.cold_compile_s is not None:
            out["cold_compile_s"] = timing.cold_compile_s
    if compiled is not None:
        # The compile probe measures cold compile on its own; it wins over timing's figure.
        out["cold_compile_s"] = compiled.cold_compile_s
        out["graph_count"] = float(compiled.graph_count)
        out["graph_breaks"] = float(compiled.graph_break_count)
        out["recompiles"] = float(compiled.recompile_count)
    return out


def metric_rows(workload: WorkloadReview) -> list[tuple[str, str, str, float]]:
    """(workload, side, metric, value) for both sides of one workload."""
    return [
        (workload.name, side, metric, value)
        for side, results in (("base", workload.base), ("head", workload.head))
        for metric, value in side_metrics(results).items()
    ]


def finding_row(f: Finding) -> tuple[str, str, str, str, str | None, int | None, str | None]:
    break_type = f.evidence.get("break_type")
    return (
        f.category,
        f.severity,
        f.workload,
        f.message,
        f.location.path if f.location else None,
        f.location.line if f.location else None,
        break_type if isinstance(break_type, str) else None,
    )


def normalise_time(recorded_at: str | None, now: Callable[[], datetime]) -> str:
    """UTC ISO-8601 to the second, so that text order is time order; a naive time is taken as UTC."""
    if recorded_at is None:
        moment = now()
    else:
        try:
            # Python 3.10's fromisoformat does not read a trailing Z.
            moment = datetime.fromisoformat(recorded_at.replace("Z", "+00:00"))
        except ValueError:
            raise HistoryError(f"recorded_at {recorded_at!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def record(
    conn: sqlite3.Connection,
    review: Review,
    *,
    repository: str | None,
    pr: int | None,
    recorded_at: str | None = None,
) -> int:
    """Store one review with its per-workload metrics and findings in one transaction; return its id."""
    when = normalise_time(recorded_at, _utc_now)
    with _transaction(conn):
        cur = conn.execute(
            "INSERT INTO reviews (recorded_at, repository, pr, verdict, base_revision, head_revision, "
            "tool_version) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                when,
                repository,
                pr,
                review.verdict,
                review.base.revision,
                review.head.revision,
                review.tool_version,
            ),
        )
        review_id = cur.lastrowid
        assert review_id is not None  # an INSERT always sets it
        conn.executemany(
            "INSERT INTO workload_metrics (review_id, workload, side, metric, value) VALUES (?, ?, ?, ?, ?)",
            [(review_id, *row) for w in review.workloads for row in metric_rows(w)],
        )
        conn.executemany(
            "INSERT INTO findings (review_id, category, severity, workload, message, path, line, "
            "break_type) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(review_id, *finding_row(f)) for f in review.findings],
        )
    return review_id


@dataclass(frozen=True)
class TrendRow:
    review_id: int
    recorded_at: str
    repository: str | None
    pr: int | None
    base_revision: str | None
    head_revision: str | None
    base: float | None
    head: float | None


def trend(conn: sqlite3.Connection, workload: str, metric: str, limit: int) -> list[TrendRow]:
    """The last ``limit`` reviews that measured ``metric`` on ``workload``, oldest first."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    rows = conn.execute(
        """SELECT r.id, r.recorded_at, r.repository, r.pr, r.base_revision, r.head_revision,
                  MAX(CASE WHEN m.side = 'base' THEN m.value END),
                  MAX(CASE WHEN m.side = 'head' THEN m.value END)
           FROM reviews r JOIN workload_metrics m ON m.review_id = r.id
           WHERE m.workload = ? AND m.metric = ?
           GROUP BY r.id
           ORDER BY r.recorded_at DESC, r.id DESC
           LIMIT ?""",
        (workload, metric, limit),
    ).fetchall()
    return [TrendRow(*tuple(row)) for row in reversed(rows)]


def workloads(conn: sqlite3.Connection) -> list[str]:
    """Every workload with recorded metrics, by name."""
    return [r[0] for r in conn.execute("SELECT DISTINCT workload FROM workload_metrics ORDER BY workload")]


UNKNOWN_BREAK = "(unknown)"


def break_heatmap(conn: sqlite3.Connection, limit_reviews: int) -> dict[tuple[str, str], int]:
    """(workload, graph-break type) -> the findings over the last ``limit_reviews`` reviews whose
    category feeds the heatmap (its matrix entry's ``chart``: new graph breaks)."""
    from perfcheck.core.matrix import of_chart  # the matrix's data, read only where a chart is drawn

    feeding = sorted(of_chart("break_heatmap"))
    marks = ", ".join("?" * len(feeding))
    rows = conn.execute(
        f"""SELECT f.workload, COALESCE(f.break_type, ?), COUNT(*)
           FROM findings f
           WHERE f.category IN ({marks})
             AND f.review_id IN (SELECT id FROM reviews ORDER BY recorded_at DESC, id DESC LIMIT ?)
           GROUP BY f.workload, COALESCE(f.break_type, ?)""",  # the categories as placeholders, never as text
        (UNKNOWN_BREAK, *feeding, limit_reviews, UNKNOWN_BREAK),
    ).fetchall()
    return {(w, b): int(n) for w, b, n in rows}
