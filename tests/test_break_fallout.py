"""A break's fallout is folded under it (issue 42, item 4): one break seen from a package's frame
and from the tree's line that reaches it is one break, at the tree's line; a break Dynamo takes
only because an earlier break left code to a resume function sits under that break; torch.export
failing at the line of a new data-dependent break is that break's, shown under it.

Each review is real (aot_eager on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics
from perfcheck.schema import Review

# A small "library" outside the reviewed tree, imported from a folder on PYTHONPATH as from a site
# folder of installed packages. Its function breaks the graph on a data-dependent value.
LIBRARY = """\
import torch


def rescale(x):
    s = x.abs().max().item()
    return x / s
"""

USES_LIBRARY = """\
import torch
from torch import nn

import scaling


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        {change}
        return self.fc2(h)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def _errors(result: Review) -> list[str]:
    return [f.category for f in result.findings if f.severity == "error" and f.ack is None]


def test_a_break_in_a_library_reached_from_the_tree_is_one_break_at_the_tree_s_line(
    review: ReviewFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dynamo takes the library's break twice: in `Net.forward`, which it splits at the call, and
    in the library's function compiled as a frame of its own, where no line of the tree is on the
    stack. One break: at the tree's line, the library's line beneath it."""
    monkeypatch.setenv("PYTHONPATH", str(write_tree(tmp_path / "site", {"scaling.py": LIBRARY})))
    base = write_tree(tmp_path / "base", {"model.py": USES_LIBRARY.replace("{change}", "h = h * 1")})
    head = write_tree(
        tmp_path / "head", {"model.py": USES_LIBRARY.replace("{change}", "h = scaling.rescale(h)")}
    )
    result = review(base, head, probes=("compile",))
    breaks = [f for f in result.findings if f.category.startswith("graph_break")]
    assert [f.category for f in breaks] == ["graph_break_added"], [f.message for f in breaks]
    [brk] = breaks
    assert brk.location is not None
    assert (brk.location.path, brk.location.code) == ("model.py", "h = scaling.rescale(h)")
    assert brk.evidence["origin"] == "scaling.py:5"
    assert "(in scaling.py:5, reached from here)" in brk.message
    assert _errors(result) == ["graph_break_added"] and result.summary.startswith(
        "1 cause: new graph break at model.py:"
    )
    assert "scaling.py:5" in render_comment(result)


# Two output heads taken in turn, step by step: a schedule kept in a Python counter on the module.
ALTERNATING = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.head0 = nn.Linear(16, 4)
        self.head1 = nn.Linear(16, 4)
        self.step = 0

    def forward(self, x):
        k = self.step % 2
        self.step += 1
        h = torch.relu(self.body(x))
        {change}
        return getattr(self, f"head{k}")(h)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def test_a_break_dynamo_takes_only_in_the_code_after_a_new_break_is_that_break_s(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Base compiles `forward` whole: `k` is a constant in it (Dynamo guards on the counter), so
    `f"head{k}"` is a constant string. Head prints after `k` is made: the code after the print is
    a resume function with `k` as an argument, which Dynamo, recompiling it for the next step's
    `k`, makes a dynamic int, and the f-string over it breaks (Dynamo then runs that code
    eagerly). A second break at an unchanged line, there only because of the print: one
    regression, the print, with the other under it."""
    base = write_tree(tmp_path / "base", {"model.py": ALTERNATING.replace("{change}", "h = h * 1")})
    head = write_tree(tmp_path / "head", {"model.py": ALTERNATING.replace("{change}", 'print("step")')})
    result = review(base, head, probes=("compile",))
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == 'print("step")'
    assert "(and 1 break that follows from it, not counted)" in brk.message
    line = ALTERNATING.splitlines().index('        return getattr(self, f"head{k}")(h)') + 1
    assert brk.evidence["fallout_breaks"].startswith(f"model.py:{line}: ")
    assert f"while recompiling the code after model.py:{brk.location.line}" in brk.evidence["fallout_breaks"]
    assert result.summary.startswith("1 cause: new graph break at model.py:")
    # Dynamo's own record of it: taken recompiling the print's resume function, never on a first compile.
    head_breaks = result.workloads[0].head[0].metrics_as(CompileMetrics).graph_breaks
    [fallout] = [gb for gb in head_breaks if gb.location and gb.location.line == line]
    assert fallout.recompiling_after is not None and fallout.recompiling_after.line == brk.location.line
    assert fallout.fell_back
    assert "Breaks Dynamo took only while recompiling the code after this break" in render_comment(result)


# A residual stack of blocks; tests splice a change into `Net.forward` after the blocks.
BLOCKS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        {change}
        return self.out(x)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""

BRANCH = "if x.sum() > 0:\n            x = x * 2"
WHERE = "x = torch.where(x.sum() > 0, x * 2, x)"


def _blocks(root: Path, change: str) -> Path:
    return write_tree(root, {"model.py": BLOCKS.replace("{change}", change)})


def test_export_failing_at_a_new_data_dependent_break_is_shown_under_the_break(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Head branches on a tensor's value: Dynamo breaks the graph at the `if`, and torch.export
    fails at the same line on the same construct. One regression, the break, with the export
    failure under it; the check still fails."""
    base = _blocks(tmp_path / "base", WHERE)
    head = _blocks(tmp_path / "head", BRANCH)
    result = review(base, head, probes=("compile", "export"))
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == "if x.sum() > 0:"
    assert brk.evidence["break_type"] == "Data-dependent branching"
    folded = f"torch.export fails at model.py:{brk.location.line} (shown here, not counted again)"
    assert folded in brk.message
    assert brk.evidence["follows"].startswith("torch.export fails: GuardOnDataDependentSymNode")
    assert result.verdict == "fail" and result.summary.startswith("1 cause: new graph break at model.py:")
    comment = render_comment(result)
    assert "What fails at this line because of it" in comment and "GuardOnDataDependentSymNode" in comment
    # The export probe's own result still says it failed: the table shows it.
    [export] = [r for r in result.workloads[0].head if r.probe == "export"]
    assert export.status == "failed"


def test_a_head_that_removes_a_data_dependent_break_passes_saying_both_fixes(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Forward: base branches on a tensor's value, head uses torch.where. The removed break and
    the export that works again are both said, as notes, and the check passes."""
    base = _blocks(tmp_path / "base", BRANCH)
    head = _blocks(tmp_path / "head", WHERE)
    result = review(base, head, probes=("compile", "export"))
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert {(f.category, f.severity) for f in result.findings} == {
        ("graph_break_removed", "info"),
        ("export_fixed", "info"),
    }
    for f in result.findings:
        assert f.location is not None and f.location.code == "if x.sum() > 0:"
