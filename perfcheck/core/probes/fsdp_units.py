"""The `fsdp` probe's comparison of its FSDP units (perfcheck/core/probes/fsdp.py is its descriptor):
how FSDP2 groups the model's modules into units (one per ``fully_shard`` call) and how each unit
runs (``reshard_after_forward``, its ``MixedPrecisionPolicy``, its ``OffloadPolicy``), base against
head, as one `fsdp_unit_changed` finding.

A unit's settings are no DTensor layout (its parameters stay ``Shard(dim=0)`` whatever they are;
perfcheck/core/probes/fsdp_layout.py compares placements and meshes): they decide what the unit
all-gathers and reduce-scatters, in which dtype and when, and what it holds between forward and
backward. So the finding is a cause (its matrix entry's ``because``), and the collective drift and
lost overlap that follow from it are read as its effects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpUnit, shared
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding

# A unit's settings as FSDP2 runs them, each with the change it is (the matrix's rules pick the
# cause from it): cast_forward_inputs is the MixedPrecisionPolicy's too.
_SETTINGS = {
    "reshard_after_forward": "reshard_after_forward",
    "param_dtype": "mixed_precision",
    "reduce_dtype": "mixed_precision",
    "output_dtype": "mixed_precision",
    "cast_forward_inputs": "mixed_precision",
    "offload_policy": "offload",
}
# Recorded since perfcheck knew them: a side whose result lacks one (a record of base written
# before) does not know it, which is no change.
_KNOWN_LATER = frozenset({"cast_forward_inputs", "offload_policy"})
_NAMED = 4  # units a change names before it counts the rest


def unit_said(name: str | None) -> str:
    """A unit as a finding says it: its name, "the root" or "outside FSDP"."""
    return "outside FSDP" if name is None else ("the root" if name == "" else name)


def same_units(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[FsdpUnit, FsdpUnit]]:
    """(base, head) of every unit that groups the same modules on both sides."""
    before = {tuple(u.modules): u for u in b.units}
    return [(before[tuple(u.modules)], u) for u in h.units if tuple(u.modules) in before]


@dataclass(frozen=True)
class UnitChange:
    change: str  # reshard_after_forward, mixed_precision, offload; merged, split, wrapped, unwrapped, moved
    what: str  # as the finding says it
    where: SourceLocation | None  # the workload's fully_shard line that makes it, where it has one


def _units_said(names: list[str], every: int) -> str:
    """Units as a change names them: "layers.0, layers.1 and layers.2", "every unit (5)",
    "layers.0, layers.1, layers.2 and 5 more units"."""
    said = [unit_said(n) for n in names]
    if len(said) == every and every > 1:
        return f"every unit ({every})"
    if len(said) > _NAMED:
        return f"{', '.join(said[: _NAMED - 1])} and {len(said) - _NAMED + 1} more units"
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


def _settings(b: FsdpMetrics, h: FsdpMetrics) -> list[UnitChange]:
    """Every setting that differs on units grouping the same modules, the units that changed it
    the same way named as one: "layers.0, layers.1 and layers.2: reshard_after_forward True → False"."""
    changed: dict[tuple[str, str, str], list[FsdpUnit]] = {}
    for old, u in same_units(b, h):
        for field in _SETTINGS:
            was, now = getattr(old, field), getattr(u, field)
            if was == now or (field in _KNOWN_LATER and None in (was, now)):
                continue
            changed.setdefault((field, str(was), str(now)), []).append(u)
    out = []
    for (field, was, now), units in changed.items():
        where = next((u.sharded_at for u in units if u.sharded_at is not None), None)
        what = f"{_units_said([u.name for u in units], len(h.units))}: {field} {was} → {now}"
        out.append(UnitChange(_SETTINGS[field], what, where))
    return out


def _owner(module: str, m: FsdpMetrics) -> str | None:
    """The unit that shards ``module``'s parameters on one side (None: none, or several)."""
    return shared([p.unit for p in m.params if p.name.startswith(f"{module}.")])


