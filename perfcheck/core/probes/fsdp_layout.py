"""The `fsdp` probe's layout comparison (perfcheck/core/probes/fsdp.py is its descriptor): the
FSDP units as FSDP2 groups and runs them, the DTensor layout of every parameter and gradient, the
DTensors the model redistributes and its outputs, base against head: changes the FX graph does not
show, as one `dtensor_layout_changed` finding each (units, parameters, each redistribute, outputs).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpUnit, shared
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding


def unit_said(name: str | None) -> str:
    """A unit as a finding says it: its name, "the root" or "outside FSDP"."""
    return "outside FSDP" if name is None else ("the root" if name == "" else name)


def placements_said(p: list[str]) -> str:
    """A tensor's DTensor placements as a finding says them ("not a DTensor": a plain tensor)."""
    return ", ".join(p) if p else "not a DTensor"


def same_units(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[FsdpUnit, FsdpUnit]]:
    """(base, head) of every unit that groups the same modules on both sides."""
    before = {tuple(u.modules): u for u in b.units}
    return [(before[tuple(u.modules)], u) for u in h.units if tuple(u.modules) in before]


def _owner(module: str, m: FsdpMetrics) -> str | None:
    """The unit that shards ``module``'s parameters on one side (None: none, or several)."""
    return shared([p.unit for p in m.params if p.name.startswith(f"{module}.")])


def _unit_changes(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[str, str, SourceLocation | None]]:
    """(change, what, where) for every unit FSDP groups differently on head, or runs differently:
    units merged (one fully_shard of several modules), split, added, gone; its
    reshard_after_forward or mixed precision."""
    before = {tuple(u.modules): u for u in b.units}
    after = {tuple(u.modules): u for u in h.units}
    base_unit = {m: u for u in b.units for m in u.modules}
    head_unit = {m: u for u in h.units for m in u.modules}
    out: list[tuple[str, str, SourceLocation | None]] = []
    for old, u in same_units(b, h):
        where = u.sharded_at or old.sharded_at
        for field in ("reshard_after_forward", "param_dtype", "reduce_dtype", "output_dtype"):
            was, now = getattr(old, field), getattr(u, field)
            if was != now:
                change = field if field == "reshard_after_forward" else "mixed_precision"
                out.append((change, f"{unit_said(u.name)}: {field} {was} → {now}", where))
    for key, u in after.items():
        if key in before:
            continue
        was = list(dict.fromkeys(base_unit[m].name for m in u.modules if m in base_unit))
        if len(u.modules) > 1:
            base = f"; base: {len(was)} unit{'s' if len(was) != 1 else ''}" if was else ""
            out.append(
                (
                    "merged",
                    f"{u.name} are one unit on head (one fully_shard of {len(u.modules)} modules){base}",
                    u.sharded_at,
                )
            )
        elif was:
            out.append(
                ("split", f"{u.name} has a unit of its own on head; base: part of {was[0]}", u.sharded_at)
            )
        else:
            out.append(
                (
                    "wrapped",
                    f"{u.name} has a unit of its own on head; base: sharded by "
                    f"{unit_said(_owner(u.name, b))}",
                    u.sharded_at,
                )
            )
    gone = [m for key in before if key not in after for m in key if m not in head_unit]
    for m in gone:  # (a module grouped otherwise on head is said above)
        owner = unit_said(_owner(m, h))
        out.append(
            ("unwrapped", f"{m} has no unit of its own on head: its parameters are sharded by {owner}", None)
        )
    return out


def _param_changes(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[str, str, str, SourceLocation | None]]:
    """(parameter, what changed, how, where) for every parameter whose layout differs; a move to
    another unit where the units themselves changed is the units' change (_unit_changes)."""
    before = {p.name: p for p in b.params}
    regrouped = {u.name for u in b.units} ^ {u.name for u in h.units}
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
        elif old.unit != p.unit and old.unit not in regrouped and p.unit not in regrouped:
            out.append((p.name, "unit", f"sharded by {unit_said(old.unit)} → by {unit_said(p.unit)}", where))
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
    """Every change of ``wl``'s units and DTensor layouts from base (``b``) to head (``h``)."""
    out = []
    units = _unit_changes(b, h)
    if units:
        change, what, where = units[0]
        more = f" and {len(units) - 1} more unit change{'s' if len(units) > 2 else ''}" if units[1:] else ""
        evidence: dict[str, Any] = {
            "kind": "unit",
            "change": change,
            "unit_changes": "\n".join(w for _, w, _ in units[:50]),
            "counts": dict(Counter(c for c, _, _ in units)),
        }
        at = where or next((w for _, _, w in units if w is not None), None)
        out.append(_layout_finding(wl, f"FSDP units: {what}{more}", evidence, at=at))
    changes = _param_changes(b, h)
    if changes:
        name, what, how, where = changes[0]
        more = (
            f" and {len(changes) - 1} more parameter{'s' if len(changes) > 2 else ''}" if changes[1:] else ""
        )
        evidence = {
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
