"""Measured findings read against the structural ones of the same workload.

A slower step, more host work, more peak memory or a slower compile says *that* something got
worse; a new graph break, a recompile, an IR change or full-precision work under autocast in the
same review often says *why*. Those are exact, so the measured finding names them ("likely from
the new graph break at model.py:11") and the matrix picks its cause from them. Pure: findings in,
findings out.
"""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.schema import Finding

# What a measured finding can be explained by, and how to name that cause in a sentence.
EFFECTS = frozenset(
    {"throughput_regression", "host_overhead_regression", "memory_regression", "compile_latency_regression"}
)
SHOWN = 3  # causes named in the message; the evidence keeps them all


def _at(f: Finding) -> str:
    loc = f.location
    return f" at {loc.path}:{loc.line}" if loc is not None else ""


def _break(f: Finding) -> str:
    return f"the new graph break{_at(f)} ({f.evidence.get('break_type', 'a break')})"


def _recompile(f: Finding) -> str:
    return f"the new recompilation{_at(f)}"


def _ir(f: Finding) -> str:
    reading = f.evidence.get("reading")
    if reading:
        return f"the exported graph's change ({reading})"
    ops = f.evidence.get("op_diff")
    if isinstance(ops, dict) and ops:
        # The op names without the aten. prefix and overload: "relu → gelu" reads at a glance.
        short = {str(op).removeprefix("aten.").removesuffix(".default"): v for op, v in ops.items()}
        gone = [op for op, (b, h) in short.items() if h < b]
        new = [op for op, (b, h) in short.items() if h > b]
        if gone and new and len(gone) + len(new) <= 4:
            return f"the exported graph's change ({', '.join(gone)} → {', '.join(new)})"
    return "the exported graph's change"


def _amp(f: Finding) -> str:
    return f"full-precision work under autocast{_at(f)}"


def _kernels(f: Finding) -> str:
    return "the changed kernel mix"


CAUSES: dict[str, Callable[[Finding], str]] = {
    "graph_break_added": _break,
    "recompile": _recompile,
    "export_ir_changed": _ir,
    "amp_fp32_fallback": _amp,
    "kernel_mix_changed": _kernels,
}


def explain(findings: list[Finding]) -> list[Finding]:
    """``findings`` of one workload, each measured one naming the structural findings beside it."""
    causes = [CAUSES[f.category](f) for f in findings if f.category in CAUSES]
    if not causes:
        return findings
    causes = list(dict.fromkeys(causes))
    named = "; ".join(causes[:SHOWN]) + (f"; and {len(causes) - SHOWN} more" if len(causes) > SHOWN else "")
    out = []
    for f in findings:
        if f.category in EFFECTS:
            f = f.model_copy(
                update={
                    "message": f"{f.message}; likely from {named}",
                    "evidence": {**f.evidence, "explained_by": "\n".join(causes)},
                }
            )
        out.append(f)
    return out
