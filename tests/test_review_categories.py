"""Every finding category of the compile and export probes, produced by real torch on real code.

Each test writes a base and a head tree that differ the way a PR would, runs a real review
(one worker process per probe and side) and checks the finding, its location and the verdict.
aot_eager keeps these fast on a CPU; test_inductor.py covers the default backend.
"""

from __future__ import annotations

from pathlib import Path

from conftest import DEMO, ReviewFn, fast_config, model_tree, write_tree

from perfcheck.measures import CompileMetrics
from perfcheck.schema import Finding, Review


def only(review: Review, category: str) -> list[Finding]:
    return [f for f in review.findings if f.category == category]


def test_demo_head_adds_a_graph_break_at_the_item_line_and_changes_the_ir(review: ReviewFn) -> None:
    result = review(DEMO / "base", DEMO / "head", probes=("compile", "export"))  # what it checks
    [gb] = only(result, "graph_break_added")
    assert gb.location is not None
    where = (gb.location.path, gb.location.line, gb.location.function)
    assert where == ("model.py", 17, "Classifier.forward")
    assert "h.abs().max().item()" in (gb.location.code or "")
    assert "Tensor.item()" in gb.evidence["break_type"]
    assert gb.severity == "error"
    [ir] = only(result, "export_ir_changed")
    assert ir.evidence["op_diff"] == {"aten.gelu.default": [0, 1], "aten.relu.default": [1, 0]}
    assert "+%gelu" in ir.evidence["diff"]
    assert result.verdict == "fail"
    # The break's resume function recompiles for the second batch size too: same cause, no finding.
    assert not only(result, "recompile")


def test_removing_a_graph_break_is_reported_and_passes(review: ReviewFn) -> None:
    result = review(DEMO / "head", DEMO / "base", probes=("compile",))
    [removed] = only(result, "graph_break_removed")
    assert removed.severity == "info"
    assert removed.location is not None and removed.location.line == 17
    assert result.verdict == "pass"


def test_a_moved_graph_break_is_not_a_new_one(review: ReviewFn, tmp_path: Path) -> None:
    # A print of a constant breaks the graph without guarding on a tensor's value: with
    # `.item()` in it, which guard fails first on the resized batch (size or value) can differ
    # between processes, a recompile-reporting flake that is not what this test is about.
    base = model_tree(tmp_path / "base", "print('scale')")
    head = model_tree(tmp_path / "head", "# a comment line added above\n        print('scale')")
    result = review(base, head, probes=("compile",))
    assert result.workloads[0].head[0].metrics_as(CompileMetrics).graph_break_count == 1
    assert not only(result, "graph_break_added")
    assert result.verdict == "pass"


def test_graph_breaks_within_budget_warn_without_failing(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "print('activations', h.shape)")
    result = review(
        base, head, config=fast_config("budgets:\n  max_new_graph_breaks: 1"), probes=("compile",)
    )
    [gb] = only(result, "graph_break_added")
    assert gb.severity == "warning"
    assert gb.location is not None and gb.location.code == "print('activations', h.shape)"
    assert result.verdict == "pass"


def test_a_python_counter_in_forward_recompiles_every_call(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "self.calls += 1\n        h = h * self.calls")
    result = review(base, head, probes=("compile",))
    findings = only(result, "recompile")
    assert findings, result.findings
    assert any("self.calls" in f.evidence["reason"] for f in findings)
    assert result.verdict == "fail"


