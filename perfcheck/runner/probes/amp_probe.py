"""The amp probe: matmul/conv-class ops left in fp32 under autocast, and autocast-caused graph breaks.

The workload runs under ``torch.autocast`` (its own dtype; bf16 when it asks for none). A
``torch.compile`` backend that only records AOTAutograd's forward graphs gives the ATen program
after autocast: autocast's casts are traced into it, so each node's fake value carries the dtype
the op really runs in, and its stack trace names the user's line. The Dynamo-level graph would
not do: it shows ``linear`` where autocast decides per ATen op. On cuda a short profiler pass
adds the GEMM/conv kernels that ran in fp32. ``torch._dynamo.explain`` gives the graph breaks;
those whose reason names autocast, or that sit inside the user's own autocast block, are the
autocast-boundary breaks.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import re
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
import torch.fx
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from perfcheck.core.probes.amp import AmpMetrics, AmpOp
from perfcheck.core.probes.profile import ProfileSettings
from perfcheck.measures import GraphBreak, SourceLocation
from perfcheck.runner import step as steps
from perfcheck.runner.dynamo.break_events import graph_breaks_of
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.runner.source.locate import innermost_user_frame, to_location
from perfcheck.spec import ProbeSpec

# Ops whose cost is a GEMM or a convolution: the ones autocast exists to run in low precision.
_MATMUL_OPS = frozenset(
    {
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "addbmm",
        "matmul",
        "linear",
        "mv",
        "addmv",
        "addr",
        "dot",
        "vdot",
        "einsum",
        "tensordot",
        "chain_matmul",
        "linalg_vecdot",
        "linalg_multi_dot",
        "_addmm_activation",
        "_scaled_mm",
    }
)
# conv1d, conv_transpose2d, convolution, cudnn_convolution, _slow_conv2d_forward, ... but not _convert_*.
_CONV = re.compile(r"(^|_)conv(olution|_|\d|$)|convolution")
_ATTENTION = re.compile(r"scaled_dot_product|_flash_attention|_efficient_attention|multi_head_attention")

_FULL_PRECISION = (torch.float32, torch.float64)
_LOW_PRECISION = (torch.bfloat16, torch.float16)

_FRAME = re.compile(
    r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>[^\n]+)'
    r'(?:\n(?!\s*File ")(?P<code>[^\n]*))?',
    re.MULTILINE,
)

# GPU kernel names carry their dtypes in vendor-specific spellings: cuBLAS "ampere_sgemm_*",
# tensor-core TF32 "s1688gemm", CUTLASS/xmma "f32f32_f32f32", cuDNN "implicit_convolve_sgemm".
_GEMM_KERNEL = re.compile(r"gemm|conv|fprop|dgrad|wgrad|matmul", re.IGNORECASE)
_FP32_KERNEL = re.compile(r"sgemm|dgemm|tf32|f32|fp32|float32|f64|fp64|double|s\d{3,5}gemm", re.IGNORECASE)
# "s16816gemm_bf16" accumulates in fp32 but multiplies bf16: the input dtype is what counts.
_LOW_KERNEL = re.compile(r"bf16|f16|h16|half|hgemm|bfloat|e4m3|e5m2|int8|imma", re.IGNORECASE)
_AUTOCAST_REASON = re.compile(r"autocast|torch\.(cuda\.|cpu\.)?amp\b|GradScaler", re.IGNORECASE)


def is_matmul_class(name: str) -> bool:
    """``name`` is an ATen op's base name (``addmm``, ``convolution``), without namespace or overload."""
    return name in _MATMUL_OPS or bool(_CONV.search(name) or _ATTENTION.search(name))


def _base_name(target: torch._ops.OpOverload) -> str:
    return target._schema.name.split("::", 1)[-1]


def _output_dtype(node: torch.fx.Node) -> torch.dtype | None:
    val = node.meta.get("val")
    # Attention ops return (out, logsumexp, ...); the statistics stay fp32 by design.
    if isinstance(val, (list, tuple)):
        val = val[0] if val else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def stack_frames(stack_trace: str | None) -> list[traceback.FrameSummary]:
    """The frames of an FX node's ``stack_trace`` meta, outermost first."""
    return [
        traceback.FrameSummary(
            m["file"],
            int(m["line"]),
            m["name"].strip(),
            lookup_line=False,
            line=(m["code"] or "").strip() or None,
        )
        for m in _FRAME.finditer(stack_trace or "")
    ]


def node_location(node: torch.fx.Node, tree: Path) -> SourceLocation | None:
    frames = stack_frames(node.meta.get("stack_trace"))
    frame = innermost_user_frame(frames, tree) or (frames[-1] if frames else None)
    if frame is None:
        return None
    # After a graph break the rest of forward is Dynamo's resume function: to_location names the
    # user's one.
    return to_location(frame, tree)


