"""Findings a reviewer can act on (issue 14), each reproduced from real torch code: severity by
the project's intent, causes read from the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, model_tree, write_tree

from perfcheck.core.matrix import resolve, where_of
from perfcheck.core.probes.profile import trace_files
from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics
from perfcheck.schema import Finding, Review


def only(review: Review, category: str) -> list[Finding]:
    return [f for f in review.findings if f.category == category]


# -- severity by intent --------------------------------------------------------------------------


def test_an_ir_change_is_a_warning_unless_the_project_makes_the_ir_a_contract(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = torch.nn.functional.gelu(h)")  # ReLU → GELU, on purpose
    result = review(base, head, probes=("export",))
    [ir] = only(result, "export_ir_changed")
    assert ir.severity == "warning" and result.verdict == "pass"
    assert "a warning: export.fail_on_ir_change is off" in ir.message  # which setting decided, in the comment
    assert "a warning: export.fail_on_ir_change is off" in render_comment(result).replace("\\", "")

    contract = review(base, head, config=fast_config("export: {fail_on_ir_change: true}"), probes=("export",))
    [ir] = only(contract, "export_ir_changed")
    assert ir.severity == "error" and contract.verdict == "fail"
    assert "export.fail_on_ir_change is on" in ir.message


def test_a_denied_op_fails_even_where_ir_changes_only_warn(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = torch.nn.functional.dropout(h, p=0.1, training=True)")
    config = fast_config("export:\n  deny_ops: [aten.native_dropout.default]")
    result = review(base, head, config=config, probes=("export",))
    [denied] = only(result, "export_op_denied")
    assert denied.severity == "error" and result.verdict == "fail"
    [ir] = only(result, "export_ir_changed")
    assert ir.severity == "warning"
    # inference workload, dropout appearing in its graph: the matrix names the training-mode leak
    assert ir.evidence["reading"] == "dropout in eval"
    entry = resolve(ir)
    assert entry is not None and "training mode" in entry.cause


# -- causes read from the evidence ----------------------------------------------------------------

ATTENTION = """\
import torch
from torch import nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 4, 8).permute(2, 0, 3, 1, 4)
        {attention}
        return o.sum(-1)


def build(device):
    torch.manual_seed(0)
    return Attention().to(device), (torch.randn(2, 8, 32).to(device),)
"""
SDPA = "o = F.scaled_dot_product_attention(q, k, v)"
EAGER = "o = ((q @ k.transpose(-2, -1)) / 8 ** 0.5).softmax(-1) @ v"


def test_attention_that_leaves_sdpa_is_named_from_the_op_diff(review: ReviewFn, tmp_path: Path) -> None:
    base = write_tree(tmp_path / "base", {"model.py": ATTENTION.replace("{attention}", SDPA)})
    head = write_tree(tmp_path / "head", {"model.py": ATTENTION.replace("{attention}", EAGER)})
    # The pre-dispatch IR keeps scaled_dot_product_attention as one op on every device; core ATen on
    # the CPU decomposes it into the same math the eager code writes out.
    config = fast_config("export: {decompose: false}")
    result = review(base, head, config=config, probes=("export",))
    [ir] = only(result, "export_ir_changed")
    assert ir.evidence["op_diff"]["aten.scaled_dot_product_attention.default"] == [1, 0]
    assert ir.evidence["op_diff"]["aten.softmax.int"] == [0, 1]
    assert ir.evidence["reading"] == "sdpa lost"
    comment = render_comment(result)
    assert "attention no longer runs through `scaled_dot_product_attention`" in comment

    back = review(head, base, config=config, probes=("export",))
    [ir] = only(back, "export_ir_changed")
    assert ir.evidence["reading"] == "sdpa gained"


def test_a_float64_promotion_is_named(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = (h.double() * 0.5).float()")
    result = review(base, head, probes=("export",))
    [ir] = only(result, "export_ir_changed")
    assert ir.evidence["reading"] == "float64"
    entry = resolve(ir)
    assert entry is not None and "float64" in entry.cause


def test_an_export_that_works_again_is_good_news(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base", "h = h * 2 if h.sum() > 0 else h")  # data-dependent: export fails
    head = model_tree(tmp_path / "head")
    result = review(base, head, probes=("export",))
    [fixed] = only(result, "export_fixed")
    assert fixed.severity == "info" and result.verdict == "pass"
    assert "on base it failed" in fixed.message and fixed.evidence["base_error"]
    assert "torch.export works again" in render_comment(result)


# -- workload code, imported once; the second batch never costs the result -----------------------

LIBRARY_MODEL = """\
import torch
from torch import nn

