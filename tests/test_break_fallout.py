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
    assert _errors(result) == ["graph_break_added"] and result.summary.startswith("1 regression")
    assert "scaling.py:5" in render_comment(result)