def scan_graphs(graphs: Iterable[torch.fx.GraphModule], tree: Path) -> tuple[list[AmpOp], int]:
    """Matmul/conv-class ops of the forward graphs: those in full precision, and how many ran low."""
    full: Counter[tuple[str, str, SourceLocation | None]] = Counter()
    low = 0
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                continue
            if not is_matmul_class(_base_name(node.target)):
                continue
            dtype = _output_dtype(node)
            if dtype in _LOW_PRECISION:
                low += 1
            elif dtype in _FULL_PRECISION:
                op = str(node.target)
                full[(op, str(dtype).removeprefix("torch."), node_location(node, tree))] += 1
    ops = [AmpOp(op=op, dtype=dtype, count=n, location=loc) for (op, dtype, loc), n in full.items()]
    return ops, low


def is_fp32_gemm_kernel(name: str) -> bool:
    return bool(_GEMM_KERNEL.search(name) and _FP32_KERNEL.search(name) and not _LOW_KERNEL.search(name))


def fp32_kernels(names: Iterable[str], steps_run: int) -> list[AmpOp]:
    """GEMM/conv kernels that ran in fp32 (or fp64), with their launches per step."""
    counted = Counter(n for n in names if is_fp32_gemm_kernel(n))
    return [
        AmpOp(
            op=name,
            dtype="float64" if re.search(r"dgemm|f64|fp64|double", name, re.IGNORECASE) else "float32",
            count=max(1, round(n / max(1, steps_run))),
            source="kernel",
        )
        for name, n in sorted(counted.items())
    ]


def autocast_spans(source: str) -> list[tuple[int, int]]:
    """Line ranges of ``with ...autocast(...)`` blocks and ``@...autocast(...)`` functions."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return []

    def names_autocast(expr: ast.expr) -> bool:
        # The callee's spelling is all there is to go on: torch.autocast, torch.amp.autocast,
        # torch.cuda.amp.autocast, a project's own maybe_autocast(...).
        return "autocast" in ast.unparse(expr.func if isinstance(expr, ast.Call) else expr)

    spans = []
    for node in ast.walk(module):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            hit = any(names_autocast(item.context_expr) for item in node.items)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            hit = any(names_autocast(d) for d in node.decorator_list)
        else:
            continue
        if hit:
            spans.append((node.lineno, node.end_lineno or node.lineno))
    return sorted(spans)


@functools.lru_cache(maxsize=64)
def _file_spans(path: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple(autocast_spans(Path(path).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return ()


def at_autocast_boundary(gb: GraphBreak, tree: Path) -> bool:
    if _AUTOCAST_REASON.search(gb.reason):
        return True
    loc = gb.location
    if loc is None:
        return False
    path = Path(loc.path) if Path(loc.path).is_absolute() else tree / loc.path
    return any(start <= loc.line <= end for start, end in _file_spans(str(path)))


def _capture_backend(graphs: list[torch.fx.GraphModule]) -> Callable[..., Any]:
    def forward(gm: torch.fx.GraphModule, _inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def backward(gm: torch.fx.GraphModule, _inputs: Sequence[Any]) -> Callable[..., Any]:
        # Backward matmuls follow the dtypes forward saved; counting them would double every op.
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward, bw_compiler=backward)


def _profile_kernels(step: Callable[..., Any], inputs: tuple[Any, ...], n: int) -> list[AmpOp]:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step(*inputs)
        torch.cuda.synchronize()
    return fp32_kernels((e.name for e in prof.events() if e.device_type == DeviceType.CUDA), n)


def run(
    spec: ProbeSpec, build: Callable[[], Workload], settings: None
) -> ProbeOutput:  # it has no section of its own
    wl = spec.workload
    amp = "bf16" if wl.amp == "none" else wl.amp
    if amp == "fp16" and spec.device != "cuda":
        return ProbeOutput(
            status="skipped",
            message="fp16 autocast is probed on cuda only; on a CPU runner set the workload's "
            "`amp: bf16` to check it",
        )
    if amp == "bf16" and spec.device == "cuda" and not torch.cuda.is_bf16_supported():
        return ProbeOutput(status="skipped", message="this GPU has no bf16 support; use `amp: fp16`")
    tree = Path(spec.tree)

    torch._dynamo.reset()
    built = build()
    model = steps.prepare(built.model, wl.train)
    graphs: list[torch.fx.GraphModule] = []
    compiled = torch.compile(model, backend=_capture_backend(graphs))
    step = steps.make_step(compiled, wl.train, amp, spec.device)
    step(*built.inputs)
    steps.synchronize(spec.device)
    fp32_ops, low = scan_graphs(graphs, tree)
    if spec.device == "cuda":
        fp32_ops += _profile_kernels(step, built.inputs, spec.section(ProfileSettings).steps)

    torch._dynamo.reset()
    with (
        steps.autocast(amp, spec.device),
        torch.no_grad() if not wl.train else contextlib.nullcontext(),
    ):
        explained = torch._dynamo.explain(model)(*built.inputs)
    torch._dynamo.reset()
    breaks = [gb for gb in graph_breaks_of(explained, tree) if at_autocast_boundary(gb, tree)]

    metrics = AmpMetrics(
        dtype=amp,
        fp32_ops=fp32_ops,
        autocast_breaks=breaks,
        low_precision_ops=low,
    )
    return ProbeOutput(metrics=metrics)
