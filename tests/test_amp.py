"""The amp probe and amp_fp32_fallback: real bf16 autocast on the CPU, and the pure comparator.

Autocast recasts a Linear's fp32 input to bf16 by itself, so a bare ``.float()`` changes
nothing; the matmul only stays in fp32 when the PR also switches autocast off around it.
The review tests pin both halves of that.
"""

from __future__ import annotations

from pathlib import Path

from conftest import ReviewFn, write_tree

from perfcheck.config import Config, parse_config
from perfcheck.core.probes.amp import AmpMetrics, AmpOp, amp_findings
from perfcheck.core.render import render_comment
from perfcheck.measures import GraphBreak, SourceLocation
from perfcheck.runner.probes.amp_probe import (
    autocast_spans,
    fp32_kernels,
    is_fp32_gemm_kernel,
    is_matmul_class,
    stack_frames,
)
from perfcheck.schema import Finding, ProbeResult, Review

MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        {change}
        return self.fc3(h)


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""

CONFIG = """
workloads:
  - name: net
    entry: model.py:build
    amp: bf16
compile:
  backend: aot_eager
"""


def amp_config() -> Config:
    return parse_config(CONFIG, "test-amp.yml")


def tree(root: Path, change: str) -> Path:
    return write_tree(root, {"model.py": MODEL.replace("{change}", change)})


def line_of(root: Path, code: str) -> int:
    lines = (root / "model.py").read_text().splitlines()
    return next(i for i, ln in enumerate(lines, start=1) if ln.strip() == code)


def only(review: Review, category: str) -> list[Finding]:
    return [f for f in review.findings if f.category == category]


def test_a_linear_with_autocast_switched_off_stays_fp32(review: ReviewFn, tmp_path: Path) -> None:
    base = tree(tmp_path / "base", "h = torch.relu(self.fc2(h))")
    head = tree(
        tmp_path / "head",
        "h = h.float()\n"
        "        with torch.autocast(h.device.type, enabled=False):\n"
        "            h = torch.relu(self.fc2(h.float()))",
    )
    result = review(base, head, config=amp_config(), probes=("amp",))
    [finding] = only(result, "amp_fp32_fallback")
    assert finding.severity == "error"
    assert finding.location is not None
    assert (finding.location.path, finding.location.function) == ("model.py", "Net.forward")
    assert finding.location.line == line_of(head, "h = torch.relu(self.fc2(h.float()))")
    assert finding.evidence["op"] == "aten.addmm.default"
    assert (finding.evidence["dtype"], finding.evidence["count"]) == ("float32", 1)
    # fc1 and fc3 stay bf16 on head; base ran all three low.
    assert finding.evidence["low_precision_ops"] == [3, 2]
    assert result.verdict == "fail"
    rendered = render_comment(result)
    assert "Matmul left in fp32 under autocast" in rendered
    assert "+ aten.addmm.default float32 ×1 at model.py:" in rendered


def test_a_print_inside_an_autocast_block_is_an_autocast_break(review: ReviewFn, tmp_path: Path) -> None:
    block = (
        "with torch.autocast(h.device.type, dtype=torch.bfloat16):\n            h = torch.relu(self.fc2(h))"
    )
    base = tree(tmp_path / "base", block)
    head = tree(
        tmp_path / "head",
        "print('outside any autocast block')\n"
        "        with torch.autocast(h.device.type, dtype=torch.bfloat16):\n"
        "            print('fc2 input', h.shape)\n"
        "            h = torch.relu(self.fc2(h))",
    )
    result = review(base, head, config=amp_config(), probes=("amp",))
    [finding] = only(result, "amp_fp32_fallback")
    assert finding.location is not None
    assert finding.location.line == line_of(head, "print('fc2 input', h.shape)")
    assert "print" in finding.evidence["reason"]
    assert "Dynamo's reason" in render_comment(result)


# The comparator, on hand-made results.


def loc(line: int, code: str) -> SourceLocation:
    return SourceLocation(path="model.py", line=line, function="forward", code=code)


def amp_result(side: str, ops: list[AmpOp], breaks: tuple[GraphBreak, ...] = ()) -> ProbeResult:
    return ProbeResult(
        probe="amp",
        workload="net",
        side=side,  # type: ignore[arg-type]
        status="ok",
        duration_s=1.0,
        metrics=AmpMetrics(
            dtype="bf16", fp32_ops=ops, autocast_breaks=list(breaks), low_precision_ops=2
        ).model_dump(mode="json"),
    )


MM = AmpOp(op="aten.mm.default", dtype="float32", location=loc(20, "y = x.float() @ w"))


