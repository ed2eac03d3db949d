"""Measured findings read against the structural ones of the same workload.

A slower step, more host work, more peak memory or a slower compile says *that* something got
worse; a new graph break, a recompile, an IR change or full-precision work under autocast in the
same review often says *why*. Those are exact, so the measured finding names them ("likely from
the new graph break at model.py:11") and the matrix picks its cause from them. Pure: findings in,
findings out.
"""

from __future__ import annotations

import re

from perfcheck.core.matrix import because, of_role
from perfcheck.schema import Finding

SHOWN = 3  # causes named in the message; the evidence keeps them all


# Root causes and the failures that follow from them: shown under the cause, not counted again.
# A custom op whose fake (meta) kernel disagrees with the real one makes tracing see wrong shapes,
# so torch.compile and torch.export fail a line or two later, in the user's code or inside torch.
FOLDS: dict[str, tuple[str, ...]] = {"custom_op_check_failed": ("compile_failed", "export_failed")}
TRACERS = {"compile_failed": "torch.compile", "export_failed": "torch.export"}


def _root(f: Finding) -> bool:
    """Whether ``f`` is a root cause its FOLDS follow from: a fake-kernel check that fails anew."""
    from perfcheck.core.probes.custom_ops import fake_check

    return f.severity == "error" and fake_check(str(f.evidence.get("check", "")))


def fold(findings: list[Finding]) -> list[Finding]:
    """``findings`` with the failures that follow from a root cause moved under it."""
    roots = [f for f in findings if f.category in FOLDS and _root(f)]
    if not roots:
        return findings
    root = roots[0]
    follow = [f for f in findings if f.category in FOLDS[root.category] and f.severity == "error"]
    if not follow:
        return findings
    words = ", ".join(
        f"{TRACERS.get(f.category, f.category)} fails"
        + (f" at {f.location.path}:{f.location.line}" if f.location else "")
        for f in follow
    )
    ops = ", ".join(dict.fromkeys(str(r.evidence.get("op", "")) for r in roots))
    out = []
    for f in findings:
        if f in follow:
            continue
        if f is root:
            f = f.model_copy(
                update={
                    "message": f"{f.message}; tracing fails on it: {words} (shown here, not counted again)",
                    "evidence": {**f.evidence, "follows": "\n".join(g.message for g in follow), "ops": ops},
                }
            )
        out.append(f)
    return out


# The exception a crashed probe ended with, as its detail's first line gives it.
_RAISED = re.compile(r"\b(\w+(?:Error|Exception|Exit|Interrupt)): ([^\n(]*)")


def _raised(f: Finding) -> str | None:
    first = str(f.evidence.get("detail", "")).strip().split("\n", 1)[0]
    m = _RAISED.search(first)
    return f"{m.group(1)}: {m.group(2).strip()}" if m else None


def fold_crashes(findings: list[Finding]) -> list[Finding]:
    """One crash per cause: where several probes of one side crashed on the same exception (a
    workload that cannot be imported stops every probe of that side), the first is the finding
    and the others are named under it, not counted again."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        raised = _raised(f) if f.category == "probe_crashed" and f.severity == "error" else None
        if raised is not None:
            groups.setdefault((str(f.evidence.get("side", "")), raised), []).append(f)
    shared = {id(g[0]): g for g in groups.values() if len(g) > 1}  # by the finding that stays
    folded = {id(f) for g in shared.values() for f in g[1:]}
    if not folded:
        return findings
    out = []
    for f in findings:
        if id(f) in folded:
            continue
        group = shared.get(id(f))
        if group is not None:
            others = [g.probe for g in group[1:]]
            side = f.evidence.get("side", "")
            f = f.model_copy(
                update={
                    "message": f"{f.message}; the same error stops the {' and '.join(others)} "
                    f"probe{'s' if len(others) > 1 else ''} on {side} (shown here, not counted again)",
                    "evidence": {**f.evidence, "follows": "\n".join(g.message for g in group[1:])},
                }
            )
        out.append(f)
    return out


def explain(findings: list[Finding]) -> list[Finding]:
    """``findings`` of one workload, each measured one naming the structural findings beside it,
    and what follows from a root cause folded under it."""
    findings = fold(fold_crashes(findings))
    # Which categories are effects and which causes, and how a cause is named, is each category's
    # own (its matrix entry's `role` and `because`, a plugin's too).
    causes = [phrase for f in findings if (phrase := because(f))]
    if not causes:
        return findings
    effects = of_role("effect")
    causes = list(dict.fromkeys(causes))
    named = "; ".join(causes[:SHOWN]) + (f"; and {len(causes) - SHOWN} more" if len(causes) > SHOWN else "")
    out = []
    for f in findings:
        if f.category in effects:
            f = f.model_copy(
                update={
                    "message": f"{f.message}; likely from {named}",
                    "evidence": {**f.evidence, "explained_by": "\n".join(causes)},
                }
            )
        out.append(f)
    return out
