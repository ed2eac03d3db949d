"""One cause, one finding (issue 30): what follows from a new graph break is folded under it, a
recompile is judged by what it costs and placed where the guarded value is made, one break is one
finding whatever Dynamo's wordings of it, and the table's counts are Dynamo's.

Each test is a real review of small real models (aot_eager on the CPU)."""

from __future__ import annotations

from pathlib import Path

from conftest import ReviewFn, write_tree

from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics
from perfcheck.schema import Review

BLOCKS = """\
import torch
from torch import nn


def mix(x):
    {change}
    return x * torch.sigmoid(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = self.fc(x)
        return mix(h) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(3))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        {branch}
        return self.out(x)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 16).to(device),)
"""


def _blocks(root: Path, change: str = "pass", branch: str = "x = x + 0") -> Path:
    text = BLOCKS.replace("{change}", change).replace("{branch}", branch)
    return write_tree(root, {"model.py": text})


def _errors(result: Review) -> list[str]:
    return [f.category for f in result.findings if f.severity == "error" and f.ack is None]


def test_one_new_break_is_one_regression_with_its_recompiles_folded_under_it(
    review: ReviewFn, tmp_path: Path
) -> None:
    """A print in a helper every block calls breaks the graph once per block: one line, one
    finding. Its fallout (each block's forward and the code after the break, compiled as frames of
    their own and recompiled for the other batch size) is shown under it, not counted again."""
    result = review(
        _blocks(tmp_path / "base"), _blocks(tmp_path / "head", "print('mixing')"), probes=("compile",)
    )
    assert _errors(result) == ["graph_break_added"]
    [brk] = result.findings
    assert brk.location is not None and (brk.location.path, brk.location.line) == ("model.py", 6)
    assert "recompile" in brk.message and "from it" in brk.message
    assert brk.evidence["resume_recompiles"]  # what was folded, kept for the reader
    assert result.summary.startswith("1 cause: new graph break at model.py:6")
    # The table's counts are Dynamo's: explain's graphs and breaks, not the lines the findings list.
    head = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert head is not None and head.graph_break_count > len(head.graph_breaks) == 1


