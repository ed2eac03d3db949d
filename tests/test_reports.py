"""The check summary, job summary and HTML report: golden files of the recorded demo review, charts,
hostile probe text made inert in each format, and `perfcheck html`."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from perfcheck.cli.html_command import add_html_parser
from perfcheck.core import charts, history
from perfcheck.core.probes.profile import KernelStat, TraceMetrics
from perfcheck.core.reports import render_check_summary, render_html, render_job_summary
from perfcheck.measures import MetricChange, Side, SourceLocation, TimingChange, TimingMetrics, TimingProcess
from perfcheck.schema import Finding, ProbeResult, Review, WorkloadReview, load_review

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"
HOSTILE = "@org/team <script>alert(1)</script> ``` [x](javascript:alert(1)) https://evil.example/x"
URL = re.compile(r"(?i)(https?|ftp)://")


def demo() -> Review:
    return load_review(DATA / "demo-result.json")


RENDERERS: dict[str, Callable[[Review], str]] = {
    "demo-check-summary.md": render_check_summary,
    "demo-job-summary.md": render_job_summary,
    "demo-report.html": render_html,
}


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_demo_renders_match_golden(name: str) -> None:
    # PERFCHECK_UPDATE_GOLDEN=1 rewrites the golden files after an intended change; read the diff.
    rendered = RENDERERS[name](demo())
    golden = GOLDEN / name
    if os.environ.get("PERFCHECK_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


def test_the_overview_has_the_columns_of_the_probes_that_ran_and_old_templates_read_them_by_name(
    tmp_path: Path,
) -> None:
    review = demo()
    # Without its export results the review's overview has no export column ...
    wl = review.workloads[0]
    no_export = wl.model_copy(
        update={
            "base": [r for r in wl.base if r.probe != "export"],
            "head": [r for r in wl.head if r.probe != "export"],
        }
    )
    trimmed = review.model_copy(update={"workloads": [no_export]})
    summary = render_check_summary(trimmed)
    assert "| workload | step time | Δ (95 % CI) | graphs / breaks | recompiles | findings |" in summary
    # ... and a project's template written for the fixed columns of earlier versions still renders,
    # the missing probe's cell as "—".
    (tmp_path / "check-summary.md.j2").write_text(
        "{% for wl in workloads %}{% set s = wl.summary %}"
        "{{ s.workload }}: {{ s.step }} / {{ s.delta }} / {{ s.graphs }} / "
        "{{ s.recompiles }} / {{ s.export }}"
        "{% endfor %}"
    )
    assert render_check_summary(trimmed, tmp_path) == (
        "classifier: 0.573 ms → 0.796 ms / +38.8 % (+29.5 … +48.8) / 1/0 → 2/1 / 1 → 2 / —"
    )
    assert render_check_summary(review, tmp_path).endswith("/ 1 → 2 / changed")


def test_check_summary_has_one_row_per_workload_and_a_line_per_finding() -> None:
    review = demo()
    rendered = render_check_summary(review)
    rows = [ln for ln in rendered.splitlines() if ln.startswith("| ") and "workload" not in ln]
    assert len(rows) == len(review.workloads)
    assert rendered.startswith("## perfcheck ❌ 2 regressions")
    assert "1. **New graph break** in `model.py:17`" in rendered


def _hostile(review: Review) -> Review:
    finding = Finding(
        category="graph_break_added",
        severity="error",
        workload=HOSTILE,
        probe="compile",
        message=HOSTILE,
        location=SourceLocation(path="m.py", line=1, function=HOSTILE, code=HOSTILE),
        evidence={"break_type": HOSTILE, "reason": HOSTILE + "\n```\n@evil <script>"},
    )
    return review.model_copy(update={"findings": [finding], "summary": HOSTILE, "inconclusive": [HOSTILE]})


def _prose(markdown: str) -> str:
    """What GitHub would render as markup: the Markdown minus fenced blocks and code spans."""
    prose = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1\s*$", "", markdown)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", prose)


@pytest.mark.parametrize("render", [render_check_summary, render_job_summary])
def test_hostile_text_is_inert_in_markdown(render: Callable[[Review], str]) -> None:
    rendered = render(_hostile(demo()))
    prose = _prose(rendered)
    assert "<script>" not in prose
    assert "@org" not in prose.replace("@<!-- -->", "@ ")
    assert "@evil" not in prose
    assert not re.search(r"(?<!\\)\]\(javascript", prose)
    # every fence that opens closes, so the environment line is still text after the hostile reason
    assert not [ln for ln in prose.splitlines() if ln.startswith("```")]
    assert any(ln.startswith("Environment:") for ln in rendered.splitlines()[-4:])


def test_hostile_text_is_inert_in_html() -> None:
    rendered = render_html(_hostile(demo()))
    assert "<script" not in rendered.lower()
    assert "&lt;script&gt;" in rendered
    assert not URL.search(rendered)
    assert "javascript:" not in rendered.replace("[x](javascript:alert(1))", "")
    assert rendered.count("<pre>") == rendered.count("</pre>")
    assert rendered.rstrip().endswith("</html>")


def test_html_is_self_contained() -> None:
    rendered = render_html(demo())
    assert not URL.search(rendered)
    assert "<script" not in rendered.lower()
    # nothing a browser would fetch: no external sources, stylesheets, imports or CSS urls
    assert not re.search(r"(?i)\b(src|srcset|xmlns)=|<link\b|@import|url\(", rendered)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', rendered))
    # the demo's graph break, drawn from the review when there is no history store
    assert "graph breaks by workload and break type" in rendered


def test_a_project_template_folder_overrides_each_report(tmp_path: Path) -> None:
    for name in ("check-summary.md.j2", "job-summary.md.j2", "report.html.j2"):
        (tmp_path / name).write_text(f"{name}: {{{{ headline }}}} {{{{ review.summary }}}}\n")
    assert render_check_summary(demo(), tmp_path) == "check-summary.md.j2: 2 regressions 3 regressions\n"
    assert render_job_summary(demo(), tmp_path).startswith("job-summary.md.j2: ")
    html = render_html(_hostile(demo()), template_dir=tmp_path)
    assert html.startswith("report.html.j2: ") and "&lt;script&gt;" in html and not URL.search(html)


def test_check_summary_is_capped_at_github_limit() -> None:
    review = _hostile(demo())
    many = [review.findings[0].model_copy(update={"message": f"break {i} " + "y" * 900}) for i in range(200)]
    rendered = render_check_summary(review.model_copy(update={"findings": many}))
    assert len(rendered) <= 65535
    assert rendered.rstrip().endswith("the HTML report.")


# ---------------------------------------------------------------- charts


def _timing(side: Side, workload: str, ms: list[float]) -> ProbeResult:
    processes = [
        TimingProcess(
            step_ms=x,
            median_step_ms=x,
            steps=10,
            first=True,
            ready_s=1.0,
            warmup_steps=5,
            warmup_converged=True,
        )
        for x in ms
    ]
    metrics = TimingMetrics(
        mode="compiled",
        backend="inductor",
        steps_per_round=10,
        batch_size=32,
        memory_kind="peak_rss",
        processes=processes,
    )
    return _measured("timing", side, workload, metrics)


def _measured(probe: str, side: Side, workload: str, metrics: BaseModel) -> ProbeResult:
    measured = metrics.model_dump(mode="json")
    return ProbeResult(probe=probe, workload=workload, side=side, status="ok", duration_s=1, metrics=measured)


def _profile(
    side: Side, workload: str, kernels: dict[str, float], split: tuple[float, float, float]
) -> ProbeResult:
    trace = TraceMetrics(
        steps=2,
        kernels=[KernelStat(name=n, kind="compute", count=2, total_us=us) for n, us in kernels.items()],
        idle_pct=split[0],
        compute_pct=split[1],
        non_compute_pct=split[2],
    )
    return _measured("profile", side, workload, trace)


def untimed(review: Review) -> Review:
    """The demo review without its timing probe: the charts' tests bring their own timings."""
    workloads = [
        wl.model_copy(
            update={
                "base": [r for r in wl.base if r.probe != "timing"],
                "head": [r for r in wl.head if r.probe != "timing"],
                "timing": None,
            }
        )
        for wl in review.workloads
    ]
    return review.model_copy(update={"workloads": workloads})


