"""The gate's own error rates (issue 41, part 1): A/A runs recorded with what decides them, the
analysis in perfcheck/core/noise.py, `perfcheck history noise`, the comment's footer, the plan's
budget warning and the HTML report's plot; and, marked e2e, two real A/A reviews.

The recorded reviews are built on tests/data/demo-result.json (a real `make demo` run), with the
estimates and outcomes each test needs in place of the demo's.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, model_tree

from perfcheck.bot import plan_flow
from perfcheck.cli.main import main
from perfcheck.config import parse_config
from perfcheck.core import history, noise
from perfcheck.core.history import HistoryError, aa_runs, noise_footer, open_store, record
from perfcheck.core.noise import Estimate, WorkloadRun
from perfcheck.core.render import render_comment
from perfcheck.core.reports import render_html
from perfcheck.measures import (
    CompileLatencyChange,
    Environment,
    MetricChange,
    TimingChange,
)
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.schema import Acknowledgement, Finding, Review, SideInfo, load_review

DEMO_RESULT = Path(__file__).parent / "data" / "demo-result.json"
SHA = "0123456789abcdef0123456789abcdef01234567"
EPYC = Environment(python="3.11.7", cpu="AMD EPYC 7B13", cpu_count=4)
EPYC_CLASS = "cpu:AMD EPYC 7B13, 4 cores"
H200 = Environment(python="3.11.7", gpu_name="NVIDIA H200", gpu_count=8, cpu="Intel Xeon", cpu_count=64)


@pytest.fixture(scope="module")
def demo() -> Review:
    return load_review(DEMO_RESULT)


def step(ratio: float, half: float = 0.01, budget: float = 2.3, decides: bool = True) -> MetricChange:
    low, high = ratio - half, ratio + half
    verdict = "fail" if (low - 1) * 100 > budget else "pass" if (high - 1) * 100 <= budget else "inconclusive"
    return MetricChange(
        base=1.0,
        head=ratio,
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        confidence=0.95,
        p_value=0.5,
        budget_pct=budget,
        verdict=verdict,  # type: ignore[arg-type]
        metric="step_ms",
        processes=3,
        decides=decides,
    )


def compile_change(ratio: float, measure: str = "wall") -> CompileLatencyChange:
    return CompileLatencyChange(
        base=1.0,
        head=ratio,
        ratio=ratio,
        ratio_low=ratio - 0.05,
        ratio_high=ratio + 0.05,
        confidence=0.95,
        p_value=0.5,
        budget_pct=20.0,
        verdict="pass",
        measure=measure,  # type: ignore[arg-type]
        pairs=3,
        warn=False,
    )


def aa_review(
    demo: Review,
    ratio: float = 1.0,
    *,
    half: float = 0.01,
    outcome: str = "pass",
    env: Environment = EPYC,
    head_sha: str = SHA,
    name: str = "classifier",
    compile_ratio: float | None = None,
) -> Review:
    """The demo's review as an A/A run of ``name`` whose timing gate estimated ``ratio``."""
    m = step(ratio, half)
    wl = demo.workloads[0].model_copy(
        update={
            "name": name,
            "timing": TimingChange(bound="cpu", metrics=[m], verdict=m.verdict),
            "compile_latency": compile_change(compile_ratio) if compile_ratio is not None else None,
        }
    )
    findings = []
    inconclusive = []
    if outcome == "fail":
        findings = [
            Finding(
                category="throughput_regression",
                severity="error",
                workload=name,
                probe="timing",
                message="slower",
            )
        ]
    elif outcome == "inconclusive":
        inconclusive = [f"{name}: step time straddles the 2.3 % budget after 9 process pairs"]
    verdict = "fail" if findings else "inconclusive" if inconclusive else "pass"
    return demo.model_copy(
        update={
            "base": SideInfo(tree="base", revision=SHA, environment=env),
            "head": SideInfo(tree="head", revision=head_sha, environment=env),
            "workloads": [wl],
            "findings": findings,
            "inconclusive": inconclusive,
            "verdict": verdict,
        }
    )


def store_of(tmp_path: Path, reviews: Sequence[Review], name: str = "h.sqlite") -> Path:
    path = tmp_path / name
    with contextlib.closing(open_store(path)) as conn:
        for day, r in enumerate(reviews, start=1):
            record(conn, r, repository="acme/m", pr=None, recorded_at=f"2026-03-{day:02d}T04:23:00Z")
    return path


