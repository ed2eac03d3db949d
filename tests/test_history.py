"""The review history store: recording, queries, forward migration, and `perfcheck history`.

The recorded review is tests/data/demo-result.json (a real `make demo` run, see tests/data/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import perfcheck.cli.main
from perfcheck.cli.history_commands import add_history_parser, render_trend, sparkline
from perfcheck.core import history
from perfcheck.core.history import (
    LATEST,
    HistoryError,
    TrendRow,
    break_heatmap,
    normalise_time,
    open_store,
    record,
    side_metrics,
    trend,
)
from perfcheck.measures import TimingMetrics, TimingProcess
from perfcheck.schema import ProbeResult, Review, load_review

DEMO_RESULT = Path(__file__).parent / "data" / "demo-result.json"
ITEM_BREAK = "Unsupported Tensor.item() call with capture_scalar_outputs=False"


@pytest.fixture(scope="module")
def demo() -> Review:
    return load_review(DEMO_RESULT)


def tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


# --- recording and queries ---------------------------------------------------------------------


def test_open_store_creates_the_file_and_its_folders_at_the_latest_version(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "history.sqlite"
    open_store(path).close()
    assert path.is_file()
    assert version(path) == LATEST == 4
    # Opening again is a no-op, not a second migration.
    conn = open_store(path)
    assert {"reviews", "findings", "workload_metrics", "workload_outcomes"} <= tables(conn)
    assert "deciding_estimates" in tables(conn)
    conn.close()


def test_demo_recorded_twice_gives_a_two_point_trend_and_heatmap(tmp_path: Path, demo: Review) -> None:
    conn = open_store(tmp_path / "h.sqlite")
    first = record(conn, demo, repository="acme/model", pr=7, recorded_at="2026-01-01T10:00:00Z")
    second = record(conn, demo, repository="acme/model", pr=8, recorded_at="2026-01-02T10:00:00+02:00")
    assert second > first

    breaks = trend(conn, "classifier", "graph_breaks", limit=10)
    assert [(r.pr, r.base, r.head) for r in breaks] == [(7, 0.0, 1.0), (8, 0.0, 1.0)]
    assert [r.recorded_at for r in breaks] == ["2026-01-01T10:00:00+00:00", "2026-01-02T08:00:00+00:00"]
    assert breaks[0].repository == "acme/model"

    cold = trend(conn, "classifier", "cold_compile_s", limit=1)
    assert [(r.review_id, r.base, r.head) for r in cold] == [(second, 10.78, 11.3743)]
    # The step-time trend is each side's figure as the table shows it: the geometric mean over
    # its processes.
    steps = trend(conn, "classifier", "step_ms", limit=10)
    assert [(round(r.base, 3), round(r.head, 3)) for r in steps] == [(0.573, 0.796)] * 2
    assert trend(conn, "classifier", "device_ms", limit=10) == []  # timed on a CPU
    assert trend(conn, "no-such-workload", "graph_breaks", limit=10) == []

    assert break_heatmap(conn, limit_reviews=10) == {("classifier", ITEM_BREAK): 2}
    assert break_heatmap(conn, limit_reviews=1) == {("classifier", ITEM_BREAK): 1}

    rows = conn.execute("SELECT category, path, line, break_type FROM findings WHERE review_id = ?", (first,))
    assert sorted(map(tuple, rows), key=str) == sorted(
        [
            ("graph_break_added", "model.py", 17, ITEM_BREAK),
            ("export_ir_changed", None, None, None),
            ("throughput_regression", None, None, None),
        ],
        key=str,
    )
    verdict = conn.execute("SELECT verdict, tool_version FROM reviews WHERE id = ?", (first,)).fetchone()
    assert tuple(verdict) == ("fail", demo.tool_version)
    conn.close()


def test_unknown_metric_is_refused(tmp_path: Path) -> None:
    conn = open_store(tmp_path / "h.sqlite")
    with pytest.raises(ValueError, match="unknown metric"):
        trend(conn, "classifier", "vibes", limit=1)
    conn.close()


def timing_result(steps: list[float], peak: float | None) -> ProbeResult:
    processes = [
        TimingProcess(
            step_ms=x,
            median_step_ms=x,
            steps=10,
            peak_memory_mb=peak,
            first=True,
            ready_s=1.0,
            warmup_steps=3,
            warmup_converged=True,
        )
        for x in steps
    ]
    timing = TimingMetrics(
        mode="compiled",
        steps_per_round=10,
        batch_size=8,
        cold_compile_s=4.0,
        memory_kind="peak_rss",
        processes=processes,
    )
    return ProbeResult(
        probe="timing",
        workload="w",
        side="head",
        status="ok",
        duration_s=1.0,
        metrics=timing.model_dump(mode="json"),
    )


def test_side_metrics_takes_what_is_present(demo: Review) -> None:
    # A side's step time is the geometric mean over its processes, as the table shows it.
    assert side_metrics([timing_result([1.0, 4.0], peak=None)]) == {
        "step_ms": 2.0,
        "cold_compile_s": 4.0,
    }
    # With a compile probe beside it, cold compile comes from the compile probe.
    with_compile = side_metrics([timing_result([1.0], peak=512.0), *demo.workloads[0].head])
    assert with_compile == {
        "step_ms": 1.0,
        "peak_memory_mb": 512.0,
        "cold_compile_s": 11.3743,
        "graph_count": 2.0,
        "graph_breaks": 1.0,
        "recompiles": 2.0,
    }
    assert side_metrics([]) == {}


def test_recorded_at_is_normalised_to_utc() -> None:
    def never() -> object:
        raise AssertionError("the clock is only read when no time is given")

    assert normalise_time("2026-03-04T05:06:07", never) == "2026-03-04T05:06:07+00:00"  # type: ignore[arg-type]
    with pytest.raises(HistoryError, match="not an ISO-8601 time"):
        normalise_time("yesterday", never)  # type: ignore[arg-type]


# --- migrations ---------------------------------------------------------------------------------

# The schema as perfcheck's first history release wrote it, spelled out so that a later edit of
# the code's own v1 migration cannot make this test pass against a store no user has.
V1_SQL = """
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY, recorded_at TEXT NOT NULL, pr INTEGER, verdict TEXT NOT NULL,
    base_revision TEXT, head_revision TEXT, tool_version TEXT NOT NULL
);
CREATE TABLE findings (
    id INTEGER PRIMARY KEY, review_id INTEGER NOT NULL REFERENCES reviews(id),
    category TEXT NOT NULL, severity TEXT NOT NULL, workload TEXT NOT NULL, message TEXT NOT NULL,
    path TEXT, line INTEGER, break_type TEXT
);
CREATE INDEX findings_by_review ON findings(review_id);
INSERT INTO reviews VALUES (1, '2025-12-01T09:00:00+00:00', 41, 'fail', 'aaaa', 'bbbb', '0.0.9');
INSERT INTO findings VALUES
    (1, 1, 'graph_break_added', 'error', 'mlp', 'New graph break', 'm.py', 3, 'print'),
    (2, 1, 'recompile', 'warning', 'mlp', 'New recompile', NULL, NULL, NULL);
