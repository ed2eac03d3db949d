"""The `fsdp` probe's layout comparison (perfcheck/core/probes/fsdp.py is its descriptor): the
DTensor layout (placements and mesh) of every parameter and gradient, the DTensors the model
redistributes and its outputs, base against head: changes the FX graph does not show, as one
`dtensor_layout_changed` finding each (parameters, each redistribute, outputs). How FSDP groups
the modules into units and how each unit runs are no layout: perfcheck/core/probes/fsdp_units.py
compares those.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from perfcheck.core.probes.fsdp_models import FsdpMetrics
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding


def placements_said(p: list[str]) -> str:
    """A tensor's DTensor placements as a finding says them ("not a DTensor": a plain tensor)."""
    return ", ".join(p) if p else "not a DTensor"


def _param_changes(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[str, str, str, SourceLocation | None]]:
    """(parameter, what changed, how, where) for every parameter whose placements or mesh differ,
    or its gradient's placements (which unit shards it is the units' comparison, fsdp_units.py)."""
    before = {p.name: p for p in b.params}
    out = []
    for p in h.params:
        old = before.get(p.name)
        if old is None:
            continue
        where = p.sharded_at or old.sharded_at
        if old.placements != p.placements or old.mesh != p.mesh:
            mesh = f" on mesh {old.mesh} → {p.mesh}" if old.mesh != p.mesh else ""
            out.append(
                (
                    p.name,
                    "placement",
                    f"{placements_said(old.placements)} → {placements_said(p.placements)}{mesh}",
                    where,
                )
            )
        elif old.grad_placements != p.grad_placements:
            how = f"{placements_said(old.grad_placements or [])} → {placements_said(p.grad_placements or [])}"
            out.append((p.name, "gradient", f"gradient {how}", where))
    return out


def _at(loc: SourceLocation | None) -> tuple[str, int]:
    return (loc.path, loc.line) if loc else ("?", 0)


def _redistributes(m: FsdpMetrics) -> Counter[tuple[str, str, str, int]]:
    return Counter(
        {
            (placements_said(r.source), placements_said(r.target), *_at(r.location)): r.count
            for r in m.redistributes
        }
    )


def _layout_finding(
    wl: str, message: str, evidence: dict[str, Any], severity: str = "error", at: SourceLocation | None = None
) -> Finding:
    return Finding(
        category="dtensor_layout_changed",
        severity=severity,  # type: ignore[arg-type]
        workload=wl,
        probe="fsdp",
        location=at,
        message=message,
        evidence=evidence,
    )


def layout_findings(wl: str, b: FsdpMetrics, h: FsdpMetrics) -> list[Finding]:
    """Every change of ``wl``'s DTensor layouts from base (``b``) to head (``h``)."""
    out = []
    changes = _param_changes(b, h)
    if changes:
        name, what, how, where = changes[0]
        more = (
            f" and {len(changes) - 1} more parameter{'s' if len(changes) > 2 else ''}" if changes[1:] else ""
        )
        evidence: dict[str, Any] = {
            "kind": "parameter",
            "parameter": name,
            "change": what,
            "changes": [f"{n}: {h}" for n, _, h, _ in changes[:50]],
            "counts": dict(Counter(w for _, w, _, _ in changes)),
        }
        out.append(_layout_finding(wl, f"{name}: {how}{more}", evidence, at=where))
    before, after = _redistributes(b), _redistributes(h)
    for (src, dst, path, line), n in sorted((after - before).items()):
        at = next(
            (r.location for r in h.redistributes if r.location and _at(r.location) == (path, line)), None
        )
        message = (
            f"a DTensor is redistributed {src} → {dst} {n}× per step on head"
            + (f" at {path}:{line}" if at else "")
            + " (the FX graph shows no such change; its collective does run)"
        )
        out.append(
            _layout_finding(
                wl, message, {"kind": "redistribute", "source": src, "target": dst, "count": n}, at=at
            )
        )
    for (src, dst, path, line), n in sorted((before - after).items()):
        message = (
            f"head no longer redistributes a DTensor {src} → {dst} (base: {n}× per step at {path}:{line})"
        )
        gone = {"kind": "redistribute_removed", "source": src, "target": dst, "count": n}
        out.append(_layout_finding(wl, message, gone, severity="warning"))
    if b.outputs != h.outputs:
        shown = [[placements_said(p) for p in m.outputs] or "none" for m in (b, h)]
        message = f"the model's DTensor outputs are laid out differently: {shown[0]} → {shown[1]}"
        out.append(_layout_finding(wl, message, {"kind": "output"}))
    return out