# --- what one review says -----------------------------------------------------------------------


def test_an_aa_run_is_the_same_commit_or_the_same_folder(demo: Review) -> None:
    assert noise.is_aa(aa_review(demo))
    assert noise.is_aa(aa_review(demo, head_sha=SHA[:7].upper()))  # a pinned head, given short
    assert not noise.is_aa(aa_review(demo, head_sha="f" * 40))
    assert not noise.is_aa(demo)  # base and head are different folders, no commits known
    same = demo.model_copy(update={"head": SideInfo(tree="examples/demo/./base")})
    assert noise.is_aa(same)
    # A commit known on one side only: the folders decide.
    assert not noise.is_aa(demo.model_copy(update={"head": SideInfo(tree="x", revision=SHA)}))


def test_the_runner_class_is_the_device_and_its_name() -> None:
    assert noise.runner_class(H200) == "cuda:NVIDIA H200"
    assert noise.runner_class(EPYC) == EPYC_CLASS
    # A result written before the fingerprint counted cores, and one that named no CPU.
    assert noise.runner_class(Environment(python="3.11", cpu="AMD EPYC")) == "cpu:AMD EPYC"
    assert noise.runner_class(Environment(python="3.11", cpu_count=2)) == "cpu:unknown CPU, 2 cores"
    assert noise.runner_class(None) is None
    # One line, whatever the model string holds, and bounded.
    assert noise.runner_class(Environment(python="3", cpu="Intel\n  Xeon\t(R)")) == "cpu:Intel Xeon (R)"
    assert len(noise.runner_class(Environment(python="3", gpu_name="G" * 500)) or "") == 120


def test_the_review_runner_class_reads_the_probes_fingerprint_where_the_sides_have_none(demo: Review) -> None:
    assert noise.review_runner_class(aa_review(demo, env=H200)) == "cuda:NVIDIA H200"
    assert noise.review_runner_class(demo) == "cpu:AMD EPYC"  # from its probes' fingerprints
    bare = demo.model_copy(update={"workloads": []})
    assert noise.review_runner_class(bare) is None


def test_a_workloads_outcome_is_what_the_review_said_of_it(demo: Review) -> None:
    outcome = noise.workload_outcome
    for said in ("pass", "fail", "inconclusive"):
        r = aa_review(demo, outcome=said)
        assert outcome(r, r.workloads[0]) == said
    # An acknowledged error and a warning fail nothing.
    failed = aa_review(demo, outcome="fail")
    acked = failed.findings[0].model_copy(update={"ack": Acknowledgement(by="config", reason="known")})
    warned = failed.findings[0].model_copy(update={"severity": "warning"})
    for f in (acked, warned):
        r = failed.model_copy(update={"findings": [f]})
        assert outcome(r, r.workloads[0]) == "pass"
    # A probe's reason counts; another workload's does not, even one whose name starts the same.
    r = aa_review(demo)
    mine = r.model_copy(update={"inconclusive": ["classifier/compile: base could not be probed"]})
    assert outcome(mine, mine.workloads[0]) == "inconclusive"
    theirs = r.model_copy(update={"inconclusive": ["classifier/b/timing: x", "classifier2: y"]})
    assert outcome(theirs, theirs.workloads[0]) == "pass"


def test_the_deciding_estimates_are_the_gates(demo: Review) -> None:
    r = aa_review(demo, 1.02, compile_ratio=0.9)
    wl = r.workloads[0]
    assert noise.deciding_estimates(wl) == [
        Estimate("step_ms", 1.02, 1.02 - 0.01, 1.02 + 0.01, 2.3),
        Estimate("compile_wall", 0.9, 0.9 - 0.05, 0.9 + 0.05, 20.0),
    ]
    context = step(1.5, decides=False)  # reported, not deciding: left out
    counted = wl.model_copy(
        update={
            "timing": TimingChange(bound="host", metrics=[context], verdict="pass"),
            "compile_latency": compile_change(1.01, "callgrind"),
        }
    )
    assert [e.metric for e in noise.deciding_estimates(counted)] == ["compile_instructions"]
    assert noise.deciding_estimates(wl.model_copy(update={"timing": None, "compile_latency": None})) == []