def timed_review(name: str) -> Review:
    step = MetricChange(
        metric="step_ms",
        base=1.1,
        head=1.3,
        ratio=1.3 / 1.1,
        ratio_low=1.1,
        ratio_high=1.25,
        confidence=0.95,
        p_value=0.001,
        processes=3,
        budget_pct=2.3,
        verdict="fail",
        decides=True,
    )
    change = TimingChange(bound="cpu", metrics=[step], verdict="fail")
    workload = WorkloadReview(
        name=name,
        base=[
            _timing("base", name, [1.1, 1.1, 1.1]),
            _profile("base", name, {"void k<float>(float*)": 100.0, "gone_kernel": 40.0}, (10, 80, 10)),
        ],
        head=[
            _timing("head", name, [1.3, 1.3, 1.3]),
            _profile("head", name, {"void k<float>(float*)": 160.0, "new <b>kernel</b>": 20.0}, (25, 60, 15)),
        ],
        timing=change,
    )
    plain = untimed(demo())
    return plain.model_copy(update={"workloads": [*plain.workloads, workload]})


def test_mermaid_chart_is_none_without_timing() -> None:
    assert charts.mermaid_step_chart(untimed(demo())) is None


def test_mermaid_chart_plots_base_and_head_medians() -> None:
    chart = charts.mermaid_step_chart(timed_review("mlp"))
    assert chart is not None
    assert chart.splitlines() == [
        "```mermaid",
        "xychart-beta",
        '  title "step time (ms; device time on GPUs): bars base, line head"',
        '  x-axis ["mlp"]',
        '  y-axis "ms" 0 --> 1.43',
        "  bar [1.1]",
        "  line [1.3]",
        "```",
    ]


