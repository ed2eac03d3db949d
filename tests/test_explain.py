"""Measured findings name the structural findings of the same workload that explain them."""

from __future__ import annotations

from perfcheck.core.explain import explain
from perfcheck.core.matrix import resolve
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding


def _finding(category: str, message: str = "m", **kw: object) -> Finding:
    return Finding(category=category, severity="error", workload="net", probe="timing", message=message, **kw)  # type: ignore[arg-type]


def test_a_slower_step_beside_a_new_break_names_the_break_and_takes_its_cause() -> None:
    brk = _finding(
        "graph_break_added",
        location=SourceLocation(path="model.py", line=11, code='print("step")'),
        evidence={"break_type": "Failed to trace builtin operator `print`"},
    )
    slow = _finding("throughput_regression", message="step time +12 %")
    out = explain([brk, slow])
    assert out[0] == brk
    assert out[1].message == (
        "step time +12 %; likely from the new graph break at model.py:11 "
        "(Failed to trace builtin operator `print`)"
    )
    entry = resolve(out[1])
    assert entry is not None and entry.cause.startswith("the new graph break in this review")


def test_more_memory_beside_attention_that_left_sdpa_is_read_as_materialised_scores() -> None:
    ir = _finding("export_ir_changed", evidence={"reading": "sdpa lost"})
    memory = _finding("memory_regression", message="+1523 MB peak")
    [_, read] = explain([ir, memory])
    assert (
        "likely from the exported graph's change (sdpa lost: attention no longer runs through "
        "scaled_dot_product_attention)" in read.message
    )
    entry = resolve(read)
    assert entry is not None and "[batch, heads, sequence, sequence] attention scores" in entry.cause


def test_without_a_structural_finding_nothing_is_claimed() -> None:
    slow = _finding("throughput_regression", message="step time +12 %")
    crash = _finding("probe_crashed", message="the export probe crashed on head")
    assert explain([slow, crash]) == [slow, crash]
    entry = resolve(slow)
    assert entry is not None and "look for graph breaks" in entry.cause


def test_many_causes_are_counted_not_all_spelled_out() -> None:
    breaks = [
        _finding(
            "graph_break_added", location=SourceLocation(path="m.py", line=i), evidence={"break_type": "x"}
        )
        for i in range(5)
    ]
    [*_, slow] = explain([*breaks, _finding("compile_latency_regression", message="cold compile 3 → 5 s")])
    assert slow.message.endswith("; and 2 more") and len(slow.evidence["explained_by"].splitlines()) == 5


def test_an_ir_change_without_a_reading_is_named_by_its_ops() -> None:
    ir = _finding(
        "export_ir_changed", evidence={"op_diff": {"aten.gelu.default": [0, 1], "aten.relu.default": [1, 0]}}
    )
    [_, read] = explain([ir, _finding("throughput_regression", message="step time +40 %")])
    assert read.message == "step time +40 %; likely from the exported graph's change (relu → gelu)"


def test_export_failing_at_a_new_break_s_line_is_folded_under_it_and_nowhere_else() -> None:
    """torch.export failing at the line Dynamo breaks at is the break's (graph_break_added's
    ``folds``, at its line); one failing at another line, or beside a break the budget allows (a
    warning, no root), is counted on its own."""
    at = SourceLocation(path="model.py", line=23, code="if x.sum() > 0:")
    brk = _finding("graph_break_added", "Dynamo splits the graph here", location=at)
    failed = Finding(
        category="export_failed",
        severity="error",
        workload="net",
        probe="export",
        message="torch.export fails: GuardOnDataDependentSymNode",
        location=at,
        evidence={"error": "Could not guard on data-dependent expression Eq(u0, 1)\nmore"},
    )
    [folded] = explain([brk, failed])
    assert folded.message == (
        "Dynamo splits the graph here; tracing fails on it: torch.export fails at model.py:23 "
        "(shown here, not counted again)"
    )
    assert folded.evidence["follows"] == (
        "torch.export fails: GuardOnDataDependentSymNode: "
        "Could not guard on data-dependent expression Eq(u0, 1)"
    )
    elsewhere = failed.model_copy(update={"location": SourceLocation(path="model.py", line=30)})
    assert explain([brk, elsewhere]) == [brk, elsewhere]
    allowed = brk.model_copy(update={"severity": "warning"})
    assert explain([allowed, failed]) == [allowed, failed]
