"""A missing module is a setup fault, told as one (issue 54): one finding that names the module
and where the tree imports it, for every probe it stopped, with no model fault read into it; on
both sides a setup error (exit 2), found before any probe where the entry file imports it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, write_tree

from perfcheck.config import parse_config
from perfcheck.preflight import SetupError, check_workloads
from perfcheck.review import broken_workloads

MODEL = """\
import torch
from torch import nn
{top}

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        {lazy}
        return torch.relu(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""

MISSING = "perfcheck_test_not_installed"


def _tree(root: Path, top: str = "", lazy: str = "pass") -> Path:
    return write_tree(root, {"model.py": MODEL.replace("{top}", top).replace("{lazy}", lazy)})


def test_a_module_missing_on_both_sides_is_one_setup_finding(review: ReviewFn, tmp_path: Path) -> None:
    """Imported inside forward, so only the probes can tell: the compile, export and timing probes
    all stop on it, and none of their own findings is made (no "data-dependent control flow"
    from export's error)."""
    lazy = f"import {MISSING}"
    base, head = _tree(tmp_path / "base", lazy=lazy), _tree(tmp_path / "head", lazy=lazy)
    result = review(base, head, config=fast_config(), probes=("compile", "export", "timing"))
    [fault] = result.findings
    assert fault.category == "module_missing" and fault.evidence["sides"] == ["base", "head"]
    assert fault.location is not None and fault.location.code == lazy and fault.location.path == "model.py"
    assert f"`{MISSING}`" in fault.message and "not the pull request" in fault.message
    assert set(str(fault.evidence["stops"]).split(", ")) == {"compile", "export", "timing"}
    assert result.verdict == "inconclusive"
    [why] = broken_workloads(result)  # the CLI's exit 2
    assert MISSING in why and "model.py:11" in why


def test_a_module_only_head_imports_is_one_regression_at_its_import(review: ReviewFn, tmp_path: Path) -> None:
    base = _tree(tmp_path / "base")
    head = _tree(tmp_path / "head", lazy=f"import {MISSING}")
    result = review(base, head, config=fast_config(), probes=("compile", "export"))
    [fault] = result.findings
    assert (fault.category, fault.severity, fault.evidence["sides"]) == ("module_missing", "error", ["head"])
    assert fault.message.startswith(f"head imports `{MISSING}` (imported at model.py:11)")
    assert result.verdict == "fail" and not broken_workloads(result)


def test_a_top_level_import_missing_on_both_sides_is_refused_before_any_probe(tmp_path: Path) -> None:
    top = f"import {MISSING}"
    base, head = _tree(tmp_path / "base", top=top), _tree(tmp_path / "head", top=top)
    config = parse_config("workloads:\n  - name: net\n    entry: model.py:build\n", "perfcheck.yml")
    with pytest.raises(SetupError, match=rf"model.py:3 imports '{MISSING}', which is not installed"):
        check_workloads(config.workloads, "perfcheck.yml", base, head)
    # Guarded by a try (optional), on one side only, or under another interpreter: the probes tell.
    guarded = f"try:\n    import {MISSING}\nexcept ImportError:\n    pass"
    check_workloads(config.workloads, "perfcheck.yml", _tree(tmp_path / "b2", top=guarded), head)
    check_workloads(config.workloads, "perfcheck.yml", _tree(tmp_path / "b3"), head)
    check_workloads(config.workloads, "perfcheck.yml", base, head, same_interpreter=False)