PRAGMA user_version = 1;
"""


def test_a_v1_store_migrates_forward_with_its_rows_intact(tmp_path: Path, demo: Review) -> None:
    path = tmp_path / "old.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(V1_SQL)
    raw.close()
    assert version(path) == 1

    conn = open_store(path)
    assert version(path) == LATEST
    old = conn.execute("SELECT * FROM reviews WHERE id = 1").fetchone()
    assert dict(old) == {
        "id": 1,
        "recorded_at": "2025-12-01T09:00:00+00:00",
        "pr": 41,
        "verdict": "fail",
        "base_revision": "aaaa",
        "head_revision": "bbbb",
        "tool_version": "0.0.9",
        "repository": None,
        "runner_class": None,  # v3: not known for a review recorded before it
        "aa": 0,
    }
    assert conn.execute("SELECT COUNT(*) FROM findings").fetchone()[0] == 2
    assert "workload_metrics" in tables(conn)

    # The migrated store takes new reviews, and old findings count in the heatmap.
    record(conn, demo, repository="acme/model", pr=42, recorded_at="2026-01-01T00:00:00Z")
    assert break_heatmap(conn, limit_reviews=5) == {("mlp", "print"): 1, ("classifier", ITEM_BREAK): 1}
    conn.close()


def test_a_store_from_the_future_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {LATEST + 1}")
    raw.close()
    with pytest.raises(HistoryError, match=f"version {LATEST + 1} is newer than this perfcheck"):
        open_store(path)
    assert version(path) == LATEST + 1


def test_a_failing_migration_rolls_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "h.sqlite"
    open_store(path).close()

    def half_done(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half (x INTEGER)")
        conn.execute("INSERT INTO reviews_typo VALUES (1)")

    monkeypatch.setattr(history, "MIGRATIONS", (*history.MIGRATIONS, half_done))
    monkeypatch.setattr(history, "LATEST", LATEST + 1)
    with pytest.raises(HistoryError, match="not a usable history database"):
        open_store(path)
    monkeypatch.undo()
    assert version(path) == LATEST
    conn = open_store(path)
    assert "half" not in tables(conn)
    conn.close()


def test_files_that_are_not_stores_are_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database, just text " * 100)
    with pytest.raises(HistoryError, match="not a usable history database"):
        open_store(junk)
    with pytest.raises(HistoryError, match="is a folder"):
        open_store(tmp_path)
    with pytest.raises(HistoryError, match="no history database there"):
        open_store(tmp_path / "missing.sqlite", create=False)
    assert not (tmp_path / "missing.sqlite").exists()


# --- rendering ----------------------------------------------------------------------------------


def test_sparkline_scales_between_min_and_max() -> None:
    assert sparkline([1.0, 2.0, 3.0, None, 8.0]) == "▁▂▃ █"
    assert sparkline([5.0, 5.0]) == "▄▄"
    assert sparkline([None]) == ""


def test_render_trend_golden() -> None:
    rows = [
        TrendRow(
            1, "2026-01-01T10:00:00+00:00", "acme/model", 7, "0123456789abcdef", "fedcba9876543210", 2.0, 2.5
        ),
        TrendRow(2, "2026-01-02T10:00:00+00:00", None, None, None, None, 2.0, None),
    ]
    assert render_trend("mlp", "step_ms", rows) == (
        "mlp · step_ms (ms) · 2 reviews\n"
        "\n"
        "recorded (UTC)       where         base rev    head rev    base  head        Δ\n"
        "-------------------  ------------  ----------  ----------  ----  ----  -------\n"
        "2026-01-01 10:00:00  acme/model#7  0123456789  fedcba9876     2   2.5  +25.0 %\n"
        "2026-01-02 10:00:00  —             —           —              2     —        —\n"
        "\n"
        # One head value is a flat series: mid-height, then a gap for the missing one.
        "head trend: ▄   2.5 → 2.5"
    )
    assert render_trend("mlp", "step_ms", []) == "mlp · step_ms (ms) · 0 reviews\n  nothing recorded"


# --- the command line ---------------------------------------------------------------------------


def cli() -> Callable[[Sequence[str]], int]:
    """`perfcheck.cli.main.main` once `history` is wired there; until then a parser of our own."""
    if hasattr(perfcheck.cli.main, "add_history_parser"):
        return perfcheck.cli.main.main
    parser = argparse.ArgumentParser(prog="perfcheck")
    add_history_parser(parser.add_subparsers(dest="command", required=True))

    def main(argv: Sequence[str]) -> int:
        args = parser.parse_args(argv)
        return int(args.func(args))

    return main


@pytest.mark.parametrize("command", [["history"], ["history", "record"]])
def test_history_commands_have_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli()([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: perfcheck history" in capsys.readouterr().out


def test_cli_records_and_shows_a_trend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = cli()
    db = tmp_path / "store" / "h.sqlite"
    assert (
        main(["history", "record", str(DEMO_RESULT), "--db", str(db), "--repo", "acme/m", "--pr", "3"]) == 0
    )
    # Options before the word `record` count too.
    assert main(["history", "--db", str(db), "record", str(DEMO_RESULT)]) == 0
    assert "recorded review 2 (fail, 1 workload(s), 3 finding(s))" in capsys.readouterr().err

    assert main(["history", "--db", str(db), "--workload", "classifier", "--metric", "graph_breaks"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("classifier · graph_breaks (breaks) · 2 reviews\n")
    assert "acme/m#3" in out
    assert out.rstrip().endswith("head trend: ▄▄  1 → 1")

    assert main(["history", "--db", str(db), "--metric", "cold_compile_s", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 review\n" in out
    assert "10.78  11.374  +5.5 %" in out


def test_cli_takes_the_store_path_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "from-config.sqlite"
    config = tmp_path / "perfcheck.yml"
    config.write_text(f"history:\n  path: {db}\n")
    assert cli()(["history", "record", str(DEMO_RESULT), "--config", str(config)]) == 0
    assert db.is_file()
    assert cli()(["history", "--config", str(config), "--metric", "recompiles"]) == 0
    assert "classifier · recompiles" in capsys.readouterr().out


def test_cli_bad_input_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = cli()
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database, just text " * 100)
    future = tmp_path / "future.sqlite"
    raw = sqlite3.connect(future)
    raw.execute(f"PRAGMA user_version = {LATEST + 5}")
    raw.close()
    bad_result = tmp_path / "result.json"
    bad_result.write_text('{"schema_version": 2, "verdict": "maybe"}')

    cases = [
        (["history", "--db", str(junk)], "not a usable history database"),
        (["history", "--db", str(tmp_path / "missing.sqlite")], "no history database there"),
        (["history", "--db", str(future)], "newer than this perfcheck"),
        (["history", "record", str(bad_result), "--db", str(tmp_path / "h.sqlite")], "not a valid perfcheck"),
        (["history", "record", str(DEMO_RESULT), "--db", str(junk)], "not a usable history database"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("perfcheck history: ") and message in err, (argv, err)
    # A refused result leaves no database behind.
    assert not (tmp_path / "h.sqlite").exists()


def test_report_records_into_the_configured_store(tmp_path: Path) -> None:
    from perfcheck.cli.main import main as cli_main
    from perfcheck.schema import ProbeRun, Shard

    review = load_review(DEMO_RESULT)
    probes = ProbeRun(
        tool_version="0",
        shard=Shard(index=1, count=1),
        workload_set=[w.name for w in review.workloads],
        base=review.base,
        head=review.head,
        workloads=review.workloads,
    )
    (tmp_path / "probes.json").write_text(probes.model_dump_json())
    db = tmp_path / "h" / "history.sqlite"
    (tmp_path / "perfcheck.yml").write_text(
        "workloads: [{name: classifier, entry: model.py:build}]\n"
        f"history: {{enabled: true, path: '{db}'}}\n"
    )
    args = ["report", str(tmp_path / "probes.json"), "--config", str(tmp_path / "perfcheck.yml")]
    assert cli_main([*args, "--out", str(tmp_path / "out")]) == 1  # the demo fails
    with contextlib.closing(open_store(db, create=False)) as conn:
        assert [r.head for r in trend(conn, "classifier", "graph_breaks", 10)] == [1]


def test_a_locked_history_store_is_a_message_and_the_review_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from perfcheck.cli.main import main as cli_main
    from perfcheck.schema import ProbeRun, Shard

    review = load_review(DEMO_RESULT)
    probes = ProbeRun(
        tool_version="0",
        shard=Shard(index=1, count=1),
        workload_set=[w.name for w in review.workloads],
        base=review.base,
        head=review.head,
        workloads=review.workloads,
    )
    (tmp_path / "probes.json").write_text(probes.model_dump_json())
    db = tmp_path / "history.sqlite"
    open_store(db).close()
    (tmp_path / "perfcheck.yml").write_text(
        "workloads: [{name: classifier, entry: model.py:build}]\n"
        f"history: {{enabled: true, path: '{db}'}}\n"
    )
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of writing
    try:
        args = ["report", str(tmp_path / "probes.json"), "--config", str(tmp_path / "perfcheck.yml")]
        assert cli_main([*args, "--out", str(tmp_path / "out")]) == 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert "in use by another process" in err and "nothing was recorded" in err and "Traceback" not in err
    assert load_review(tmp_path / "out" / "result.json").verdict == "fail"  # the review is not lost


@pytest.mark.e2e
def test_control_characters_in_recorded_names_are_shown_not_sent_to_the_terminal(
    tmp_path: Path, demo: Review
) -> None:
    """Issue 29: a result.json whose workload (and repository) name holds terminal escapes and a
    newline, recorded and shown by the real commands."""
    from conftest import perfcheck_cli

    hostile = "cls\x1b[2J\x1b]0;pwned\x07\x9b31m\r\nforged row"
    wl = demo.workloads[0].model_copy(update={"name": hostile})
    findings = [f.model_copy(update={"workload": hostile}) for f in demo.findings]
    result = tmp_path / "result.json"
    result.write_text(demo.model_copy(update={"workloads": [wl], "findings": findings}).model_dump_json())
    db = tmp_path / "h.sqlite"
    recorded = perfcheck_cli("history", "record", str(result), "--db", str(db), "--repo", "o/r\x1b[31m")
    assert recorded.returncode == 0, recorded.stderr
    for argv in ([], ["--workload", hostile]):
        done = perfcheck_cli("history", "--db", str(db), *argv)
        assert done.returncode == 0, done.stderr
        assert not [c for c in done.stdout if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]
        assert done.stdout.startswith("cls␛[2J␛]0;pwned␇\ufffd31m␍␊forged row · step_ms")
        assert "o/r␛[31m" in done.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("stored", [-1, -2, -5, -(2**31), LATEST + 1])
def test_a_store_at_a_version_perfcheck_never_wrote_is_a_message_and_left_alone(
    tmp_path: Path, stored: int
) -> None:
    """Issue 29: a negative user_version indexed the migrations from their end (IndexError, or the
    wrong steps run and written); the real commands refuse it before writing anything."""
    from conftest import perfcheck_cli

    path = tmp_path / "odd.sqlite"
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {stored}")
    raw.close()
    before = path.read_bytes()
    for argv in (["history", "--db", str(path)], ["history", "record", str(DEMO_RESULT), "--db", str(path)]):
        done = perfcheck_cli(*argv)
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.startswith(f"perfcheck history: {path}: history schema version {stored} ")
        assert "Traceback" not in done.stderr
    assert path.read_bytes() == before
