"""The export probe: ``torch.export`` the workload, render its graph canonically and hash it.

The canonical text holds what decides the program (ops, wiring, dtypes, shapes, the graph
signature) and nothing volatile (stack traces, module stacks, source lines), so equal programs
hash equal on any machine and a changed hash is a real IR change.
"""

from __future__ import annotations

import hashlib
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.fx

from perfcheck.core.probes.export import ExportMetrics, ExportSettings
from perfcheck.runner import step as steps
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.runner.source.locate import exception_location
from perfcheck.spec import ProbeSpec


def _meta(node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        shape = ", ".join(str(s) for s in val.shape)
        return f"{str(val.dtype).removeprefix('torch.')}[{shape}]"
    if isinstance(val, (list, tuple)):
        return (
            "("
            + ", ".join(
                f"{str(v.dtype).removeprefix('torch.')}[{', '.join(str(s) for s in v.shape)}]"
                if isinstance(v, torch.Tensor)
                else type(v).__name__
                for v in val
            )
            + ")"
        )
    return type(val).__name__ if val is not None else "-"


def _arg(a: Any) -> str:
    if isinstance(a, torch.fx.Node):
        return f"%{a.name}"
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner})"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k}: {_arg(v)}" for k, v in a.items()) + "}"
    if isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(a)
    return repr(a)


def op_name(target: Any) -> str:
    return (
        str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))
    )


def canonical_graph(ep: torch.export.ExportedProgram) -> str:
    lines = ["# signature"]
    for spec in ep.graph_signature.input_specs:
        lines.append(f"in  {spec.kind.name.lower()} {spec.arg.name} <- {spec.target or '-'}")
    for spec in ep.graph_signature.output_specs:
        lines.append(
            f"out {spec.kind.name.lower()} {getattr(spec.arg, 'name', spec.arg)} -> {spec.target or '-'}"
        )
    lines.append("# graph")
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            lines.append(f"%{node.name}: {_meta(node)} = placeholder")
        elif node.op == "output":
            lines.append(f"return {_arg(node.args[0])}")
        else:
            args = ", ".join(
                [_arg(a) for a in node.args] + [f"{k}={_arg(v)}" for k, v in node.kwargs.items()]
            )
            lines.append(f"%{node.name}: {_meta(node)} = {op_name(node.target)}({args})")
    return "\n".join(lines) + "\n"


def op_counts(ep: torch.export.ExportedProgram) -> dict[str, int]:
    counted = Counter(op_name(n.target) for n in ep.graph.nodes if n.op == "call_function")
    return dict(sorted(counted.items()))


def denied(ops: dict[str, int], allow: list[str], deny: list[str]) -> list[str]:
    out = {op for op in ops if op in deny}
    if allow:
        out |= {op for op in ops if op not in allow}
    return sorted(out)


def _error_kind(err: BaseException) -> str | None:
    """What torch says the error is: a UserError carries its type (DYNAMIC_CONTROL_FLOW, ...), a
    guard on a data-dependent value is its own class. None: torch does not say."""
    kind = getattr(err, "error_type", None)
    name = getattr(kind, "name", None)
    if isinstance(name, str):
        return name
    if "DataDependent" in type(err).__name__:
        return "DATA_DEPENDENT"
    return None


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: ExportSettings) -> ProbeOutput:
    built = build()
    model = steps.prepare(built.model, spec.workload.train)
    try:
        ep = torch.export.export(model, built.inputs, strict=settings.strict)
        if settings.decompose:
            ep = ep.run_decompositions()
    except Exception as err:  # export errors come in many types; each is a finding, not a crash
        message = str(err).strip()
        # torch's whole error, in the probe's log: what a fixed export's verify command shows of base.
        traceback.print_exception(err, file=sys.stderr)
        return ProbeOutput(
            status="failed",
            message=f"{type(err).__name__}: {message.splitlines()[0] if message else ''}",
            metrics=ExportMetrics(
                error_type=type(err).__name__,
                error_kind=_error_kind(err),
                error_message=message[:4000],
                error_location=exception_location(err, Path(spec.tree)),
            ),
        )
    text = canonical_graph(ep)
    ops = op_counts(ep)
    metrics = ExportMetrics(
        graph_sha256=hashlib.sha256(text.encode()).hexdigest(),
        graph_text=text,
        op_counts=ops,
        denied_ops=denied(ops, settings.allow_ops, settings.deny_ops),
    )
    return ProbeOutput(metrics=metrics)
