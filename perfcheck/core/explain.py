"""Measured findings, and what follows from a change, read against the structural ones of the
same workload.

A slower step, more host work, more peak memory, a slower compile or other collectives says *that*
something changed; a new graph break, a recompile, an IR change, full-precision work under autocast
or an FSDP unit's settings in the same review often say *why*. Those are exact, so the effect names
them ("likely from the new graph break at model.py:11") and the matrix picks its cause from them.
Pure: findings in, findings out.
"""

from __future__ import annotations

import re

from perfcheck.core.folding import fold_under
from perfcheck.core.matrix import Folds, because, known, matches, of_role, title
from perfcheck.schema import Finding

SHOWN = 3  # causes named in the message; the evidence keeps them all


def _root(f: Finding) -> Folds | None:
    """What follows from ``f`` where it is a root cause (an error whose evidence its category's
    ``folds`` names: a custom op's fake kernel that disagrees with the real one makes tracing see
    wrong shapes, so torch.compile and torch.export fail a line or two later; a new data-dependent
    branch that Dynamo breaks the graph at is the line torch.export fails at)."""
    entry = known().get(f.category)
    folds = entry.folds if entry is not None else None
    if folds is None or f.severity != "error":
        return None
    if folds.when is not None and not any(matches(w, f.evidence) for w in folds.when):
        return None
    return folds


def _at_line(a: Finding, b: Finding) -> bool:
    x, y = a.location, b.location
    return x is not None and y is not None and (x.path, x.line) == (y.path, y.line)


def _root_of(f: Finding, roots: list[tuple[Finding, Folds]]) -> Finding | None:
    """The root cause an error follows from: the first whose folds name its category, and where
    they are only at the root's line, at that line."""
    if f.severity != "error":
        return None
    for root, folds in roots:
        if root is not f and f.category in folds.categories and (folds.at == "anywhere" or _at_line(root, f)):
            return root
    return None


def _said(f: Finding) -> str:
    """A folded failure in one line: its message, and the first line of torch's error where it has one."""
    error = (str(f.evidence.get("error", "")).strip().splitlines() or [""])[0]
    return f"{f.message}: {error}" if error and error not in f.message else f.message


def fold(findings: list[Finding]) -> list[Finding]:
    """``findings`` with the failures that follow from a root cause moved under it."""
    roots = [(f, folds) for f in findings if (folds := _root(f)) is not None]
    if not roots:
        return findings

    def said(f: Finding, follow: list[Finding]) -> Finding:
        words = ", ".join(
            title(g.category) + (f" at {g.location.path}:{g.location.line}" if g.location else "")
            for g in follow
        )
        # The ops of every root of its kind: several custom ops failing opcheck are said once.
        ops = ", ".join(
            dict.fromkeys(
                str(r.evidence["op"]) for r, _ in roots if r.category == f.category and "op" in r.evidence
            )
        )
        return f.model_copy(
            update={
                "message": f"{f.message}; tracing fails on it: {words} (shown here, not counted again)",
                "evidence": {
                    **f.evidence,
                    "follows": "\n".join(_said(g) for g in follow),
                    **({"ops": ops} if ops else {}),
                },
            }
        )

    return fold_under(findings, lambda f: _root_of(f, roots), said)


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


_LIKELY = "; likely from "


def own_words(f: Finding) -> str:
    """``f``'s message without the causes ``explain`` named in it: what a report shows where the
    finding is listed under its cause already."""
    if "explained_by" not in f.evidence or _LIKELY not in f.message:
        return f.message
    return f.message.rsplit(_LIKELY, 1)[0]


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
                    "message": f"{f.message}{_LIKELY}{named}",
                    "evidence": {**f.evidence, "explained_by": "\n".join(causes)},
                }
            )
        out.append(f)
    return out