def compare(
    base: list[AmpOp],
    head: list[AmpOp],
    base_breaks: tuple[GraphBreak, ...] = (),
    head_breaks: tuple[GraphBreak, ...] = (),
) -> list[Finding]:
    b, h = amp_result("base", base, base_breaks), amp_result("head", head, head_breaks)
    return amp_findings("net", b, h, Config())


def test_an_fp32_op_that_only_moved_is_not_new() -> None:
    moved = MM.model_copy(update={"location": loc(27, "y = x.float() @ w")})
    assert compare([MM], [moved]) == []


def test_a_second_fp32_call_on_the_same_line_is_new() -> None:
    [f] = compare([MM], [MM.model_copy(update={"count": 3})])
    assert (f.severity, f.evidence["count"], f.location) == ("error", 2, MM.location)


def test_an_op_gone_back_to_bf16_is_no_finding() -> None:
    assert compare([MM], []) == []


def test_kernels_are_reported_only_when_the_graph_saw_nothing() -> None:
    kernel = AmpOp(op="ampere_sgemm_128x64_tn", dtype="float32", source="kernel")
    [alone] = compare([], [kernel])
    assert (alone.evidence["op"], alone.evidence["source"], alone.location) == (kernel.op, "kernel", None)
    [graph] = compare([], [MM, kernel])
    assert graph.evidence["op"] == "aten.mm.default"
    assert "+ ampere_sgemm_128x64_tn float32 ×1" in graph.evidence["ops"]


def test_a_new_autocast_break_is_an_error_and_an_old_one_is_not() -> None:
    old = GraphBreak(
        break_type="Failed to trace builtin operator", reason="print", location=loc(9, "print(a)")
    )
    new = old.model_copy(update={"location": loc(12, "print(b)")})
    [f] = compare([], [], base_breaks=(old,), head_breaks=(old, new))
    assert (f.severity, f.location, f.evidence["reason"]) == ("error", new.location, "print")


# The probe's pure parts.


def test_matmul_and_conv_class_ops() -> None:
    for name in ("addmm", "bmm", "convolution", "conv2d", "conv_transpose1d", "cudnn_convolution"):
        assert is_matmul_class(name), name
    assert is_matmul_class("_scaled_dot_product_flash_attention_for_cpu")
    for name in ("relu", "_convert_indices_from_coo_to_csr", "add", "_to_copy", "t"):
        assert not is_matmul_class(name), name


def test_fp32_gemm_kernels_by_name() -> None:
    # Names as cuBLAS, cuDNN, CUTLASS and Inductor spell them in profiler traces.
    fp32 = [
        "ampere_sgemm_128x64_tn",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4",
        "sm86_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize64x32x64",
        "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>",
    ]
    low = [
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn",
        "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x1_tn_align8>",
        "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64",
        "triton_poi_fused_relu_0",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
    ]
    assert all(is_fp32_gemm_kernel(n) for n in fp32)
    assert not any(is_fp32_gemm_kernel(n) for n in low)
    [op] = fp32_kernels(["ampere_sgemm_128x64_tn"] * 10 + low, steps_run=5)
    assert (op.op, op.count, op.source) == ("ampere_sgemm_128x64_tn", 2, "kernel")


def test_autocast_blocks_and_decorated_functions() -> None:
    source = (
        "import torch\n"  # 1
        "def f(x):\n"  # 2
        "    with torch.autocast('cpu', enabled=False):\n"  # 3
        "        y = x @ x\n"  # 4
        "    return y\n"  # 5
        "@torch.amp.autocast('cuda')\n"  # 6
        "def g(x):\n"  # 7
        "    return x\n"  # 8
        "with open('f') as fh:\n"  # 9
        "    pass\n"  # 10
    )
    assert autocast_spans(source) == [(3, 4), (7, 8)]
    assert autocast_spans("def broken(:\n") == []


def test_stack_trace_frames() -> None:
    trace = (
        '  File "/repo/model.py", line 14, in forward\n'
        "    h = self.block(x)\n"
        '  File "/repo/block.py", line 3, in forward\n'
        "    return self.fc(x.float())\n"
        "           ^^^^^^^^^^^^^^^^^^\n"
    )
    frames = stack_frames(trace)
    assert [(f.filename, f.lineno, f.name, f.line) for f in frames] == [
        ("/repo/model.py", 14, "forward", "h = self.block(x)"),
        ("/repo/block.py", 3, "forward", "return self.fc(x.float())"),
    ]
    assert stack_frames(None) == []