# --- over many runs -----------------------------------------------------------------------------


def run(
    n: int,
    pct: float,
    outcome: str = "pass",
    klass: str = EPYC_CLASS,
    workload: str = "mlp",
    half: float = 0.01,
) -> WorkloadRun:
    r = 1 + pct / 100
    return WorkloadRun(
        review_id=n,
        recorded_at=f"2026-03-{n:02d}T00:00:00+00:00",
        runner_class=klass,
        workload=workload,
        outcome=outcome,  # type: ignore[arg-type]
        estimates=(Estimate("step_ms", r, r - half, r + half, 2.3),),
    )


def test_summaries_count_false_alarms_and_inconclusives_over_the_last_runs() -> None:
    runs = [run(n, 0.5) for n in range(1, 26)]
    runs[0] = run(1, 9.0, "fail")  # the oldest: outside --last 20
    runs[10] = run(11, 4.0, "fail")
    runs[20] = run(21, -3.0, "inconclusive")
    runs.append(run(26, 1.0, klass="cuda:NVIDIA H200"))
    (cpu, cuda) = noise.summarise(runs, last=20)
    assert (cpu.runner_class, cpu.workload, cpu.runs, cpu.failed, cpu.inconclusive) == (
        EPYC_CLASS,
        "mlp",
        20,
        1,
        1,
    )
    assert (cpu.first, cpu.last) == ("2026-03-06T00:00:00+00:00", "2026-03-25T00:00:00+00:00")
    (spread,) = cpu.spreads
    assert spread.label == "step time" and spread.runs == 20
    assert spread.median_pct == pytest.approx(0.5)
    # Nearest rank: of 20 runs, the 19th smallest |Δ| (3.0), not the largest (4.0).
    assert (spread.p95_pct, spread.max_pct) == (pytest.approx(3.0), pytest.approx(4.0))
    assert spread.median_high_pct == pytest.approx(1.5)
    assert cuda.runs == 1 and cuda.failed == 0
    assert noise.summarise([]) == []


def test_a_budget_tighter_than_the_noise_is_named_with_its_figure() -> None:
    noisy = noise.summarise([run(n, pct) for n, pct in enumerate([0.5, -1.0, 3.6, 1.2], start=1)])
    (warning,) = noise.budget_warnings(noisy)
    assert warning == (
        f"budgets.max_throughput_regression_pct 2.3 % is within this runner's A/A noise (mlp on "
        f"{EPYC_CLASS}): p95 |Δ| 3.6 % over 4 runs; expect false alarms"
    )
    # The config's budget, where given, is the one judged; a looser one is quiet.
    assert noise.budget_warnings(noisy, {"step_ms": 5.0}) == []
    # Steady estimates whose intervals reach past the budget: an unchanged tree is left undecided.
    wide = noise.summarise([run(n, pct, half=0.03) for n, pct in enumerate([0.2, -0.3, 0.4, 0.1], start=1)])
    (undecided,) = noise.budget_warnings(wide)
    assert undecided == (
        f"budgets.max_throughput_regression_pct 2.3 % is under the upper end of this runner's A/A "
        f"interval (mlp on {EPYC_CLASS}): median +3.1 % over 4 runs; expect inconclusive reviews"
    )
    # Two runs say too little to warn.
    assert noise.budget_warnings(noise.summarise([run(1, 9.0), run(2, 9.0)])) == []


def test_config_budgets_name_every_metric() -> None:
    budgets = noise.config_budgets(parse_config("budgets: {max_throughput_regression_pct: 1}", "c").budgets)
    assert budgets == {
        "step_ms": 1.0,
        "device_ms": 1.0,
        "host_ms": 10.0,
        "compile_wall": 20.0,
        "compile_instructions": 10.0,
    }


def test_the_footer_gives_the_reviewed_workloads_on_this_runner() -> None:
    runs = [run(1, 0.5), run(2, 1.5, "inconclusive"), run(3, 0.2, workload="other")]
    runs.append(run(4, 9.0, "fail", klass="cuda:NVIDIA H200"))
    lines = noise.footer(noise.summarise(runs), EPYC_CLASS, ["mlp", "unmeasured"])
    assert lines == [
        f"A/A on this runner ({EPYC_CLASS}), last 2 runs of mlp: 0 failed, 1 inconclusive "
        "· p95 |Δ| step time 1.5 %"
    ]
    assert noise.footer(noise.summarise(runs), "cpu:elsewhere", ["mlp"]) == []


