"""The rendered comment: a golden file for the recorded demo review, and hostile text made inert."""

from __future__ import annotations

import os
import re
from pathlib import Path

from perfcheck.core.render import MARKER, render_comment
from perfcheck.measures import GraphBreak, SourceLocation
from perfcheck.schema import Finding, Review, load_review

DATA = Path(__file__).parent / "data"
GOLDEN = Path(__file__).parent / "golden"


def test_demo_comment_matches_golden() -> None:
    # tests/data/README.md says how demo-result.json was recorded; set PERFCHECK_UPDATE_GOLDEN=1
    # to rewrite the golden file after an intended template change, then read the diff.
    rendered = render_comment(load_review(DATA / "demo-result.json"))
    golden = GOLDEN / "demo-comment.md"
    if os.environ.get("PERFCHECK_UPDATE_GOLDEN"):
        golden.write_text(rendered)
    assert rendered == golden.read_text()


def test_verdict_comes_first() -> None:
    rendered = render_comment(load_review(DATA / "demo-result.json"))
    first, title = rendered.splitlines()[:2]
    assert first == MARKER
    # One line per cause: the break with the slower steps it likely caused, and the IR change.
    assert title.startswith("### perfcheck ❌ 2 regressions")


HOSTILE = "@org/team <script>alert(1)</script> ``` [x](javascript:alert(1))"


def test_hostile_probe_output_renders_inert() -> None:
    review = load_review(DATA / "demo-result.json")
    location = SourceLocation(path="m.py", line=1, function="forward", code=HOSTILE)
    finding = Finding(
        category="graph_break_added",
        severity="error",
        workload="w",
        probe="compile",
        message=HOSTILE,
        location=location,
        evidence={"break_type": HOSTILE, "reason": HOSTILE + "\n```\n@evil"},
    )
    rendered = render_comment(review.model_copy(update={"findings": [finding]}))
    # Inside code blocks and spans GitHub shows text literally and notifies nobody; outside them
    # nothing may stay raw.
    prose = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1\s*$", "", rendered)
    prose = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", prose)
    assert "<script>" not in prose
    assert "@org" not in prose.replace("@<!-- -->", "@ ")
    assert not re.search(r"(?<!\\)\]\(javascript", prose)  # an escaped bracket opens no link
    # every fence that opens also closes, so nothing after the reason is swallowed
    assert not [ln for ln in prose.splitlines() if ln.startswith("```")]
    assert rendered.rstrip().splitlines()[-1].startswith("Environment:")


def test_a_pass_without_findings_says_so() -> None:
    review = load_review(DATA / "demo-result.json")
    quiet = review.model_copy(update={"findings": [], "verdict": "pass", "summary": "no regressions"})
    rendered = render_comment(quiet)
    assert "### perfcheck ✅ no regressions" in rendered
    assert "No findings" in rendered


def test_a_huge_review_is_capped_at_github_limit() -> None:
    review = load_review(DATA / "demo-result.json")
    gb = GraphBreak(break_type="x", reason="y" * 3000)
    many = [
        Finding(
            category="graph_break_added",
            severity="error",
            workload="w",
            probe="compile",
            message=f"break {i}",
            evidence={"break_type": "x", "reason": gb.reason},
        )
        for i in range(100)
    ]
    rendered = render_comment(review.model_copy(update={"findings": many}))
    assert len(rendered) <= 65536
    assert "result.json" in rendered.splitlines()[-1]


def test_custom_template_folder_overrides(tmp_path: Path) -> None:
    (tmp_path / "comment.md.j2").write_text("{{ marker }}\ncustom: {{ review.verdict }} {{ headline }}\n")
    rendered = render_comment(load_review(DATA / "demo-result.json"), tmp_path)
    assert rendered == f"{MARKER}\ncustom: fail 2 regressions\n"


def test_review_roundtrips(tmp_path: Path) -> None:
    review = load_review(DATA / "demo-result.json")
    assert Review.model_validate_json(review.model_dump_json()) == review


def test_a_rows_figures_are_values_with_units_formatted_in_one_place() -> None:
    """The timing probe's rows carry figures (value, unit), not text: the comment, the summaries
    and the HTML report print them through one formatter (perfcheck/core/markdown.py)."""
    from perfcheck.core.markdown import Figure, count, figure

    assert figure(Figure(1234.5678, "ms", 3)) == "1,234.568 ms"
    assert (
        figure(Figure(-12.0, "MB", signed=True)) == "-12 MB"
        and str(Figure(3.0, "MB", signed=True)) == "+3 MB"
    )
    assert (
        figure(Figure(2500.0, "/s")) == "2,500 /s"
        and figure(count(12.0)) == "12"
        and figure(count(2.5)) == "2.5"
    )
    from perfcheck.core.render import workload_rows

    review = load_review(DATA / "demo-result.json")
    rows = workload_rows(review.workloads[0])
    figures = [c for r in rows for c in (r.base, r.head) if isinstance(c, Figure)]
    assert {f.unit for f in figures} >= {"ms", "/s"}  # the step time and the throughput
    assert all(str(f) == figure(f) for f in figures)


def test_a_cell_of_two_values_is_formatted_in_the_same_place() -> None:
    """Copies with their bytes, fp32 against low-precision ops, opchecks passed, a graph's hash
    with its op count: two values a cell, each a Figure (or text), joined one of three ways."""
    import pytest

    from perfcheck.core.markdown import Compound, Figure, count, size

    assert [str(size(n)) for n in (512, 1536, 3 * 2**20, 5 * 2**30)] == [
        "512 B",
        "1.5 KB",
        "3.0 MB",
        "5.0 GB",
    ]
    assert str(Compound(count(3.0), size(1536))) == "3 (1.5 KB)"
    assert str(Compound(Figure(2, "fp32"), Figure(10, "bf16"), "slash")) == "2 fp32 / 10 bf16"
    assert str(Compound(Figure(3), Figure(4, "pass"), "of")) == "3 of 4 pass"
    assert str(Compound("8fa3010f17", Figure(1234, "ops"))) == "8fa3010f17 (1,234 ops)"
    with pytest.raises(ValueError, match="joins as one of paren, slash, of"):
        Compound(Figure(1), Figure(2), "dash")
    from perfcheck.core.render import workload_rows

    review = load_review(DATA / "demo-result.json")
    [ir] = [r for r in workload_rows(review.workloads[0]) if r.metric == "export IR"]
    assert isinstance(ir.head, Compound) and ir.head.then == Figure(5, "ops")