def test_a_head_that_removes_breaks_and_recompiles_less_is_never_a_fail(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Base breaks twice (a print, a data-dependent branch) and recompiles every step (a Python
    counter on the module); head removes both breaks and keeps its state in a registered (1,)
    buffer that takes the batch's shape at the first step, which recompiles once: a new cause,
    fewer recompiles, so a warning at the buffer's registration, and a pass."""
    base = write_tree(
        tmp_path / "base",
        {
            "model.py": """\
import torch
from torch import nn


class Neuron(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = None

    def forward(self, x):
        if self.v is None or self.v.shape != x.shape:
            self.v = torch.zeros_like(x)
        print("spike")
        self.v = self.v * 0.5 + x
        if self.v.sum() > 0:
            return torch.relu(self.v)
        return self.v


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.neuron = Neuron()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.neuron(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""
        },
    )
    head = write_tree(
        tmp_path / "head",
        {
            "model.py": """\
import torch
from torch import nn


class Neuron(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("v", torch.zeros(1))

    def forward(self, x):
        self.v = self.v * 0.5 + x
        return torch.relu(self.v)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.neuron = Neuron()

    def forward(self, x):
        return self.neuron(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""
        },
    )
    result = review(base, head, probes=("compile",))
    assert result.verdict != "fail", [f.message for f in result.findings]
    [b, h] = [
        wl.metrics_as(CompileMetrics) for wl in (result.workloads[0].base[0], result.workloads[0].head[0])
    ]
    assert h.recompile_count < b.recompile_count
    [recompile] = [f for f in result.findings if f.category == "recompile"]
    assert recompile.severity == "warning" and "no more than base" in recompile.message
    # Placed where head makes the guarded buffer, not where the recompiled frame starts.
    assert (
        recompile.location is not None
        and recompile.location.code == 'self.register_buffer("v", torch.zeros(1))'
    )
    removed = [f for f in result.findings if f.category == "graph_break_removed"]
    assert {f.evidence["break_type"] for f in removed} == {
        "Failed to trace builtin operator",
        "Data-dependent branching",
    }
    # The other batch breaks the model in eager too (its state keeps the first batch's shape): a
    # note that the check did not run, not a crash.
    comment = render_comment(result)
    assert (
        "| recompiles on another batch | checked | not checked: the model raises on a batch of 2" in comment
    )


def test_one_break_is_one_finding_in_dynamo_s_fullest_words(review: ReviewFn, tmp_path: Path) -> None:
    """explain calls a data-dependent branch `generic_jump TensorVariable()`, Dynamo's log
    `Data-dependent branching` with its explanation: one break, at one line, in the log's words."""
    base = _blocks(tmp_path / "base")
    head = _blocks(tmp_path / "head", branch="if x.sum() > 0:\n            x = x * 2")
    result = review(base, head, probes=("compile",))
    [brk] = [f for f in result.findings if f.category == "graph_break_added"]
    assert brk.evidence["break_type"] == "Data-dependent branching"
    assert brk.location is not None and brk.location.code == "if x.sum() > 0:"
    assert "torch.cond" in render_comment(result)  # the matrix's cause for it


def test_a_break_that_makes_dynamo_give_up_its_frame_takes_base_s_breaks_there_with_it(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Head's print inside the blocks makes Dynamo give up compiling `Net.forward`, so base's
    data-dependent branch in it is no longer compiled: not a removed break, part of the new one."""
    branch = "if x.sum() > 0:\n            x = x * 2"
    result = review(
        _blocks(tmp_path / "base", branch=branch),
        _blocks(tmp_path / "head", "print('mixing')", branch=branch),
        probes=("compile",),
    )
    assert not [f for f in result.findings if f.category == "graph_break_removed"]
    [brk] = [f for f in result.findings if f.category == "graph_break_added"]
    assert brk.evidence.get("fell_back") and "model.py:29 is no longer compiled" in brk.message


def test_export_fixed_is_located_where_base_failed(review: ReviewFn, tmp_path: Path) -> None:
    base = _blocks(tmp_path / "base", branch="if x.sum() > 0:\n            x = x * 2")
    head = _blocks(tmp_path / "head", branch="x = torch.where(x.sum() > 0, x * 2, x)")
    result = review(base, head, probes=("export",))
    [fixed] = [f for f in result.findings if f.category == "export_fixed"]
    assert fixed.location is not None and fixed.location.code == "if x.sum() > 0:"


def test_one_import_error_that_stops_every_probe_of_a_side_is_one_regression() -> None:
    """A head that cannot import its workload crashes its compile, export and timing probes alike:
    one finding, the others named under it; a different error on the other side stays its own."""
    from perfcheck.core.explain import explain
    from perfcheck.schema import Finding

    def crash(probe: str, side: str, detail: str) -> Finding:
        return Finding(
            category="probe_crashed",
            severity="error",
            workload="net",
            probe=probe,
            message=f"the {probe} probe crashed on {side}",
            evidence={"side": side, "detail": detail},
        )

    missing = (
        "cannot import the workload: ModuleNotFoundError: No module named 'nope' (at model.py:1)\nframes"
    )
    found = explain(
        [
            crash("compile", "head", missing),
            crash("export", "head", missing),
            crash("timing", "head", "ModuleNotFoundError: No module named 'nope' (/w/head/model.py:1)"),
            crash("export", "base", "RuntimeError: CUDA error: out of memory"),
        ]
    )
    assert [(f.probe, f.evidence["side"]) for f in found] == [("compile", "head"), ("export", "base")]
    assert found[0].message == (
        "the compile probe crashed on head; the same error stops the export and timing probes on head "
        "(shown here, not counted again)"
    )
    assert "the timing probe crashed on head" in found[0].evidence["follows"]


SIBLINGS = """\
import torch
from torch import nn


class Spare(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        {body}


class Used(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        {body}


def build(device):
    torch.manual_seed(0)
    return Used().to(device), (torch.randn(4, 8).to(device),)
"""


def test_a_recompile_is_placed_in_the_class_that_runs_not_in_a_sibling_that_reads_alike(
    review: ReviewFn, tmp_path: Path
) -> None:
    """Two classes whose forward bodies are the same text; the workload runs one of them, and on
    head its Python counter recompiles every step. The finding is placed by the recompiled code
    object (its file, first line and qualified name), in the class that ran: not at the first
    line of the file that reads like it, which is the sibling's."""
    base = write_tree(tmp_path / "base", {"model.py": SIBLINGS.replace("{body}", "return self.fc(x)")})
    counted = "self.calls += 1\n        return self.fc(x) * self.calls"
    head = write_tree(tmp_path / "head", {"model.py": SIBLINGS.replace("{body}", counted)})
    lines = (head / "model.py").read_text().splitlines()
    spare, used = [n for n, text in enumerate(lines, 1) if text.strip() == "self.calls += 1"]
    used_def = [n for n, text in enumerate(lines, 1) if text.strip() == "def forward(self, x):"][1]
    result = review(base, head, probes=("compile",))
    [recompile] = [f for f in result.findings if f.category == "recompile"]
    loc = recompile.location
    assert loc is not None and (loc.path, loc.line, loc.function) == ("model.py", used, "Used.forward")
    assert spare < used and f"model.py:{used}" in recompile.message and "`Used.forward`" in recompile.message
    assert recompile.evidence["recompiled_at"] == f"model.py:{used_def}"
    assert "(`Used.forward`)" in render_comment(result)