# --- the store ----------------------------------------------------------------------------------


def test_reviews_are_recorded_with_their_runner_class_and_aa_runs_read_back(
    tmp_path: Path, demo: Review
) -> None:
    reviews = [
        aa_review(demo, 1.004, compile_ratio=1.02),
        aa_review(demo, 1.05, outcome="fail"),
        aa_review(demo, 1.0, head_sha="f" * 40),  # a PR's review: recorded, no A/A run
        aa_review(demo, 0.99, env=H200, outcome="inconclusive"),
    ]
    path = store_of(tmp_path, reviews)
    with contextlib.closing(open_store(path, create=False)) as conn:
        rows = conn.execute("SELECT runner_class, aa FROM reviews ORDER BY id").fetchall()
        assert [tuple(r) for r in rows] == [
            (EPYC_CLASS, 1),
            (EPYC_CLASS, 1),
            (EPYC_CLASS, 0),
            ("cuda:NVIDIA H200", 1),
        ]
        runs = aa_runs(conn)
        assert [(r.review_id, r.runner_class, r.outcome) for r in runs] == [
            (4, "cuda:NVIDIA H200", "inconclusive"),
            (2, EPYC_CLASS, "fail"),
            (1, EPYC_CLASS, "pass"),
        ]
        assert runs[2].estimates == (
            Estimate("compile_wall", 1.02, 1.02 - 0.05, 1.02 + 0.05, 20.0),
            Estimate("step_ms", 1.004, 1.004 - 0.01, 1.004 + 0.01, 2.3),
        )
        assert [r.review_id for r in aa_runs(conn, runner_class=EPYC_CLASS)] == [2, 1]
        assert aa_runs(conn, workload="other") == []
    assert [r.review_id for r in history.stored_aa_runs(path, "cuda:NVIDIA H200")] == [4]
    assert history.stored_aa_runs(tmp_path / "none-yet.sqlite") == []


# The schema as perfcheck wrote it at version 2, spelled out so that a later edit of the code's own
# migrations cannot make this test pass against a store no user has.
V2_SQL = """
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY, recorded_at TEXT NOT NULL, pr INTEGER, verdict TEXT NOT NULL,
    base_revision TEXT, head_revision TEXT, tool_version TEXT NOT NULL, repository TEXT
);
CREATE TABLE findings (
    id INTEGER PRIMARY KEY, review_id INTEGER NOT NULL REFERENCES reviews(id),
    category TEXT NOT NULL, severity TEXT NOT NULL, workload TEXT NOT NULL, message TEXT NOT NULL,
    path TEXT, line INTEGER, break_type TEXT
);
CREATE INDEX findings_by_review ON findings(review_id);
CREATE TABLE workload_metrics (
    review_id INTEGER NOT NULL REFERENCES reviews(id), workload TEXT NOT NULL,
    side TEXT NOT NULL CHECK (side IN ('base', 'head')), metric TEXT NOT NULL, value REAL NOT NULL,
    PRIMARY KEY (review_id, workload, side, metric)
);
CREATE INDEX metrics_by_series ON workload_metrics(workload, metric);
INSERT INTO reviews VALUES (1, '2026-01-01T09:00:00+00:00', NULL, 'pass', 'aaaa', 'aaaa', '0.1.0', 'acme/m');
INSERT INTO workload_metrics VALUES (1, 'mlp', 'base', 'step_ms', 1.5), (1, 'mlp', 'head', 'step_ms', 1.6);
PRAGMA user_version = 2;
"""