def _grouping(b: FsdpMetrics, h: FsdpMetrics) -> list[UnitChange]:
    """Every unit FSDP groups differently on head: units merged (one fully_shard of several
    modules), split, added, gone."""
    before = {tuple(u.modules): u for u in b.units}
    after = {tuple(u.modules): u for u in h.units}
    base_unit = {m: u for u in b.units for m in u.modules}
    head_unit = {m: u for u in h.units for m in u.modules}
    out = []
    for key, u in after.items():
        if key in before:
            continue
        was = list(dict.fromkeys(base_unit[m].name for m in u.modules if m in base_unit))
        if len(u.modules) > 1:
            base = f"; base: {len(was)} unit{'s' if len(was) != 1 else ''}" if was else ""
            what = f"{u.name} are one unit on head (one fully_shard of {len(u.modules)} modules){base}"
            out.append(UnitChange("merged", what, u.sharded_at))
        elif was:
            what = f"{u.name} has a unit of its own on head; base: part of {was[0]}"
            out.append(UnitChange("split", what, u.sharded_at))
        else:
            what = f"{u.name} has a unit of its own on head; base: sharded by {unit_said(_owner(u.name, b))}"
            out.append(UnitChange("wrapped", what, u.sharded_at))
    gone = [m for key in before if key not in after for m in key if m not in head_unit]
    for m in gone:  # (a module grouped otherwise on head is said above)
        what = f"{m} has no unit of its own on head: its parameters are sharded by {unit_said(_owner(m, h))}"
        out.append(UnitChange("unwrapped", what, None))
    return out


def _moved(b: FsdpMetrics, h: FsdpMetrics) -> list[UnitChange]:
    """Parameters another unit shards on head, where both units are there on both sides (a move
    to a unit that was added or is gone is that unit's change, above)."""
    before = {p.name: p for p in b.params}
    regrouped = {u.name for u in b.units} ^ {u.name for u in h.units}
    out = []
    for p in h.params:
        old = before.get(p.name)
        if old is None or old.unit == p.unit or old.unit in regrouped or p.unit in regrouped:
            continue
        what = f"{p.name} is sharded by {unit_said(p.unit)} on head; base: by {unit_said(old.unit)}"
        out.append(UnitChange("moved", what, p.sharded_at or old.sharded_at))
    return out


def unit_changes(b: FsdpMetrics, h: FsdpMetrics) -> list[UnitChange]:
    """How ``h``'s units run and group differently from ``b``'s: settings first."""
    return [*_settings(b, h), *_grouping(b, h), *_moved(b, h)]


def unit_findings(wl: str, b: FsdpMetrics, h: FsdpMetrics) -> list[Finding]:
    """One `fsdp_unit_changed` finding for every change of ``wl``'s units, base (``b``) to head
    (``h``), or none."""
    changes = unit_changes(b, h)
    if not changes:
        return []
    first = changes[0]
    n = len(changes) - 1
    more = f" and {n} more unit change{'s' if n != 1 else ''}" if n else ""
    evidence: dict[str, Any] = {
        "change": first.change,
        "summary": first.what + more,
        "changes": "\n".join(c.what for c in changes[:50]),
        "counts": dict(Counter(c.change for c in changes)),
    }
    return [
        Finding(
            category="fsdp_unit_changed",
            # A warning: the unit's settings are the workload's own choice, written at its
            # fully_shard call, and not slower or larger by themselves; what they cost is
            # measured and fails the check on its own (the collectives that changed, the overlap
            # lost, a slower step, more memory), each naming this change as its likely cause.
            severity="warning",
            workload=wl,
            probe="fsdp",
            location=first.where or next((c.where for c in changes if c.where is not None), None),
            message=first.what + more,
            evidence=evidence,
        )
    ]