def test_a_workload_name_cannot_break_the_mermaid_block() -> None:
    chart = charts.mermaid_step_chart(timed_review('a"] ``` \n%%{init: {}}%% <b>@org/team</b>'))
    assert chart is not None
    lines = chart.splitlines()
    assert len(lines) == 8 and lines[0] == "```mermaid" and lines[-1] == "```"
    axis = lines[3]
    assert axis.count('"') == 2 and axis.count("[") == 1 and axis.count("]") == 1
    assert not set(axis[len("  x-axis [") : -1].strip('"')) & set('`%{}<>@"[]')


def test_kernel_deltas_come_from_the_profile_traces_per_step() -> None:
    deltas = charts.kernel_deltas(timed_review("mlp"))["mlp"]
    assert [(d.name, d.status, d.delta_us) for d in deltas] == [
        ("void k<float>(float*)", "changed", 30.0),
        ("gone_kernel", "removed", -20.0),
        ("new <b>kernel</b>", "added", 10.0),
    ]


def test_kernel_deltas_prefer_the_findings_evidence_and_skip_malformed_rows() -> None:
    evidence = {
        "changes": [
            {"name": "mm", "base_us": 5.0, "head_us": 9.0},
            {"name": "bad", "base_us": "x", "head_us": None},
            "not a row",
            {"base_us": 1.0},
        ]
    }
    finding = Finding(
        category="kernel_mix_changed",
        severity="warning",
        workload="mlp",
        probe="profile",
        message="m",
        evidence=evidence,
    )
    review = timed_review("mlp")
    review = review.model_copy(update={"findings": [*review.findings, finding]})
    assert [(d.name, d.delta_us) for d in charts.kernel_deltas(review)["mlp"]] == [("mm", 4.0)]


