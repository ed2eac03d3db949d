"""Findings that only follow from another moved under it: said there, not counted beside it.

Pure and shared by the folds that decide differently what follows from what (explain.fold: a
custom op's bad fake kernel and the tracing failures after it, a new break and torch.export
failing at its line; the compile probe: breaks Dynamo takes only in the code after a new break)."""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.schema import Finding


def fold_under(
    findings: list[Finding],
    root_of: Callable[[Finding], Finding | None],
    said: Callable[[Finding, list[Finding]], Finding],
) -> list[Finding]:
    """``findings`` without each one ``root_of`` names a root for, and each root as ``said`` with
    the findings it took in (in their order); the others as they are, in their order."""
    under: dict[int, list[Finding]] = {}
    for f in findings:
        root = root_of(f)
        if root is not None and root is not f:
            under.setdefault(id(root), []).append(f)
    if not under:
        return findings
    folded = {id(f) for follow in under.values() for f in follow}
    return [said(f, under[id(f)]) if id(f) in under else f for f in findings if id(f) not in folded]