# Defined at import, the way PyTorch's own tests do: a second import would define it twice.
lib = torch.library.Library("perfcheck_test_ns", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CompositeExplicitAutograd")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x)


def build(device):
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


def test_a_module_level_library_definition_survives_two_builds(review: ReviewFn, tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "tree", {"model.py": LIBRARY_MODEL})
    result = review(tree, tree, probes=("compile",))  # the compile probe builds the model twice
    assert [r.status for r in result.workloads[0].head] == ["ok"], result.workloads[0].head[0].message
    assert result.verdict == "pass"


OFFSETS_MODEL = """\
import torch
from torch import nn


class Bags(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(50, 8, mode="sum")

    def forward(self, values, offsets):
        out = self.bag(values, offsets)
        {change}
        return out * 2


def build(device):
    values = torch.arange(12).to(device)  # 12 looked-up ids in 4 bags: offsets hold 4 starts
    offsets = torch.tensor([0, 3, 6, 9]).to(device)
    return Bags().to(device), (values, offsets){second}
"""


def _bags(root: Path, change: str = "pass", second: str = "") -> Path:
    return write_tree(
        root, {"model.py": OFFSETS_MODEL.replace("{change}", change).replace("{second}", second)}
    )


def test_only_what_is_a_batch_is_cut_and_a_failing_second_call_is_a_note(
    review: ReviewFn, tmp_path: Path
) -> None:
    # Halving every tensor's first dimension would cut the 12 values to 6 while offsets still
    # point at 9: EmbeddingBag raises. values has 12 rows and offsets 4, so the "batch" (the first
    # tensor's rows) is cut and offsets is left whole, which EmbeddingBag takes.
    base = _bags(tmp_path / "base")
    head = _bags(tmp_path / "head", "print('step')")  # a new break on head
    result = review(base, head, probes=("compile",))
    assert all(
        r.status == "ok" for side in (result.workloads[0].base, result.workloads[0].head) for r in side
    )
    assert [f.category for f in result.findings if f.severity == "error"] == ["graph_break_added"]

    # A second call that raises is a note on the table; the breaks measured before it stand.
    broken = ", (torch.arange(12).to(device), torch.tensor([0, 30]).to(device))"
    failing = review(
        _bags(tmp_path / "b2", second=broken),
        _bags(tmp_path / "h2", "print('step')", broken),
        probes=("compile",),
    )
    head_result = failing.workloads[0].head[0]
    assert head_result.status == "ok"
    note = head_result.metrics_as(CompileMetrics).second_batch
    assert note is not None and note.startswith("not checked: the model raises on its second inputs (")
    assert [f.category for f in failing.findings if f.severity == "error"] == ["graph_break_added"]
    assert (
        "| recompiles on another batch | not checked: the model raises on its second inputs"
        in render_comment(failing)
    )

    none = review(
        _bags(tmp_path / "b3", second=", None"), _bags(tmp_path / "h3", second=", None"), probes=("compile",)
    )
    note = none.workloads[0].head[0].metrics_as(CompileMetrics).second_batch
    assert note == "not run: the workload gives no second inputs"


# -- every break Dynamo records, and one count of them -------------------------------------------

FIRST_LINE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        {change}
        return torch.relu(self.fc(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


def test_a_break_on_a_frames_first_line_is_found_and_counted_once(review: ReviewFn, tmp_path: Path) -> None:
    # torch._dynamo.explain reports one graph and no break here; Dynamo's own log has it.
    base = write_tree(tmp_path / "base", {"model.py": FIRST_LINE.replace("{change}", "pass")})
    head = write_tree(tmp_path / "head", {"model.py": FIRST_LINE.replace("{change}", 'print("step")')})
    result = review(base, head, probes=("compile",))
    [gb] = only(result, "graph_break_added")
    assert gb.location is not None and (gb.location.path, gb.location.line) == ("model.py", 11)
    assert gb.location.code == 'print("step")' and "builtin operator `print`" in gb.evidence["reason"]
    entry = resolve(gb)
    assert entry is not None and entry.cause.startswith("a `print` inside the compiled region")
    assert result.verdict == "fail"
    compile_head = result.workloads[0].head[0].metrics_as(CompileMetrics)
    assert compile_head is not None and compile_head.graph_break_count == 1
    # the table counts what the findings list
    assert "+1 break |" in render_comment(result)


# -- recompiles: under the break they come from, else one finding per guard, with its place ------

RESUMED = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        k = x.shape[0] // 2
        {change}
        return y[:k] * 2


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


def test_a_recompile_that_only_exists_because_of_a_new_break_is_shown_under_it(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(tmp_path / "base", {"model.py": RESUMED.replace("{change}", "pass")})
    head = write_tree(tmp_path / "head", {"model.py": RESUMED.replace("{change}", 'print("step")')})
    result = review(base, head, probes=("compile",))
    # The code after the break is a resume function that guards on `k`, a Python int computed
    # before it: the second batch recompiles it. That is the break's doing, not a cause of its own.
    assert only(result, "recompile") == []
    [gb] = only(result, "graph_break_added")
    assert "(and 1 recompile that follows from it)" in gb.message
    assert "torch_dynamo_resume_in_forward_at_13 (model.py:13): k == 2" in gb.evidence["resume_recompiles"]
    comment = render_comment(result).replace("\\", "")
    assert "Recompiles of the code this break split" in comment
    assert sum(1 for f in result.findings if f.severity == "error") == 1


COUNTED = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        y = self.fc(x)
        {count}
        print("step")  # a break on both sides
        return y * {factor}


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


def test_new_recompiles_are_one_finding_per_guard_naming_each_place(review: ReviewFn, tmp_path: Path) -> None:
    base = write_tree(tmp_path / "base", {"model.py": COUNTED.format(count="pass", factor="2")})
    # A Python counter on the module: every call fails a guard on it, before the break (forward)
    # and after it (the resume function base has too): one cause, two places, one finding.
    head = write_tree(
        tmp_path / "head", {"model.py": COUNTED.format(count="self.calls += 1", factor="self.calls")}
    )
    result = review(base, head, probes=("compile",))
    [r] = only(result, "recompile")
    assert r.location is not None and (r.location.path, r.location.function) == ("model.py", "Net.forward")
    assert r.evidence["frame_count"] == 2 and "1 more frame" in r.message
    assert "torch_dynamo_resume_in_forward_at_14 (model.py:14)" in r.evidence["frames"]
    comment = render_comment(result).replace("\\", "")
    assert "Code it recompiles (2 frames)" in comment and "allow_unspec_int_on_nn_module" in comment


# -- torch rejecting the head's code is a finding of its own, not a crashed probe ------------------

FAKE_KERNEL = """\
import torch
from torch import nn


@torch.library.custom_op("perfcheck_findings::shift", mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@shift.register_fake
def _(x):
    {fake}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return shift(h) * h


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""


def test_a_broken_fake_kernel_is_compile_failed_with_the_user_frame(review: ReviewFn, tmp_path: Path) -> None:
    base = write_tree(
        tmp_path / "base", {"model.py": FAKE_KERNEL.replace("{fake}", "return torch.empty_like(x)")}
    )
    # The fake kernel says the output has one row more: torch.compile cannot trace `shift(h) * h`.
    broken = "return x.new_empty((x.shape[0] + 1, x.shape[1]))"
    head = write_tree(tmp_path / "head", {"model.py": FAKE_KERNEL.replace("{fake}", broken)})
    result = review(base, head, probes=("compile",))
    assert not only(result, "probe_crashed")
    [failed] = only(result, "compile_failed")
    assert failed.severity == "error" and result.verdict == "fail"
    assert failed.location is not None and failed.location.path == "model.py"
    assert failed.location.code == "return shift(h) * h"
    assert failed.evidence["error_type"] and failed.evidence["error"]
    head_result = result.workloads[0].head[0]
    assert head_result.status == "failed"  # torch said no; the process did not die
    assert "torch.compile fails" in render_comment(result)


def test_a_timed_head_that_torch_compile_rejects_is_not_a_crashed_probe(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(
        tmp_path / "base", {"model.py": FAKE_KERNEL.replace("{fake}", "return torch.empty_like(x)")}
    )
    broken = "return x.new_empty((x.shape[0] + 1, x.shape[1]))"
    head = write_tree(tmp_path / "head", {"model.py": FAKE_KERNEL.replace("{fake}", broken)})
    config = fast_config("timing: {compiled: true, processes: 2, max_processes: 2}")
    result = review(base, head, config=config, probes=("compile", "timing"))
    assert not only(result, "probe_crashed")
    [failed] = only(result, "compile_failed")  # once, from the compile probe
    assert failed.severity == "error" and result.verdict == "fail"
    timed = {r.probe: r for r in result.workloads[0].head}["timing"]
    assert timed.status == "failed" and (timed.message or "").startswith("torch.compile fails:")
    assert any(
        why.startswith("net/timing: not measured on head: torch.compile fails") for why in result.inconclusive
    )


def test_a_head_that_fixes_what_torch_compile_rejected_on_base_passes(
    review: ReviewFn, tmp_path: Path
) -> None:
    """The timed case above, reversed (a PR that fixes the fake kernel): good news, not an
    inconclusive review, though step time has no compiled base to be compared with."""
    broken = "return x.new_empty((x.shape[0] + 1, x.shape[1]))"
    base = write_tree(tmp_path / "base", {"model.py": FAKE_KERNEL.replace("{fake}", broken)})
    head = write_tree(
        tmp_path / "head", {"model.py": FAKE_KERNEL.replace("{fake}", "return torch.empty_like(x)")}
    )
    config = fast_config("timing: {compiled: true, processes: 2, max_processes: 2}")
    result = review(base, head, config=config, probes=("compile", "timing"))
    [fixed] = only(result, "compile_fixed")
    assert fixed.severity == "info" and "on base it failed" in fixed.message and fixed.evidence["base_error"]
    assert fixed.location is not None and fixed.location.code == "return shift(h) * h"
    assert result.verdict == "pass" and not result.inconclusive, (result.inconclusive, result.findings)
    comment = render_comment(result)
    assert "torch.compile works again" in comment
    # The table says whose cells failed: a bare "failed" in Δ would read as the head's regression.
    assert "| graphs / breaks | failed | 1 / 0 | base failed |" in comment


def test_a_second_call_s_error_of_several_lines_is_noted_by_its_first(
    review: ReviewFn, tmp_path: Path
) -> None:
    # Dynamo quotes what the model raised on fake tensors as its repr ("got RuntimeError('batch of
    # three\\nsecond line')"): the note is its first line, not the repr's escapes.
    model = (
        "import torch\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n"
        '        torch._check(x.shape[0] != 3, lambda: "batch of three\\nsecond line")\n'
        "        return self.fc(x)\n\n\n"
        "def build(device):\n"
        "    return Net().to(device), (torch.randn(4, 8).to(device),), (torch.randn(3, 8).to(device),)\n"
    )
    tree = write_tree(tmp_path / "tree", {"model.py": model})
    result = review(tree, tree, probes=("compile",))
    note = result.workloads[0].head[0].metrics_as(CompileMetrics).second_batch
    assert note == "not checked: the model raises on its second inputs (RuntimeError: batch of three)"


# -- probes follow what the workload declares ----------------------------------------------------


def test_a_workload_that_declares_amp_gets_the_amp_probe() -> None:
    from perfcheck.config import planned_probes

    config = fast_config()
    declared = config.workloads[0].model_copy(update={"amp": "bf16"})
    assert "amp" in [p for _, p in planned_probes([declared])]
    assert "amp" not in [p for _, p in planned_probes(config.workloads)]  # no autocast, no amp probe
    # the workload's own list, or the command line's, still decides
    opted_out = declared.model_copy(update={"probes": ["compile"]})
    assert [p for _, p in planned_probes([opted_out])] == ["compile"]
    assert [p for _, p in planned_probes([declared], ("export",))] == ["export"]


# -- verify commands that run as printed ----------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "demo-comment.md"
# What each command reproduces, by the probe it runs: the finding of the demo it verifies.
REPRODUCES = {"compile": "New graph break", "export": "Exported IR changed", "timing": "Slower steps"}


@pytest.mark.e2e
def test_the_golden_comments_verify_commands_run_as_printed(tmp_path: Path) -> None:
    import os
    import re
    import shutil
    import subprocess
    import sys

    from conftest import DEMO

    commands = sorted(set(re.findall(r"`([^`]*perfcheck review [^`]*)`", GOLDEN.read_text())))
    assert commands, "the golden comment prints no verify command"
    # The demo's trees where the comment says they are, relative to where the command is run.
    shutil.copytree(DEMO, tmp_path / "examples" / "demo")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        traced = "tlparse" in command
        if traced:
            # Its review, not tlparse (a program perfcheck does not ship, installed by the command
            # where missing): TORCH_TRACE's log must be where the command hands it to tlparse.
            command = command.split(";", 1)[0]
        probe = re.search(r"--probes (\w+)", command)
        assert probe is not None, command
        done = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode in (0, 1), (command, done.stderr[-2000:])  # ran: a verdict, not bad input
        assert "Traceback" not in done.stderr, command
        expected = REPRODUCES[probe.group(1)]
        if expected is not None:
            assert expected in done.stdout, (command, done.stdout[-2000:])
        # It wrote where it says, beside the review it verifies, and made no compile-latency
        # samples (none of these verifies compile latency).
        assert (tmp_path / "perfcheck-out" / "verify" / "result.json").is_file(), command
        assert "compile latency" not in done.stderr, (command, done.stderr[-2000:])
        if traced:
            logs = list(
                (tmp_path / "perfcheck-out" / "verify" / "probes" / "files" / "head").glob(
                    "torch_trace/*.log"
                )
            )
            assert logs and all(log.stat().st_size > 0 for log in logs), command
        if command.startswith("TORCH_LOGS=graph_breaks"):
            # what TORCH_LOGS asked for, which goes to the probe's log: the command shows it
            assert "Graph break" in done.stdout, (command, done.stdout[-3000:])


def test_a_break_links_dynamos_own_page_for_it(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "s = h.sum().item()")
    result = review(base, head, probes=("compile",))
    [gb] = only(result, "graph_break_added")
    entry = resolve(gb)
    assert entry is not None and entry.docs is not None
    assert entry.docs.startswith("https://meta-pytorch.github.io/compile-graph-break-site/gb/gb")
    assert f"[docs]({entry.docs})" in render_comment(result)


# -- a crash keeps its traceback and is named from its exception ----------------------------------


def test_a_crash_keeps_the_user_frames_and_names_its_cause(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head")
    text = (head / "model.py").read_text()
    text = text.replace(
        "def build(device):\n",
        "def shard(name):\n    raise ValueError(f'no such dataset shard: {name}')\n\n\ndef build(device):\n"
        "    shard('train-0')\n",
    )
    (head / "model.py").write_text(text)
    result = review(base, head, probes=("export",))
    [crashed] = only(result, "probe_crashed")
    detail = crashed.evidence["detail"]
    lines = text.splitlines()
    raise_line = next(i for i, ln in enumerate(lines, 1) if "raise ValueError" in ln)
    call_line = next(i for i, ln in enumerate(lines, 1) if ln.strip() == "shard('train-0')")
    assert f"model.py:{call_line} in build: shard('train-0')" in detail
    assert f"model.py:{raise_line} in shard: raise ValueError" in detail
    entry = resolve(crashed, where=where_of(result, trace_files(result)))
    assert entry is not None and entry.cause.startswith("the workload's own code raised")
    log = tmp_path / "out" / "probes" / "head-net-export.log"
    assert "Traceback (most recent call last)" in log.read_text()  # the whole traceback, in the log
    # the first verify command shows that log
    assert entry.verify[0] == f"less {tmp_path / 'out'}/probes/head-net-export.log"


def test_a_syntax_error_names_its_line_and_cause(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "h = h +* 2")
    result = review(base, head, probes=("export",))
    [crashed] = only(result, "probe_crashed")
    lines = (head / "model.py").read_text().splitlines()
    bad = next(i for i, ln in enumerate(lines, 1) if "+*" in ln)
    assert "SyntaxError" in crashed.evidence["detail"] and f"model.py:{bad}" in crashed.evidence["detail"]
    assert "frozen importlib" not in crashed.evidence["detail"]
    entry = resolve(crashed)
    assert entry is not None and entry.cause.startswith("a syntax error in the workload's code")


def test_a_tolist_break_gets_dynamos_own_hint(review: ReviewFn, tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    head = model_tree(tmp_path / "head", "scales = h.amax(dim=1).tolist()")
    result = review(base, head, probes=("compile",))
    [gb] = only(result, "graph_break_added")
    entry = resolve(gb)
    assert entry is not None and "capture_scalar_outputs" in entry.cause and "tolist" in entry.cause


# -- places outside the repository -----------------------------------------------------------------


def test_a_place_outside_the_tree_is_shown_relative_to_its_package_and_never_annotated(
    tmp_path: Path,
) -> None:
    import traceback

    import torch.nn.modules.linear

    from perfcheck.bot.checks import annotation
    from perfcheck.runner.source.locate import to_location

    frame = traceback.FrameSummary(
        torch.nn.modules.linear.__file__, 125, "forward", line="return F.linear(x)"
    )
    loc = to_location(frame, tmp_path)
    assert (loc.path, loc.in_tree) == ("torch/nn/modules/linear.py", False)
    inside = to_location(traceback.FrameSummary(str(tmp_path / "model.py"), 3, "f", line="x"), tmp_path)
    assert (inside.path, inside.in_tree) == ("model.py", True)
    finding = Finding(
        category="graph_break_added",
        severity="error",
        workload="w",
        probe="compile",
        message="m",
        location=loc,
    )
    assert annotation(finding) is None
    assert annotation(finding.model_copy(update={"location": inside})) is not None


def test_a_custom_op_in_the_exported_graph_gets_opcheck_without_asking(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(
        tmp_path / "base", {"model.py": FAKE_KERNEL.replace("{fake}", "return torch.empty_like(x)")}
    )
    # A fake kernel with the wrong dtype: export and compile still trace, opcheck does not agree.
    wrong = "return torch.empty_like(x, dtype=torch.float64)"
    head = write_tree(tmp_path / "head", {"model.py": FAKE_KERNEL.replace("{fake}", wrong)})
    config = fast_config("timing: {compiled: false, processes: 2, max_processes: 2}")
    result = review(base, head, config=config)  # the default probes: compile, export, timing
    probed = {r.probe for r in result.workloads[0].head}
    assert "custom_ops" in probed and {r.probe for r in result.workloads[0].base} == probed
    failed = only(result, "custom_op_check_failed")
    assert failed and all(f.evidence["op"].startswith("perfcheck_findings::shift") for f in failed)
    assert result.verdict == "fail"
    # A workload that lists its probes opts out.
    listed = fast_config().model_copy(
        update={"workloads": [fast_config().workloads[0].model_copy(update={"probes": ["export"]})]}
    )
    assert {r.probe for r in review(base, head, config=listed).workloads[0].head} == {"export"}


def test_a_frame_is_named_by_the_code_object_that_holds_its_line(tmp_path: Path) -> None:
    """Two sibling classes whose methods read alike: a frame is named by position (the innermost
    function of its name whose code holds the line), never by its text; the code after a graph
    break (Dynamo's resume function) by the function it resumes."""
    import traceback

    from perfcheck.runner.source.locate import lines_of, qualified_name, to_location, user_name

    text = "class A:\n    def f(self):\n        return 1\n\n\nclass B:\n    def f(self):\n        return 1\n"
    model = write_tree(tmp_path, {"model.py": text}) / "model.py"
    assert qualified_name(str(model), 3, "f") == "A.f" and qualified_name(str(model), 8, "f") == "B.f"
    assert qualified_name(str(model), 8, "torch_dynamo_resume_in_f_at_8") == "B.f"
    assert qualified_name(str(model), 8, "g") is None and qualified_name(str(model), 4) is None
    assert lines_of(str(model), "B") == {6, 7, 8}
    assert user_name("B.torch_dynamo_resume_in_f_at_8") == "B.f" and user_name("f") == "f"
    frame = traceback.FrameSummary(str(model), 8, "f", line="return 1")
    assert to_location(frame, tmp_path).function == "B.f"
    # the caller's own code object's name wins; a frame outside the tree keeps its bare name
    assert to_location(frame, tmp_path, qualname="A.f").function == "A.f"
    assert to_location(frame, tmp_path / "elsewhere").function == "f"
