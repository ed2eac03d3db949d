"""One cause, one headline (issue 42): a review's findings grouped by what caused them, in every
output. The recorded reviews are real ones (the H200's reviews of a transformers Llama switched
from SDPA to eager attention); the end-to-end test is a real review of real models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.bot.checks import annotations, title
from perfcheck.config import parse_config
from perfcheck.core.causes import by_cause, grouped
from perfcheck.core.explain import explain
from perfcheck.core.render import headline, render_comment
from perfcheck.core.reports import render_check_summary, render_html, render_job_summary
from perfcheck.measures import SourceLocation
from perfcheck.schema import SCHEMA_VERSION, ContractError, Finding, Review, load_review

DOCS = Path(__file__).resolve().parent.parent / "docs" / "data" / "h200" / "time-to-verdict"
# The default config's reviews of the Llama switched to eager attention, on the H200 (schema 3).
LLAMA = sorted(DOCS.glob("run-[5-7]/ttv/llama-switch-*-result.json"))


def _finding(category: str, workload: str = "net", severity: str = "error", **kw: object) -> Finding:
    probe = {"graph_break_added": "compile", "export_ir_changed": "export"}.get(category, "timing")
    return Finding(
        category=category,
        severity=severity,  # type: ignore[arg-type]
        workload=workload,
        probe=probe,
        message=kw.pop("message", category),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def _break(workload: str, line: int = 6) -> Finding:
    return _finding(
        "graph_break_added",
        workload,
        location=SourceLocation(path="model.py", line=line, code="print('mixing')"),
        evidence={"break_type": "Failed to trace builtin operator `print`"},
    )


def test_the_attention_switch_headlines_one_cause_with_its_effects() -> None:
    assert len(LLAMA) == 3
    for path in LLAMA:
        review = load_review(path)
        assert review.causes is None  # version 3: grouped when shown
        assert [f.severity for f in review.findings].count("error") == 3  # it read "3 regressions"
        [group] = [g for g in grouped(review) if g.state == "error"]
        assert [f.category for f in group.leads] == ["export_ir_changed"]
        assert {f.category for f in group.effects} == {
            "throughput_regression",
            "host_overhead_regression",
            "memory_regression",
        }
        said = headline(review)
        assert said.startswith(
            "1 cause: exported graph's change (sdpa lost: attention no longer runs through "
            "scaled_dot_product_attention) — step +1"
        )
        assert "+39 launches" in said and "peak memory +756 MB" in said
        assert title(review).startswith("perfcheck: 1 cause: exported graph's change")
        comment = render_comment(review)
        # One section: the IR change, its effects as rows, one likely cause, a verify command for
        # the cause and one for each effect whose own differs.
        assert "**1. Exported IR changed**" in comment and "**2." not in comment
        assert comment.count("Likely cause:") == 1
        assert "| Slower steps | llama | step +1" in comment and "| More peak memory | llama |" in comment
        # One command verifies all three effects: said once, for all of them.
        assert comment.count("--probes timing,profile`") == 1
        assert "- Slower steps, More host work per step, More peak memory: verify with `" in comment
        assert "likely from" not in comment  # the effects' rows say only their own words
        summary = render_check_summary(review)
        assert summary.count("\n1. **") == 1 and "\n2. **" not in summary
        assert "what it likely caused: Slower steps (step +1" in summary
        assert render_job_summary(review).count("Likely cause:") == 1
        html = render_html(review)
        assert html.count('class="finding ') == 1 and "<td>More host work per step</td>" in html


def test_a_cause_met_in_two_workloads_is_one_group_with_both_effects() -> None:
    findings = explain([_break("net"), _finding("throughput_regression", "net")])
    findings += explain([_break("twin"), _finding("compile_latency_regression", "twin")])
    groups = by_cause(findings)
    assert [(g.caused, g.leads, g.effects) for g in groups] == [(True, [0, 2], [1, 3])]
    review = _review(findings)
    [g] = grouped(review)
    assert g.workloads == ["net", "twin"] and g.state == "error"
    assert headline(review).startswith("1 cause: new graph break at model.py:6 (Failed to trace builtin")
    comment = render_comment(review)
    assert "· net, twin" in comment and "- the same in twin" in comment
    assert "| Slower steps | net |" in comment and "| Slower compile | twin |" in comment
    [note] = annotations(review)  # one per cause, at its line
    assert (note["path"], note["start_line"], note["annotation_level"]) == ("model.py", 6, "failure")
    assert "What it likely caused: Slower steps in net; Slower compile in twin" in note["message"]


def test_an_effect_goes_under_the_cause_its_likely_cause_names() -> None:
    """A slower step beside a new break and attention that left SDPA: the step's rules read SDPA
    first, so the comment's likely cause and its group agree, whatever the severities."""
    ir = _finding("export_ir_changed", severity="warning", evidence={"reading": "sdpa lost"})
    findings = explain([_break("net"), ir, _finding("throughput_regression")])
    groups = {g.leads[0]: g.effects for g in by_cause(findings)}
    assert groups == {1: [2], 0: []}  # the IR change (a warning) heads the error, the break stands apart
    # Alone when its workload has no cause; a measured finding never heads a group.
    [alone] = by_cause([_finding("memory_regression", "other")])
    assert not alone.caused and alone.title == "More peak memory"