def test_svg_text_is_escaped() -> None:
    svg = charts.svg_kernel_deltas([charts.KernelDelta("<script>x</script>", None, 3.0)])
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    heat = charts.svg_heatmap({("<w>", 'a"b'): 2})
    assert "<w>" not in heat and "&lt;w&gt;" in heat and "a&quot;b" in heat
    assert not URL.search(svg + heat)


def test_break_counts_from_the_review_group_by_workload_and_type() -> None:
    review = demo()
    first = review.findings[0]
    untyped = first.model_copy(update={"evidence": {}})
    review = review.model_copy(update={"findings": [*review.findings, first, untyped]})
    assert charts.break_counts(review) == {
        ("classifier", "Unsupported Tensor.item() call with capture_scalar_outputs=False"): 2,
        ("classifier", charts.UNKNOWN_BREAK): 1,
    }


def test_html_draws_kernel_and_breakdown_charts_for_a_profiled_workload() -> None:
    rendered = render_html(timed_review("mlp"))
    assert "mlp: per-kernel time change per step" in rendered
    assert "mlp: GPU time breakdown" in rendered
    assert "new &lt;b&gt;kernel&lt;/b&gt;" in rendered and "<b>kernel" not in rendered
    assert ">25.0 %<" in rendered  # head's idle share, labelled inside its segment


def test_job_summary_carries_the_mermaid_chart() -> None:
    rendered = render_job_summary(timed_review("mlp"))
    assert "```mermaid\nxychart-beta\n" in rendered


# ---------------------------------------------------------------- perfcheck html


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="perfcheck")
    add_html_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_html_command_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "r" / "report.html"
    assert _run(["html", str(DATA / "demo-result.json"), "--out", str(out)]) == 0
    assert out.read_text() == render_html(demo())


def test_html_command_uses_the_history_store_for_the_heatmap(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    conn = history.open_store(db)
    for _ in range(3):
        history.record(conn, demo(), repository="o/r", pr=1)
    conn.close()
    out = tmp_path / "report.html"
    assert _run(["html", str(DATA / "demo-result.json"), "--out", str(out), "--history", str(db)]) == 0
    # three recorded reviews, one new break each: the cell says 3, where the review alone says 1
    assert 'text-anchor="middle" fill="#fff">3</text>' in out.read_text()


def test_html_command_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "result.json"
    bad.write_text("{}")
    assert _run(["html", str(bad)]) == 2
    assert _run(["html", str(DATA / "demo-result.json"), "--history", str(tmp_path / "none.sqlite")]) == 2
    assert "no history database" in capsys.readouterr().err


CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # none of them may be in HTML text


@pytest.mark.e2e
def test_control_characters_in_recorded_names_are_shown_in_html(tmp_path: Path) -> None:
    """Issue 29: kernel names of a profile and a workload name recorded in the history store, each
    with terminal escapes, as `perfcheck html --history` (the real command) draws them."""
    from conftest import perfcheck_cli

    hostile = "w\x1b[2J\x1b]0;pwned\x07\x9b31m<i>"
    review = timed_review(hostile)
    kernels = {f"k{hostile}": 1.0}
    wl = review.workloads[-1]
    head = [r if r.probe != "profile" else _profile("head", hostile, kernels, (25, 60, 15)) for r in wl.head]
    break_ = review.findings[0].model_copy(update={"workload": hostile, "evidence": {"break_type": hostile}})
    review = review.model_copy(
        update={
            "workloads": [*review.workloads[:-1], wl.model_copy(update={"head": head})],
            "findings": [break_],
        }
    )
    result = tmp_path / "result.json"
    result.write_text(review.model_dump_json())
    db = tmp_path / "history.sqlite"
    conn = history.open_store(db)
    history.record(conn, review, repository="o/r", pr=1)
    conn.close()
    out = tmp_path / "report.html"
    done = perfcheck_cli("html", str(result), "--out", str(out), "--history", str(db))
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert not CONTROLS.search(html)
    assert "<title>kw␛[2J␛]0;pwned␇" in html  # the kernel of the profile
    assert "w␛[2J␛]0;pwned␇" in html and "&lt;i&gt;" in html and "<i>" not in html
