"""One change reads as one cause on real code (issue 54): a break is one event however many frames
of its stack Dynamo reports it from; what exists only because a break split a function (the frames
it gave up, the code after it, their recompiles and recompile-limit hits) is its effect; breaks
reached through one line the change made are one cause at that line.

Each test is a real review of small real models (aot_eager on the CPU), forward and reversed where
both directions say something."""

from __future__ import annotations

from pathlib import Path

from conftest import ReviewFn, write_tree

from perfcheck.core.causes import by_cause
from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics
from perfcheck.schema import Review

# A helper two user frames call into (Block.forward, then gather, through a generator that Dynamo
# cannot rebuild around a break): a break in `check` makes Dynamo give up `gather` as well, and it
# writes that down with gather's own line, as if a second break were there.
THROUGH_A_GENERATOR = """\
import torch
from torch import nn


def check(h):
    {change}
    return h


def gather(parts):
    return sum(check(p) for p in parts)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return gather([h, x])


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        x = self.block(x)
        return self.out(x)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def _errors(result: Review) -> list[str]:
    return [f.category for f in result.findings if f.severity == "error" and f.ack is None]


def _line(text: str, code: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), start=1) if line.strip() == code)


def test_a_break_in_a_helper_called_through_two_user_frames_is_one_finding(
    review: ReviewFn, tmp_path: Path
) -> None:
    """The print's one break, with the frames that call into it beneath; Dynamo's note that it
    gave `gather` up is that break's, not a second one at gather's line. Reversed (the print
    removed), one removed break."""
    base = write_tree(tmp_path / "base", {"model.py": THROUGH_A_GENERATOR.replace("{change}", "h = h * 1")})
    head_text = THROUGH_A_GENERATOR.replace("{change}", 'print("checking")')
    head = write_tree(tmp_path / "head", {"model.py": head_text})
    result = review(base, head, probes=("compile",))
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == 'print("checking")'
    assert result.summary.startswith("1 cause: new graph break at model.py:6")
    # The frames that call into it, outermost first, and the frame Dynamo gave up for it.
    stack = str(brk.evidence["stack"]).splitlines()
    assert [line.split()[1] for line in stack] == ["Block.forward:", "gather:", "check:"]
    assert brk.evidence["gave_up"] == ["model.py::gather"]
    assert "gave up compiling `gather`" in brk.message
    assert "How the code reaches it" in render_comment(result)
    # Dynamo's own record: the break is one, at the print, with its callers.
    head_metrics = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert [gb.location.line for gb in head_metrics.graph_breaks if gb.location] == [6]
    [gb] = head_metrics.graph_breaks
    assert [c.line for c in gb.callers] == [
        _line(head_text, "return gather([h, x])"),
        _line(head_text, "return sum(check(p) for p in parts)"),
    ]

    reversed_ = review(head, base, probes=("compile",))
    assert reversed_.verdict == "pass"
    assert [(f.category, f.location.line if f.location else None) for f in reversed_.findings] == [
        ("graph_break_removed", 6)
    ]


# A backend probe as model code writes it: a cached import that fails (the package is not
# installed), asked inside a `try` of a method with work before it. Dynamo cannot resume inside the
# `try`: it compiles `_stages` up to the last point it can resume from and runs the rest eagerly,
# and its explain lists that point (the `try:` line) as a break of its own.
CUT_SHORT = """\
import functools

import torch
from torch import nn


@functools.cache
def _load():
    try:
        from a_package_nobody_installed import fast_kernel
    except ImportError:
        return None
    return fast_kernel


def usable():
    return _load() is not None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def _stages(self, h):
        h = h.sin() + 1
        while True:
            parts = []
            try:
                for i in range(2):
                    x = h[i : i + 1]
                    parts.append({use})
            except RuntimeError:
                continue
            break
        return torch.cat(parts)

    def forward(self, x):
        return self._stages(self.fc(x)).relu()


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def test_a_frame_compiled_only_up_to_a_break_it_cannot_resume_from_is_that_break_s_effect(
    review: ReviewFn, tmp_path: Path
) -> None:
    """One break (the import that fails), not a second one at the `try:` where Dynamo stopped
    compiling `_stages`: that frame is named as given up beneath the break, which is placed at the
    line the change made (it calls into the helper that breaks)."""
    base = write_tree(tmp_path / "base", {"model.py": CUT_SHORT.replace("{use}", "x * 2")})
    head_text = CUT_SHORT.replace("{use}", "x * 2 if usable() else x")
    head = write_tree(tmp_path / "head", {"model.py": head_text})
    result = review(base, head, probes=("compile",))
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == "parts.append(x * 2 if usable() else x)"
    assert brk.evidence["break_type"] == "Import failure"
    assert "model.py::Net._stages" in brk.evidence["gave_up"], brk.evidence
    head_metrics = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert head_metrics is not None
    assert {gb.break_type for gb in head_metrics.graph_breaks} == {"Import failure"}

    reversed_ = review(head, base, probes=("compile",))
    assert reversed_.verdict == "pass"
    assert [f.category for f in reversed_.findings] == ["graph_break_removed"], reversed_.findings