def test_a_group_is_its_worst_open_finding() -> None:
    ir = _finding("export_ir_changed", severity="warning", evidence={"reading": "float64"})
    review = _review(explain([ir, _finding("throughput_regression")]))
    [g] = grouped(review)
    assert g.state == "error" and headline(review).startswith("1 cause: exported graph's change (float64)")
    ack = {"by": "octocat", "reason": "intended"}
    acked = review.model_copy(
        update={"findings": [f.model_copy(update={"ack": ack}) for f in review.findings]}
    )
    assert grouped(acked)[0].state == "acknowledged"


def test_result_json_holds_the_groups_and_refuses_forged_ones(tmp_path: Path) -> None:
    review = _review(
        explain([_break("net"), _finding("throughput_regression"), _finding("memory_regression", "b")])
    )
    doc = json.loads(review.model_dump_json())
    assert doc["schema_version"] == SCHEMA_VERSION == 4
    assert doc["causes"] == [
        {
            "title": "the new graph break at model.py:6 (Failed to trace builtin operator `print`)",
            "caused": True,
            "leads": [0],
            "effects": [1],
        },
        {"title": "More peak memory", "caused": False, "leads": [2], "effects": []},
    ]
    path = tmp_path / "result.json"
    for forged in ([0], [0, 1, 1], [0, 1, 5]):
        doc["causes"] = [{"title": "t", "caused": True, "leads": forged}]
        path.write_text(json.dumps(doc))
        with pytest.raises(ContractError, match="each of the 3 findings is to be in exactly one group"):
            load_review(path)


def _review(findings: list[Finding]) -> Review:
    return Review(
        tool_version="0",
        verdict="fail",
        summary="",
        base={"tree": "base"},
        head={"tree": "head"},
        workloads=[],
        findings=findings,
        causes=by_cause(findings),
    )


HELPER = """\
import torch
from torch import nn


def mix(x):
    {change}
    return x * torch.sigmoid(x)


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return mix(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net(16).to(device), (torch.randn(8, 16).to(device),)


def build_wide(device):
    torch.manual_seed(0)
    return Net(32).to(device), (torch.randn(8, 32).to(device),)
"""
TWO = "workloads:\n  - {name: net, entry: model.py:build}\n  - {name: wide, entry: model.py:build_wide}\n"


@pytest.mark.e2e
def test_a_break_one_helper_adds_in_two_workloads_headlines_one_cause(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(tmp_path / "base", {"model.py": HELPER.replace("{change}", "pass")})
    head = write_tree(tmp_path / "head", {"model.py": HELPER.replace("{change}", "print('mixing')")})
    config = parse_config(TWO + "compile: {backend: aot_eager, measure: 'off'}\n", "test-config.yml")
    result = review(base, head, config=config, probes=("compile",))
    breaks = [f for f in result.findings if f.category == "graph_break_added"]
    assert sorted(f.workload for f in breaks) == ["net", "wide"]  # one finding per workload, as measured
    assert result.causes is not None
    [group] = [g for g in grouped(result) if g.state == "error"]
    assert group.workloads == ["net", "wide"] and group.group.caused
    assert result.summary.startswith("1 cause: new graph break at model.py:6")
    comment = render_comment(result)
    assert comment.splitlines()[1].startswith("### perfcheck ❌ 1 cause: new graph break at model.py:6")
    assert "· net, wide" in comment
    assert len(annotations(result)) == 1
