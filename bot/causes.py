"""One line on the likely cause of a finding, refined by its evidence where the evidence says more."""

from __future__ import annotations

from perfcheck.schema import Finding

_BY_CATEGORY = {
    "graph_break_added": "Dynamo could not trace this line, so the graph is split here and the rest of the "
    "function runs as another graph.",
    "graph_break_removed": "this line no longer splits the graph.",
    "recompile": "a guard on a shape, dtype or Python value failed, so the function compiles again: "
    "specialisation on a value that changes between calls.",
    "export_ir_changed": "the traced program differs: new or different ops, a decomposition change, or "
    "dtype/shape promotion.",
    "export_op_denied": "the graph now contains an op the project's export allow/deny list rejects.",
    "export_failed": "torch.export cannot trace the model: often data-dependent control flow or an "
    "unsupported Python construct.",
    "probe_crashed": "the probe process raised or died: an error in the workload, OOM or a segfault.",
    "probe_timeout": "the probe did not finish in time: a hang, a deadlock or a far slower compile.",
    "throughput_regression": "more or slower kernels per step: look for new graph breaks, recompiles or an "
    "exported-IR change in this review, then diff the profiler traces.",
    "memory_regression": "lost fusion, more saved activations, or dtype promotion.",
    "compile_latency_regression": "more graphs, more recompiles, autotuning, or larger graphs.",
    "environment_mismatch": "the two sides ran on different machines or drivers; rerun both on one runner.",
    "rank_graph_mismatch": "Python that depends on the rank (or on anything that differs between ranks) "
    "is traced into the graph, so ranks run different programs: collectives can mismatch and hang.",
    "collective_drift": "DDP's buckets were re-split (parameter order, sizes or dtypes changed) or a "
    "collective moved across a graph break.",
    "ddp_overlap_drop": "gradients become ready later: DDPOptimizer's bucket splits lost (e.g. "
    "`torch._dynamo.config.optimize_ddp = False`), a graph break inside the DDP forward, or compiled "
    "autograd off.",
    "amp_fp32_fallback": "an explicit `.float()` or a disabled autocast region around a matmul/conv, or an "
    "op without a low-precision kernel.",
    "custom_op_check_failed": "the op's fake (meta) implementation disagrees with the real kernel, or its "
    "autograd registration is missing.",
    "kernel_mix_changed": "lost fusion, a fallback kernel or extra copies: compare the two profiles with "
    "`perfcheck trace diff`.",
}

_BY_BREAK_TYPE = (
    (
        "Tensor.item()",
        "`Tensor.item()` moves a value to Python; keep it on the device (`torch.where`) or set "
        "`torch._dynamo.config.capture_scalar_outputs = True`.",
    ),
    (
        "print",
        "a `print`/logging call inside the compiled region; move it out or list the function in "
        "`torch._dynamo.config.reorderable_logging_functions`.",
    ),
    (
        "logging",
        "a logging call inside the compiled region; list it in "
        "`torch._dynamo.config.reorderable_logging_functions` or move it out.",
    ),
    ("numpy", "NumPy calls on tensors leave the graph; use the torch equivalent."),
    ("data-dependent", "Python control flow on a tensor's value; use `torch.cond` or `torch.where`."),
    ("skip", "Dynamo was told to skip this function (`torch._dynamo.disable` or a skipfile)."),
    ("autocast", "an autocast region boundary inside the compiled function."),
)


def likely_cause(finding: Finding) -> str:
    if finding.category in ("graph_break_added",):
        kind = str(finding.evidence.get("break_type", ""))
        for needle, cause in _BY_BREAK_TYPE:
            if needle.lower() in kind.lower():
                return cause
    return _BY_CATEGORY.get(finding.category, "")