def test_a_denied_op_in_the_exported_graph(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = torch.nn.functional.dropout(h, p=0.1, training=True)")
    config = fast_config("export:\n  deny_ops: [aten.native_dropout.default]")
    result = review(base, head, config=config, probes=("export",))
    [denied] = only(result, "export_op_denied")
    assert denied.evidence["op"] == "aten.native_dropout.default"
    assert only(result, "export_ir_changed")
    assert result.verdict == "fail"


def test_an_allow_list_rejects_ops_outside_it(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = torch.sigmoid(h)")
    allow = "[aten.permute.default, aten.addmm.default, aten.relu.default]"
    result = review(base, head, config=fast_config(f"export:\n  allow_ops: {allow}"), probes=("export",))
    assert [f.evidence["op"] for f in only(result, "export_op_denied")] == ["aten.sigmoid.default"]


def test_data_dependent_control_flow_fails_export_at_the_user_line(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "if h.sum() > 0:\n            h = h * 2")
    result = review(base, head, probes=("export",))
    [failed] = only(result, "export_failed")
    assert failed.severity == "error"
    assert failed.location is not None and failed.location.path == "model.py"
    assert failed.location.code == "if h.sum() > 0:"
    assert result.verdict == "fail"


def test_a_segfault_becomes_probe_crashed_and_other_workloads_still_run(
    review: ReviewFn, tmp_path: Path
) -> None:
    crash = "import ctypes\n\n\ndef crash(device):\n    ctypes.string_at(0)\n"
    fine = "from model import build\n\n\ndef crash(device):\n    return build(device)\n"
    base = write_tree(model_tree(tmp_path / "base"), {"crash.py": fine})
    head = write_tree(model_tree(tmp_path / "head"), {"crash.py": crash})
    config = fast_config().model_copy(
        update={
            "workloads": [
                *fast_config().workloads,
                fast_config().workloads[0].model_copy(update={"name": "crashy", "entry": "crash.py:crash"}),
            ]
        }
    )
    result = review(base, head, config=config, probes=("export",))
    [crashed] = [f for f in only(result, "probe_crashed") if f.evidence["side"] == "head"]
    assert crashed.workload == "crashy" and crashed.severity == "error"
    assert "SIGSEGV" in crashed.evidence["detail"]
    net = next(w for w in result.workloads if w.name == "net")
    assert [r.status for r in net.base + net.head] == ["ok", "ok"]


def test_a_workload_that_exits_is_a_crash_not_a_lost_result(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    (head / "model.py").write_text(
        (head / "model.py")
        .read_text()
        .replace("def build(device):\n", "def build(device):\n    raise SystemExit(0)\n")
    )
    result = review(base, head, probes=("export",))
    [crashed] = only(result, "probe_crashed")
    assert "SystemExit" in crashed.evidence["detail"]


def test_a_hanging_workload_becomes_probe_timeout(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    (head / "model.py").write_text(
        (head / "model.py")
        .read_text()
        .replace("def build(device):\n", "def build(device):\n    import time\n    time.sleep(3600)\n")
    )
    # Long enough for base's export from the fork server on a loaded machine (about a second),
    # short enough that the suite does not wait long on the head that never returns.
    result = review(base, head, config=fast_config(timeout=10), probes=("export",))
    [timeout] = only(result, "probe_timeout")
    assert timeout.severity == "error"
    assert "10 s" in timeout.evidence["detail"]
    assert result.verdict == "fail"


def test_a_workload_that_fails_to_import_is_a_clear_finding(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    (head / "model.py").write_text(
        "import torch\nimport not_a_real_module  # noqa\n" + (head / "model.py").read_text()
    )
    result = review(base, head, probes=("export",))
    # A missing module is a setup fault, told as one (perfcheck/core/setup_faults.py), not a crash.
    [missing] = only(result, "module_missing")
    assert missing.severity == "error" and missing.evidence["module"] == "not_a_real_module"
    assert missing.location is not None and (missing.location.path, missing.location.line) == ("model.py", 2)
    assert "Traceback" not in missing.message


def test_a_workload_that_raises_names_the_error_and_line(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    (head / "model.py").write_text(
        (head / "model.py")
        .read_text()
        .replace(
            "def build(device):\n", "def build(device):\n    raise ValueError('no such dataset shard')\n"
        )
    )
    result = review(base, head, probes=("export",))
    [crashed] = only(result, "probe_crashed")
    assert "ValueError: no such dataset shard" in crashed.evidence["detail"]
    assert "workload 'net'" in crashed.evidence["detail"]


def test_a_base_that_cannot_be_probed_makes_the_review_inconclusive(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    (base / "model.py").write_text(
        (base / "model.py")
        .read_text()
        .replace("def build(device):\n", "def build(device):\n    raise RuntimeError('broken base')\n")
    )
    result = review(base, head, probes=("export",))
    [crashed] = only(result, "probe_crashed")
    assert crashed.severity == "warning" and crashed.evidence["side"] == "base"
    assert result.verdict == "inconclusive"


def test_builtin_workloads_need_no_config(review: ReviewFn, tmp_path: Path) -> None:
    from perfcheck.config import Config

    tree = write_tree(tmp_path / "repo", {"README.md": "no perfcheck.yml here\n"})
    config = Config().model_copy(update={"compile": fast_config().compile})
    # structure only: identical timings may honestly end inconclusive on a busy CPU
    result = review(tree, tree, config=config, probes=("compile", "export"))
    assert [w.name for w in result.workloads] == ["mlp-tiny"]
    assert result.verdict == "pass" and not result.findings