# A validation helper the change does not touch, which branches in Python on two tensor values; the
# change adds the one call to it.
CHECKS = """\
import torch


def validate(lo, hi):
    if (lo < 0).any():
        raise ValueError("lo must be >= 0")
    if (hi < lo).any():
        raise ValueError("hi must be >= lo")
    return lo, hi
"""

JITTER = """\
import torch
from torch import nn

from checks import validate


class Jitter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.register_buffer("lo", torch.zeros(16))
        self.register_buffer("hi", torch.ones(16))

    def forward(self, x):
        lo, hi = {bounds}
        noise = lo + (hi - lo) * torch.rand_like(x)
        return self.fc(x + noise)


def build(device):
    torch.manual_seed(0)
    return Jitter().to(device), (torch.randn(8, 16).to(device),)
"""


def test_two_breaks_reached_through_one_added_line_are_one_cause_at_that_line(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Both `if`s of the helper break; both breaks' stacks pass through the one line the change
    added: one cause, at that line, the two break lines beneath. Reversed (the call removed), one
    removed break at the line the change removed, and a pass."""
    base = write_tree(
        tmp_path / "base", {"checks.py": CHECKS, "model.py": JITTER.replace("{bounds}", "self.lo, self.hi")}
    )
    head = write_tree(
        tmp_path / "head",
        {"checks.py": CHECKS, "model.py": JITTER.replace("{bounds}", "validate(self.lo, self.hi)")},
    )
    result = review(base, head, probes=("compile",))
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [cause] = result.findings
    assert cause.location is not None and cause.location.code == "lo, hi = validate(self.lo, self.hi)"
    assert cause.evidence["break_at"] == [
        f"checks.py:{_line(CHECKS, 'if (lo < 0).any():')}",
        f"checks.py:{_line(CHECKS, 'if (hi < lo).any():')}",
    ]
    assert "at 2 places in the code this changed line calls" in cause.message
    assert result.summary.startswith("1 cause: new graph break at model.py:15")
    assert len(by_cause(result.findings)) == 1
    assert "The breaks this line reaches" in render_comment(result)
    # The probe's record keeps both breaks at their own lines, each marked with the changed line.
    head_metrics = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert {gb.location.path for gb in head_metrics.graph_breaks if gb.location} == {"checks.py"}
    assert {gb.changed_at.line for gb in head_metrics.graph_breaks if gb.changed_at} == {15}

    reversed_ = review(head, base, probes=("compile",))
    assert reversed_.verdict == "pass"
    [removed] = reversed_.findings
    assert removed.category == "graph_break_removed"
    assert removed.location is not None and removed.location.code == "lo, hi = validate(self.lo, self.hi)"


# Twelve blocks, each with its own Python int, which Dynamo specialises on: compiled inside one
# graph of Net.forward they cost nothing; compiled as frames of their own, each block's value is a
# recompile of the same code, until the recompile limit (8) stops it.
BLOCKS = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        {block_change}
        return h * (self.idx + 1) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(i) for i in range(12))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
            {net_change}
        return self.out(x)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def _blocks(root: Path, block_change: str = "h = h * 1", net_change: str = "x = x + 0") -> Path:
    text = BLOCKS.replace("{block_change}", block_change).replace("{net_change}", net_change)
    return write_tree(root, {"model.py": text})


def test_recompile_limit_hits_of_frames_a_break_gave_up_fold_under_it(
    review: ReviewFn, tmp_path: Path
) -> None:
    """A data-dependent branch in Net.forward's loop: Dynamo gives Net.forward up, so each block's
    forward is compiled as a frame of its own, recompiled for every block's int until the recompile
    limit: the limit hit is the break's effect, under it, not a second cause."""
    base = _blocks(tmp_path / "base")
    head = _blocks(tmp_path / "head", net_change="if x.sum() > 1e9:\n                x = x / 2")
    result = review(base, head, probes=("compile",))
    head_metrics = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert head_metrics.recompile_limit_hits, "the probe heard no limit hit: nothing to fold"
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == "if x.sum() > 1e9:"
    assert "1 recompile-limit hit" in brk.message and "gave up compiling `Net.forward`" in brk.message
    assert "self.idx ==" in str(brk.evidence["limit_hits"])
    assert result.summary.startswith("1 cause: new graph break")
    assert "Frames this break split that hit a recompile limit" in render_comment(result)


def test_a_resume_function_s_recompiles_and_limit_hit_fold_under_the_break(
    review: ReviewFn, tmp_path: Path
) -> None:
    """A print inside each block: the code after it (a resume function, taking the block as an
    argument) is recompiled for each block's int until the limit stops it. One cause, the print."""
    base = _blocks(tmp_path / "base")
    head = _blocks(tmp_path / "head", block_change='print("block")')
    result = review(base, head, probes=("compile",))
    head_metrics = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert [
        h.function.startswith("torch_dynamo_resume_in_forward") for h in head_metrics.recompile_limit_hits
    ] == [True]
    assert _errors(result) == ["graph_break_added"], [f.message for f in result.findings]
    [brk] = result.findings
    assert brk.location is not None and brk.location.code == 'print("block")'
    assert "recompiles and 1 recompile-limit hit that follow from it" in brk.message
    assert brk.evidence["resume_recompiles"] and brk.evidence["limit_hits"]
