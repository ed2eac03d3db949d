"""The review history store: every recorded review in one SQLite file, queried for trends.

Torch-free, stdlib ``sqlite3`` only. The schema version lives in ``PRAGMA user_version`` and
moves forward through ``MIGRATIONS``, one transaction per step, so a store written by an older
perfcheck keeps its rows; a store written by a newer one, or at a version that was never
perfcheck's (a negative one), is refused rather than misread.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from perfcheck.core import break_depth, noise
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


def _v3(conn: sqlite3.Connection) -> None:
    # Where each review ran and whether base and head were the same content (an A/A run), so that
    # the gate's own false alarms and spread can be read per runner class (perfcheck/core/noise.py).
    # Earlier reviews keep no runner class and count as no A/A run: their outcomes were not kept.
    conn.execute("ALTER TABLE reviews ADD COLUMN runner_class TEXT")
    conn.execute("ALTER TABLE reviews ADD COLUMN aa INTEGER NOT NULL DEFAULT 0 CHECK (aa IN (0, 1))")
    conn.execute(
        """CREATE TABLE workload_outcomes (
            review_id INTEGER NOT NULL REFERENCES reviews(id),
            workload TEXT NOT NULL,
            outcome TEXT NOT NULL CHECK (outcome IN ('pass', 'fail', 'inconclusive')),
            PRIMARY KEY (review_id, workload)
        )"""
    )
    # One row per deciding metric's estimate: a metric the gate comes to decide by later needs no
    # further migration.
    conn.execute(
        """CREATE TABLE deciding_estimates (
            review_id INTEGER NOT NULL REFERENCES reviews(id),
            workload TEXT NOT NULL,
            metric TEXT NOT NULL,
            ratio REAL NOT NULL CHECK (ratio > 0),
            ratio_low REAL NOT NULL CHECK (ratio_low > 0),
            ratio_high REAL NOT NULL CHECK (ratio_high > 0),
            budget_pct REAL NOT NULL,
            PRIMARY KEY (review_id, workload, metric)
        )"""
    )
    conn.execute("CREATE INDEX reviews_by_aa ON reviews(aa, runner_class, recorded_at)")


def _v4(conn: sqlite3.Connection) -> None:
    # Each graph break's nesting depth (the blocks around its line in its function), so that the
    # heatmap can be drawn by depth. Earlier findings keep none: their depth is unknown.
    conn.execute("ALTER TABLE findings ADD COLUMN nesting_depth INTEGER")


# Append only: entry i takes a store from version i to i + 1. Never edit or drop a shipped step.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4)
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


def finding_row(
    f: Finding,
) -> tuple[str, str, str, str, str | None, int | None, str | None, int | None]:
    break_type = f.evidence.get("break_type")
    return (
        f.category,
        f.severity,
        f.workload,
        f.message,
        f.location.path if f.location else None,
        f.location.line if f.location else None,
        break_type if isinstance(break_type, str) else None,
        break_depth.evidence_depth(f.evidence),
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
            "tool_version, runner_class, aa) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                when,
                repository,
                pr,
                review.verdict,
                review.base.revision,
                review.head.revision,
                review.tool_version,
                noise.review_runner_class(review),
                int(noise.is_aa(review)),
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
            "break_type, nesting_depth) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(review_id, *finding_row(f)) for f in review.findings],
        )
        conn.executemany(
            "INSERT INTO workload_outcomes (review_id, workload, outcome) VALUES (?, ?, ?)",
            [(review_id, w.name, noise.workload_outcome(review, w)) for w in review.workloads],
        )
        conn.executemany(
            "INSERT INTO deciding_estimates (review_id, workload, metric, ratio, ratio_low, ratio_high, "
            "budget_pct) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (review_id, w.name, e.metric, e.ratio, e.ratio_low, e.ratio_high, e.budget_pct)
                for w in review.workloads
                for e in noise.deciding_estimates(w)
            ],
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


def break_heatmap(
    conn: sqlite3.Connection, limit_reviews: int, by: str = "type"
) -> dict[tuple[str, str], int]:
    """(workload, graph-break type) -> the findings over the last ``limit_reviews`` reviews whose
    category feeds the heatmap (its matrix entry's ``chart``: new graph breaks); ``by="depth"``:
    (workload, ``depth 0`` … ``depth 3+``, or ``depth unknown`` for findings recorded without one)."""
    from perfcheck.core.matrix import of_chart  # the matrix's data, read only where a chart is drawn

    feeding = sorted(of_chart("break_heatmap"))
    marks = ", ".join("?" * len(feeding))
    if by == "depth":
        return _depth_heatmap(conn, limit_reviews, feeding)
    if by != "type":
        raise ValueError(f"unknown heatmap rows {by!r}; expected type or depth")
    rows = conn.execute(
        f"""SELECT f.workload, COALESCE(f.break_type, ?), COUNT(*)
           FROM findings f
           WHERE f.category IN ({marks})
             AND f.review_id IN (SELECT id FROM reviews ORDER BY recorded_at DESC, id DESC LIMIT ?)
           GROUP BY f.workload, COALESCE(f.break_type, ?)""",  # the categories as placeholders, never as text
        (UNKNOWN_BREAK, *feeding, limit_reviews, UNKNOWN_BREAK),
    ).fetchall()
    return {(w, b): int(n) for w, b, n in rows}


def _depth_heatmap(
    conn: sqlite3.Connection, limit_reviews: int, feeding: list[str]
) -> dict[tuple[str, str], int]:
    """The heatmap's counts by nesting depth. The store may come from a cache: a stored depth that
    is no count of blocks is an unknown depth, never a row of its own."""
    marks = ", ".join("?" * len(feeding))
    rows = conn.execute(
        f"""SELECT f.workload, f.nesting_depth, COUNT(*)
           FROM findings f
           WHERE f.category IN ({marks})
             AND f.review_id IN (SELECT id FROM reviews ORDER BY recorded_at DESC, id DESC LIMIT ?)
           GROUP BY f.workload, f.nesting_depth""",  # the categories as placeholders, never as text
        (*feeding, limit_reviews),
    ).fetchall()
    out: dict[tuple[str, str], int] = {}
    for workload, depth, n in rows:
        key = (workload, break_depth.heatmap_row(depth))
        out[key] = out.get(key, 0) + int(n)
    return out


# ---------------------------------------------------------------- A/A runs (perfcheck/core/noise.py)

_NAME_MAX = 1000  # a workload's name or a runner class, as a store of perfcheck's holds them


def _text(value: object, limit: int = _NAME_MAX) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= limit else None


def _number(value: object, least: float, open_low: bool) -> float | None:
    """A finite number above ``least`` (or at it, unless ``open_low``); None otherwise."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return float(value) if value > least or (value == least and not open_low) else None


def _estimates(conn: sqlite3.Connection) -> dict[tuple[int, str], list[noise.Estimate]]:
    rows = conn.execute(
        """SELECT e.review_id, e.workload, e.metric, e.ratio, e.ratio_low, e.ratio_high, e.budget_pct
           FROM deciding_estimates e JOIN reviews r ON r.id = e.review_id
           WHERE r.aa = 1
           ORDER BY e.review_id, e.workload, e.metric"""
    ).fetchall()
    out: dict[tuple[int, str], list[noise.Estimate]] = {}
    for review_id, workload, metric, ratio, low, high, budget in rows:
        name, what = _text(workload), _text(metric, 100)
        ratios = [_number(x, 0.0, open_low=True) for x in (ratio, low, high)]
        budget_pct = _number(budget, 0.0, open_low=False)
        if name is None or what is None or budget_pct is None or None in ratios:
            raise HistoryError(f"review {review_id}: an estimate no perfcheck wrote ({metric!r}, {ratio!r})")
        r, lo, hi = (x for x in ratios if x is not None)
        out.setdefault((int(review_id), name), []).append(noise.Estimate(what, r, lo, hi, budget_pct))
    return out


def aa_runs(
    conn: sqlite3.Connection, runner_class: str | None = None, workload: str | None = None
) -> list[noise.WorkloadRun]:
    """Every recorded A/A review's workloads with their outcome and deciding estimates, newest
    first; only of ``runner_class`` / ``workload`` where given.

    The store may have come from elsewhere (a cache restored into a job), so every row is checked
    as perfcheck writes it before it counts: a row that does not fit is a HistoryError, never a
    figure in a comment."""
    where, params = ["r.aa = 1", "r.runner_class IS NOT NULL"], []
    if runner_class is not None:
        where.append("r.runner_class = ?")
        params.append(runner_class)
    if workload is not None:
        where.append("o.workload = ?")
        params.append(workload)
    rows = conn.execute(
        f"""SELECT r.id, r.recorded_at, r.runner_class, o.workload, o.outcome
           FROM reviews r JOIN workload_outcomes o ON o.review_id = r.id
           WHERE {" AND ".join(where)}
           ORDER BY r.recorded_at DESC, r.id DESC""",  # the conditions are ours; values are parameters
        params,
    ).fetchall()
    estimates = _estimates(conn)
    out = []
    for review_id, recorded_at, klass, name, outcome in rows:
        fields = (_text(recorded_at, 64), _text(klass), _text(name))
        if None in fields or outcome not in noise.OUTCOMES:
            raise HistoryError(f"review {review_id}: an A/A row no perfcheck wrote ({outcome!r})")
        when, klass_, name_ = (str(f) for f in fields)
        out.append(
            noise.WorkloadRun(
                review_id=int(review_id),
                recorded_at=when,
                runner_class=klass_,
                workload=name_,
                outcome=outcome,
                estimates=tuple(estimates.get((int(review_id), name_), ())),
            )
        )
    return out


def stored_aa_runs(path: Path, runner_class: str | None = None) -> list[noise.WorkloadRun]:
    """The A/A runs of the store at ``path``; none where there is no store yet (a first run, a
    cache not restored). A store that cannot be read is a HistoryError."""
    path = Path(path)
    if not path.exists():
        return []
    conn = open_store(path, create=False)
    try:
        return aa_runs(conn, runner_class)
    except sqlite3.Error as err:
        raise HistoryError(f"{path}: cannot read the A/A runs ({err})") from None
    finally:
        conn.close()


def noise_footer(
    path: Path, review: Review, warn: Callable[[str], None], last: int = noise.DEFAULT_LAST
) -> list[str]:
    """The comment's lines on the gate's measured A/A rates on ``review``'s runner class (the
    store's earlier runs); none where there are none. A store that cannot be read costs the
    comment these lines only, said through ``warn``: the review itself stands."""
    klass = noise.review_runner_class(review)
    if klass is None:
        return []
    try:
        runs = stored_aa_runs(path, klass)
    except HistoryError as err:
        warn(f"the A/A runs are left out of the comment: {err}")
        return []
    return noise.footer(noise.summarise(runs, last), klass, [w.name for w in review.workloads])