def test_a_v2_store_migrates_in_place_and_its_reviews_stay_out_of_the_aa_runs(
    tmp_path: Path, demo: Review
) -> None:
    path = tmp_path / "v2.sqlite"
    raw = sqlite3.connect(path)
    raw.executescript(V2_SQL)
    raw.close()
    with contextlib.closing(open_store(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == history.LATEST == 4
        old = dict(conn.execute("SELECT * FROM reviews WHERE id = 1").fetchone())
        assert (old["repository"], old["runner_class"], old["aa"]) == ("acme/m", None, 0)
        assert [r.head for r in history.trend(conn, "mlp", "step_ms", 5)] == [1.6]
        # Its base and head were one commit, but what decided it was not kept: it counts as no run.
        assert aa_runs(conn) == []
        record(conn, aa_review(demo), repository=None, pr=None)
        assert [r.review_id for r in aa_runs(conn)] == [2]


def test_a_row_no_perfcheck_wrote_is_refused_not_counted(tmp_path: Path, demo: Review) -> None:
    path = store_of(tmp_path, [aa_review(demo)])
    raw = sqlite3.connect(path)
    # A REAL column takes text it cannot read as a number, and text sorts above any number in
    # SQLite, so `ratio > 0` lets it through: the reader must check.
    raw.execute("UPDATE deciding_estimates SET ratio = 'lots'")
    raw.commit()
    raw.close()
    with pytest.raises(HistoryError, match="an estimate no perfcheck wrote"):
        history.stored_aa_runs(path)
    warned: list[str] = []
    assert noise_footer(path, aa_review(demo), warned.append) == []
    assert warned and "left out of the comment" in warned[0]
    assert main(["history", "noise", "--db", str(path)]) == 2
    # A name longer than any perfcheck records is no name of its.
    raw = sqlite3.connect(path)
    raw.execute("UPDATE deciding_estimates SET ratio = 1.0")
    raw.execute("UPDATE workload_outcomes SET workload = ?", ("w" * 5000,))
    raw.commit()
    raw.close()
    with pytest.raises(HistoryError, match="an A/A row no perfcheck wrote"):
        history.stored_aa_runs(path)


# --- the command line, the comment, the plan and the report -------------------------------------


def test_history_noise_prints_a_table_per_runner_class(
    tmp_path: Path, demo: Review, capsys: pytest.CaptureFixture[str]
) -> None:
    ratios = [1.004, 0.991, 1.036, 1.012]
    reviews = [aa_review(demo, r, compile_ratio=1.0 + i / 100) for i, r in enumerate(ratios)]
    reviews.append(aa_review(demo, 1.2, outcome="fail", env=H200, name="llama"))
    db = store_of(tmp_path, reviews)
    assert main(["history", "noise", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{EPYC_CLASS} · 2026-03-01 … 2026-03-04" in out
    assert "cuda:NVIDIA H200 · 2026-03-05 … 2026-03-05" in out
    table = out[out.index(EPYC_CLASS + " ·") :]
    lines = table.splitlines()
    assert lines[2].split() == [
        "workload",
        "runs",
        "false",
        "alarms",
        "inconclusive",
        "metric",
        "median",
        "|Δ|",
        "p95",
        "|Δ|",
        "max",
        "|Δ|",
        "upper",
        "end",
        "budget",
    ]
    figures = ["0.90", "%", "3.60", "%", "3.60", "%", "+1.40", "%", "2.3", "%"]
    assert lines[4].split() == ["classifier", "4", "0", "0", "step", "time", *figures]
    assert lines[5].split()[:2] == ["compile", "time"]
    assert "Budgets tighter than this noise:" in out
    assert "- budgets.max_throughput_regression_pct 2.3 % is within this runner's A/A noise" in out

    assert main(["history", "noise", "--db", str(db), "--runner-class", "cuda:NVIDIA H200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (only,) = doc["summaries"]
    assert (only["workload"], only["runs"], only["failed"]) == ("llama", 1, 1)
    assert only["spreads"][0]["label"] == "step time" and doc["last"] == 30 and doc["warnings"] == []

    assert main(["history", "--db", str(db), "noise", "--workload", "llama", "--last", "1"]) == 0
    out = capsys.readouterr().out
    assert "llama" in out and "classifier" not in out


def test_history_noise_without_aa_runs_or_a_store_says_so(
    tmp_path: Path, demo: Review, capsys: pytest.CaptureFixture[str]
) -> None:
    db = store_of(tmp_path, [demo])  # a review of two different trees only
    assert main(["history", "noise", "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"no A/A runs in {db} yet: record reviews of the default branch")
    assert main(["history", "noise", "--db", str(db), "--workload", "mlp"]) == 0
    assert "for --workload mlp yet" in capsys.readouterr().out
    assert main(["history", "noise", "--db", str(tmp_path / "missing.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfcheck history: ") and "no history database there" in err
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database " * 100)
    assert main(["history", "noise", "--db", str(junk)]) == 2
    assert "not a usable history database" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["history", "noise", "--help"])
    assert exit_info.value.code == 0
    assert "usage: perfcheck history noise" in capsys.readouterr().out


def test_the_comment_footer_is_escaped_and_absent_without_lines(demo: Review) -> None:
    plain = render_comment(demo)
    assert "A/A on this runner" not in plain
    lines = ["A/A on this runner (cpu:x), last 2 runs of @team: 0 failed, 1 inconclusive · p95 |Δ| 1 %"]
    footer = render_comment(demo, noise=lines).split("Environment: ", 1)[1]
    assert "\n\nA/A on this runner (cpu:x), last 2 runs of @<!-- -->team" in footer
    assert "p95 \\|Δ\\| 1 %" in footer
    two = render_comment(demo, noise=[*lines, "another"])
    assert "\n- another\n" in two


def test_report_gives_the_footer_from_the_aa_runs_before_this_review(tmp_path: Path, demo: Review) -> None:
    from perfcheck.review import report
    from perfcheck.schema import ProbeRun, Shard

    db = store_of(tmp_path, [aa_review(demo, 1.01), aa_review(demo, 1.002, outcome="inconclusive")])
    config = parse_config(
        "workloads: [{name: classifier, entry: model.py:build}]\n"
        f"history: {{enabled: true, path: '{db}'}}\n",
        "perfcheck.yml",
    )
    pr = aa_review(demo, 1.3, head_sha="f" * 40, outcome="fail")
    probes = ProbeRun(
        tool_version="0",
        shard=Shard(index=1, count=1),
        workload_set=["classifier"],
        base=SideInfo(tree="base", revision=SHA),
        head=SideInfo(tree="head", revision="f" * 40),
        workloads=[w.model_copy(update={"timing": None, "compile_latency": None}) for w in pr.workloads],
    )
    review, comment = report([("probes.json", probes)], config, tmp_path / "out")
    assert noise.review_runner_class(review) == "cpu:AMD EPYC"  # the demo's probes: no SideInfo env
    # The store's runs are of EPYC_CLASS, this review's runner is the demo's own: no line.
    assert "A/A on this runner" not in comment
    on_epyc = probes.model_copy(update={"base": pr.base, "head": pr.head})
    _, comment = report([("probes.json", on_epyc)], config, tmp_path / "out")
    assert (
        f"A/A on this runner ({EPYC_CLASS}), last 2 runs of classifier: 0 failed, 1 inconclusive" in comment
    )
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="aa-noise"' in html and f"A/A step time on {EPYC_CLASS}" in html


def test_plan_warns_where_a_budget_is_tighter_than_the_aa_noise(tmp_path: Path, demo: Review) -> None:
    db = store_of(tmp_path, [aa_review(demo, r) for r in (1.004, 0.991, 1.036, 1.012)])
    settings = f"history: {{enabled: true, path: '{db}'}}\n"
    config = parse_config(settings, "perfcheck.yml")
    (warning,) = plan_flow.budget_warnings(config, None)
    assert warning.startswith("budgets.max_throughput_regression_pct 2.3 % is within this runner's A/A noise")
    assert warning.endswith("p95 |Δ| 3.6 % over 4 runs; expect false alarms")
    assert plan_flow.budget_warnings(config, "cpu") == [warning]
    assert plan_flow.budget_warnings(config, "cuda") == []  # no A/A runs on a GPU
    looser = parse_config(settings + "budgets: {max_throughput_regression_pct: 5}", "perfcheck.yml")
    assert plan_flow.budget_warnings(looser, None) == []
    assert plan_flow.budget_warnings(parse_config(f"history: {{path: '{db}'}}", "c"), None) == []
    missing = parse_config(f"history: {{enabled: true, path: '{tmp_path / 'none.sqlite'}'}}", "c")
    assert plan_flow.budget_warnings(missing, None) == []

    # The plan itself: the decision stands, the warning is logged.
    event = tmp_path / "event.json"
    opened = json.loads((Path(__file__).parent / "data" / "webhooks" / "pull_request.json").read_text())[0]
    event.write_text(json.dumps(opened))
    (tmp_path / "perfcheck.yml").write_text(settings)
    from perfcheck.bot.settings import GitHubSettings

    s = plan_flow.settings_from(
        "pull_request_target", event, None, False, None, GitHubSettings.from_environ({}), tmp_path
    )
    logged: list[str] = []
    assert plan_flow.run(s, None, logged.append, lambda _: None) == plan_flow.EXIT_PLANNED
    assert logged == [f"warning: {warning}"]


def test_the_html_report_plots_the_aa_runs_escaped(demo: Review) -> None:
    hostile = "<script>x</script> https://evil.example"
    runs = [run(1, 0.5), run(2, -1.2, workload=hostile), run(3, 3.0, "fail")]
    html = render_html(demo, aa_runs=runs)
    section = html[html.index('id="aa-noise"') :]
    assert f"A/A step time on {EPYC_CLASS}" in section
    assert "<script>" not in html and "https://evil" not in html
    assert "budget +2.3 %" in section and "failed: a false alarm" in section
    assert section.count("<circle") == 3 and "3 A/A runs, oldest first" in section
    assert 'id="aa-noise"' not in render_html(demo)


# --- real reviews ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_two_real_aa_reviews_are_counted_and_shown(
    tmp_path: Path, review: ReviewFn, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's shared compile cache off: with it no compile is cold, and none is measured.
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    tree = model_tree(tmp_path / "tree")
    db = tmp_path / "history.sqlite"
    config = fast_config(
        "  measure: wall\n  runs: 2\n"
        "timing: {processes: 2, max_processes: 4, extra_processes: 2}\n"
        f"history: {{enabled: true, path: '{db}'}}\n"
    )
    first = review(tree, tree, config)
    assert noise.is_aa(first)
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "A/A on this runner" not in comment  # nothing recorded before the first
    second = review(tree, tree, config)
    klass = noise.review_runner_class(second)
    assert klass is not None and klass.startswith("cpu:") and klass.endswith(" cores")
    comment = (tmp_path / "out" / "comment.md").read_text()
    failed = int(first.verdict == "fail")
    inconclusive = int(first.verdict == "inconclusive")
    assert (
        f"A/A on this runner ({klass}), last 1 run of net: {failed} failed, {inconclusive} inconclusive"
        in (comment.replace("\\", ""))
    )
    assert "p95 |Δ| step time " in comment.replace("\\", "")

    assert main(["history", "noise", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{klass} · " in out
    row = next(line for line in out.splitlines() if line.startswith("net "))
    counts = [str(sum(r.verdict == v for r in (first, second))) for v in ("fail", "inconclusive")]
    assert row.split()[:4] == ["net", "2", *counts] and "step time" in row
    assert "compile time" in out  # compile latency was measured by wall clock
    html = (tmp_path / "out" / "report.html").read_text()
    assert f"A/A step time on {klass}" in html


def test_publish_gives_the_footer_from_the_restored_store(tmp_path: Path, demo: Review) -> None:
    from dataclasses import dataclass, field

    from perfcheck.bot.gateway import DryRunGitHub
    from perfcheck.bot.publish_flow import PublishSettings, publish

    @dataclass
    class Posted(DryRunGitHub):
        bodies: list[str] = field(default_factory=list)

        def create_comment(self, number: int, body: str, dedupe_key: str) -> int:
            self.bodies.append(body)
            return super().create_comment(number, body, dedupe_key)

    db = store_of(tmp_path, [aa_review(demo, 1.01), aa_review(demo, 1.02, outcome="fail")])
    pr = aa_review(demo, 1.3, head_sha="f" * 40)

    def published(history: str) -> str:
        settings = PublishSettings(
            repository="acme/m",
            sha="f" * 40,
            pr_number=2,
            status="completed",
            review=pr,
            config=parse_config(f"history: {history}", "perfcheck.yml"),
            templates=None,
            summary=None,
            planned_by=None,
            no_comment=False,
            dry_run=True,
            run_url=None,
            step_summary=None,
        )
        port = Posted("acme/m", out=io.StringIO())  # the API calls it would make, printed
        logged: list[str] = []
        assert publish(settings, port, logged.append, logged.append) == 0
        (body,) = port.bodies
        return body

    said = f"A/A on this runner ({EPYC_CLASS}), last 2 runs of classifier: 1 failed, 0 inconclusive"
    assert said in published(f"{{enabled: true, path: '{db}'}}")
    assert "A/A on this runner" not in published(f"{{enabled: false, path: '{db}'}}")
