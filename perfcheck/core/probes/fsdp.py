"""The `fsdp` probe, torch-free side: FSDP2 (``fully_shard``) training under eager and compiled
variants, written in the plugin shape (perfcheck/core/probes/kind.py): its settings, its metrics and its own
finding categories live here, the run function in perfcheck/runner/probes/fsdp_probe.py.

What it compares, base against head, per variant: how many graphs Dynamo compiles for each
function of the model (N identical layers served by one graph is the healthy case), the
collectives of one training step and the FSDP unit each belongs to, the share of them hidden
behind compute, the graphs each rank compiled, the FSDP units as FSDP2 groups them (one per
``fully_shard`` call, with its ``reshard_after_forward`` and mixed precision as they run) and the
DTensor layout of every parameter and gradient (placements, mesh, the unit that shards it) and of
activations the model redistributes: changes the FX graph does not show.

A unit of several modules (``fully_shard([block0, block1])``) is named by its modules joined with
" + ", never with commas (FSDP's own name for it, "block0, block1", would read as two units).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcheck.core.markdown import Figure
from perfcheck.core.probes.ddp import RankGraphs, first_rank_mismatch
from perfcheck.core.probes.kind import (
    VARIANT_FAILED,
    Compared,
    ProbeKind,
    Row,
    failed_variants,
    settled,
    status_cell,
)
from perfcheck.measures import GraphBreak, SourceLocation
from perfcheck.schema import Finding, ProbeResult, WorkloadReview
from perfcheck.settings import SettingsView

Variant = Literal["eager", "compiled_layers", "compiled_model"]
Dtype = Literal["float32", "bfloat16", "float16"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FsdpSettings(_Model):
    """The `fsdp:` section of perfcheck.yml."""

    world_size: int = Field(
        default=2, ge=1, description="ranks (one per GPU with nccl; ranks share GPUs beyond)"
    )
    backend: Literal["auto", "gloo", "nccl"] = Field(
        default="auto", description="auto: nccl on cuda, else gloo"
    )
    wrap: list[str] = Field(
        default=[],
        description="class names of the modules that get a fully_shard of their own before the root "
        "(the decoder layer's class, say); empty: every class that repeats in a ModuleList or "
        "Sequential. A workload whose build() applies fully_shard itself keeps its own wrapping.",
    )
    reshard_after_forward: bool | None = Field(
        default=None,
        description="free the gathered parameters after forward; unset: FSDP2's default (every unit "
        "but the root, which keeps its parameters for backward)",
    )
    param_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.param_dtype")
    reduce_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.reduce_dtype")
    variants: list[Variant] = Field(
        default=["eager", "compiled_layers", "compiled_model"],
        min_length=1,
        description="eager; each wrapped layer compiled (module.compile()); the whole model compiled",
    )
    steps: int = Field(default=4, ge=2, description="training steps per variant (the first compiles)")


def unit_name(modules: list[str]) -> str:
    """A unit's name: its module's path ('' the root); a unit of several modules, their paths
    joined by " + "."""
    return " + ".join(modules)


def shared(values: list[Any]) -> Any:
    """The value all of ``values`` share; None when they differ or there are none."""
    return values[0] if values and all(v == values[0] for v in values) else None


class FsdpUnit(_Model):
    """One FSDP unit as FSDP2 holds it: the module or modules one fully_shard call sharded, whose
    parameters are all-gathered and reduce-scattered together."""

    name: str = Field(description="'' the root; several modules: their paths joined by ' + '")
    modules: list[str] = Field(description="the paths of the modules it groups ('' the root)")
    reshard_after_forward: bool | int | None = Field(
        default=None,
        description="as FSDP runs it (FSDP2's default: True, the root False); an int: the ranks it "
        "reshards to; None: not known",
    )
    param_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.param_dtype")
    reduce_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.reduce_dtype")
    output_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.output_dtype")
    params: int = Field(default=0, ge=0, description="parameters it shards")
    sharded_at: SourceLocation | None = Field(
        default=None, description="the workload's own fully_shard call; None: perfcheck's wrap"
    )


class ParamLayout(_Model):
    name: str = Field(description="the parameter's qualified name")
    unit: str | None = Field(
        description="the FSDP unit (module path; '' is the root) sharding it; None: none"
    )
    placements: list[str] = Field(description="DTensor placements, e.g. ['Shard(dim=0)']; []: a plain tensor")
    mesh: list[int] = Field(default=[], description="the device mesh's shape")
    dtype: str
    grad_placements: list[str] | None = Field(
        default=None, description="its gradient's placements after backward"
    )
    sharded_at: SourceLocation | None = Field(
        default=None,
        description="the workload's own fully_shard / distribute_tensor call; None: perfcheck's wrap",
    )


class Redistribute(_Model):
    """A DTensor the model's own code moved to another layout during a step."""

    source: list[str]
    target: list[str]
    mesh: list[int] = []
    shape: list[int] = []
    location: SourceLocation | None = None
    count: int = Field(default=1, ge=1, description="calls per step")


class UnitCollective(_Model):
    op: str = Field(description="all_gather, reduce_scatter, all_reduce, ...")
    unit: str | None = Field(description="the FSDP unit that issued it ('' the root); None: outside FSDP")
    dtype: str
    bytes: int = Field(ge=0, description="the unsharded message of one call")
    group_size: int = Field(ge=1)
    count: int = Field(default=1, ge=1, description="calls per step")


class GraphGroup(_Model):
    """The graphs Dynamo compiled for one function of the model."""

    code: str = Field(description="Class.function, or the function's name")
    location: SourceLocation | None = None
    graphs: int = Field(ge=0, description="graphs compiled for it (recompiles included)")
    distinct: int = Field(ge=0, description="of those, graphs with different code")
    modules: int = Field(
        default=0, ge=0, description="modules of its class in the model (the layers it serves)"
    )
    guard: str | None = Field(default=None, description="the first guard that failed, making another graph")


class FsdpVariant(_Model):
    variant: Variant
    step_ms: float | None = Field(default=None, ge=0, description="median step time on rank 0")
    graph_count: int = Field(default=0, ge=0)
    graph_breaks: list[GraphBreak] = Field(
        default=[], description="breaks in the workload's code, not FSDP's"
    )
    fsdp_breaks: int = Field(
        default=0, ge=0, description="breaks inside torch.distributed (FSDP's own hooks)"
    )
    recompiles: int = Field(default=0, ge=0)
    graphs: list[GraphGroup] = []
    ranks: list[RankGraphs] = []
    collectives: list[UnitCollective] = []
    comm_overlap_pct: float | None = Field(default=None, ge=0, le=100)
    peak_memory_mb: list[float] = Field(default=[], description="per rank: CUDA peak allocated, CPU peak RSS")
    rank_differs_at: SourceLocation | None = Field(
        default=None,
        description="where ranks' graphs differ: the line that made the first node of the first "
        "differing graph that is not the same on rank 0 and the first rank that differs",
    )
    rank_differing_nodes: list[str] = Field(default=[], description="those nodes, 'rank N: node'")
    error: str | None = None


class FsdpMetrics(_Model):
    backend: str
    world_size: int = Field(ge=1)
    device: str
    wrapped_by: Literal["perfcheck", "workload"]
    wrap: list[str] = Field(default=[], description="the classes perfcheck wrapped")
    units: list[FsdpUnit] = Field(default=[], description="the FSDP units, as FSDP2 groups them")
    reshard_after_forward: bool | int | None = Field(
        default=None, description="the units' but the root's, where they agree (each unit's is in units)"
    )
    param_dtype: str | None = Field(default=None, description="every unit's, where they agree")
    reduce_dtype: str | None = Field(default=None, description="every unit's, where they agree")
    params: list[ParamLayout] = []
    redistributes: list[Redistribute] = []
    outputs: list[list[str]] = Field(default=[], description="placements of the outputs that are DTensors")
    variants: list[FsdpVariant] = []

    @field_validator("units", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> Any:
        # Results written before units were recorded as FSDP groups them list module paths.
        return (
            [{"name": u, "modules": [u]} if isinstance(u, str) else u for u in v]
            if isinstance(v, list)
            else v
        )


def _metrics(r: ProbeResult | None) -> FsdpMetrics | None:
    if r is None or r.status != "ok":
        return None
    got = PROBE.metrics_of(r)
    return got if isinstance(got, FsdpMetrics) else None


def _ok(m: FsdpMetrics | None) -> dict[str, FsdpVariant]:
    return {v.variant: v for v in m.variants if v.error is None} if m else {}


def _unit(name: str | None) -> str:
    return "outside FSDP" if name is None else ("the root" if name == "" else name)


def _placed(p: list[str]) -> str:
    return ", ".join(p) if p else "not a DTensor"


# -- graph reuse ------------------------------------------------------------------------------


def _reuse(wl: str, pairs: list[tuple[str, FsdpVariant, FsdpVariant]]) -> list[Finding]:
    """One finding per function that compiles more graphs than on base, in any variant."""
    grown: dict[str, list[tuple[str, GraphGroup, GraphGroup]]] = {}
    for name, b, h in pairs:
        before = {g.code: g for g in b.graphs}
        for g in h.graphs:
            old = before.get(g.code)
            if old is not None and g.graphs > old.graphs:
                grown.setdefault(g.code, []).append((name, old, g))
    out = []
    for code, seen in grown.items():
        _, old, g = seen[0]
        variants = ", ".join(name for name, _, _ in seen)
        counts = sorted({h.graphs for _, _, h in seen})
        served = f" for {g.modules} layers" if g.modules else ""
        out.append(
            Finding(
                category="graph_reuse_lost",
                severity="error",
                workload=wl,
                probe="fsdp",
                location=g.location,
                message=f"{code} compiles {'–'.join(map(str, counts))} graphs{served} on head, "
                f"{old.graphs} on base "
                f"({variants})" + (f": another graph each time `{g.guard}` fails" if g.guard else ""),
                evidence={
                    "variants": variants,
                    "code": code,
                    "base_graphs": old.graphs,
                    "head_graphs": g.graphs,
                    "distinct": g.distinct,
                    "layers": g.modules,
                    "guard": g.guard or "",
                },
            )
        )
    return out


# -- collectives ------------------------------------------------------------------------------

_Key = tuple[str, str | None, str, int, int]


def _keys(v: FsdpVariant) -> Counter[_Key]:
    return Counter({(c.op, c.unit, c.dtype, c.bytes, c.group_size): c.count for c in v.collectives})


def _describe(keys: Counter[_Key]) -> list[str]:
    return [
        f"{n}× {op} of {f'{b:,} B {dtype}' if b else 'an unknown size'} over {g} ranks ({_unit(unit)})"
        for (op, unit, dtype, b, g), n in sorted(keys.items(), key=lambda kv: (_unit(kv[0][1]), str(kv[0])))
    ]


def _same_units(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[FsdpUnit, FsdpUnit]]:
    """(base, head) of every unit that groups the same modules on both sides."""
    before = {tuple(u.modules): u for u in b.units}
    return [(before[tuple(u.modules)], u) for u in h.units if tuple(u.modules) in before]


def _mixed(u: FsdpUnit) -> tuple[str | None, ...]:
    return (u.param_dtype, u.reduce_dtype, u.output_dtype)


def _regrouped(lost: list[str], gained: list[str], h: FsdpMetrics) -> str:
    """How the units issuing collectives changed, one unit of several modules named as one."""
    modules = {u.name: u.modules for u in h.units}
    merged = [g for g in gained if len(modules.get(g, [g])) > 1]
    folded = {m for g in merged for m in modules[g]}
    parts = []
    for g in merged:
        was = [u for u in lost if u in modules[g]]
        parts.append(
            f"one unit of {len(modules[g])} modules now: {g}"
            + (f" ({len(was)} units on base)" if was else "")
        )
    alone = [u for u in lost if u not in folded]
    parts += [f"no unit of its own any more: {', '.join(map(_unit, alone))}"] if alone else []
    rest = [g for g in gained if g not in merged]
    parts += [f"new unit: {', '.join(map(_unit, rest))}"] if rest else []
    return "".join(f"; {p}" for p in parts)


def _drift(
    wl: str, name: str, b: FsdpVariant, h: FsdpVariant, bm: FsdpMetrics, hm: FsdpMetrics
) -> Finding | None:
    before, after = _keys(b), _keys(h)
    if before == after:
        return None
    units_before = {k[1] for k in before if k[1] is not None}
    units_after = {k[1] for k in after if k[1] is not None}
    lost, gained = sorted(units_before - units_after), sorted(units_after - units_before)
    bytes_of = lambda keys: sum(k[3] * n for k, n in keys.items())  # noqa: E731
    same = _same_units(bm, hm)
    # What the change reads as, most telling first: the matrix's rules pick the cause from it.
    reading = (["wrap"] if lost or gained else []) + (
        ["reshard_after_forward"]
        if any(o.reshard_after_forward != u.reshard_after_forward for o, u in same)
        else []
    )
    if any(_mixed(o) != _mixed(u) for o, u in same) or {k[2] for k in before} != {k[2] for k in after}:
        reading.append("mixed precision")
    if any(k[1] is None for k in after - before):
        reading.append("outside FSDP")
    return Finding(
        category="collective_drift",
        severity="error",
        workload=wl,
        probe="fsdp",
        message=f"collectives per step changed ({name}) "
        f"({sum(before.values())} → {sum(after.values())} calls, "
        f"{bytes_of(before):,} → {bytes_of(after):,} B){_regrouped(lost, gained, hm)}: "
        + "; ".join(
            [f"now {d}" for d in _describe(after - before)[:3]]
            + [f"no longer {d}" for d in _describe(before - after)[:3]]
        ),
        evidence={
            "variants": name,
            "wrapping": "fsdp",
            "reading": ", ".join(reading),
            "units_lost": [_unit(u) for u in lost],
            "units_added": [_unit(u) for u in gained],
            "removed": _describe(before - after),
            "added": _describe(after - before),
        },
    )


# -- layouts ----------------------------------------------------------------------------------


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
    for old, u in _same_units(b, h):
        where = u.sharded_at or old.sharded_at
        for field in ("reshard_after_forward", "param_dtype", "reduce_dtype", "output_dtype"):
            was, now = getattr(old, field), getattr(u, field)
            if was != now:
                change = field if field == "reshard_after_forward" else "mixed_precision"
                out.append((change, f"{_unit(u.name)}: {field} {was} → {now}", where))
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
                    f"{u.name} has a unit of its own on head; base: sharded by {_unit(_owner(u.name, b))}",
                    u.sharded_at,
                )
            )
    gone = [m for key in before if key not in after for m in key if m not in head_unit]
    for m in gone:  # (a module grouped otherwise on head is said above)
        owner = _unit(_owner(m, h))
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
                (p.name, "placement", f"{_placed(old.placements)} → {_placed(p.placements)}{mesh}", where)
            )
        elif old.unit != p.unit and old.unit not in regrouped and p.unit not in regrouped:
            out.append((p.name, "unit", f"sharded by {_unit(old.unit)} → by {_unit(p.unit)}", where))
        elif old.grad_placements != p.grad_placements:
            how = f"{_placed(old.grad_placements or [])} → {_placed(p.grad_placements or [])}"
            out.append((p.name, "gradient", f"gradient {how}", where))
    return out


def _at(loc: SourceLocation | None) -> tuple[str, int]:
    return (loc.path, loc.line) if loc else ("?", 0)


def _redistributes(m: FsdpMetrics) -> Counter[tuple[str, str, str, int]]:
    return Counter(
        {(_placed(r.source), _placed(r.target), *_at(r.location)): r.count for r in m.redistributes}
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


def _layout(wl: str, b: FsdpMetrics, h: FsdpMetrics) -> list[Finding]:
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
        shown = [[_placed(p) for p in m.outputs] or "none" for m in (b, h)]
        message = f"the model's DTensor outputs are laid out differently: {shown[0]} → {shown[1]}"
        out.append(_layout_finding(wl, message, {"kind": "output"}))
    return out


# -- overlap and ranks ------------------------------------------------------------------------


def _overlap(
    wl: str, name: str, b: FsdpVariant, h: FsdpVariant, config: SettingsView, backend: str
) -> Finding | None:
    if b.comm_overlap_pct is None or h.comm_overlap_pct is None:
        return None
    drop = b.comm_overlap_pct - h.comm_overlap_pct
    if drop <= config.budgets.max_overlap_drop_pp:
        return None
    return Finding(
        category="fsdp_overlap_drop",
        severity="error",
        workload=wl,
        probe="fsdp",
        message=f"{name}: communication hidden behind compute {b.comm_overlap_pct:.1f} % → "
        f"{h.comm_overlap_pct:.1f} %, a drop of {drop:.1f} pp "
        f"(budget {config.budgets.max_overlap_drop_pp:g} pp)",
        evidence={
            "variant": name,
            "base_pct": b.comm_overlap_pct,
            "head_pct": h.comm_overlap_pct,
            "backend": backend,
        },
    )


def _ranks(wl: str, name: str, b: FsdpVariant | None, h: FsdpVariant) -> Finding | None:
    mismatch = first_rank_mismatch(h.ranks)
    if mismatch is None:
        return None
    graph, ranks = mismatch
    already = b is not None and first_rank_mismatch(b.ranks) is not None
    at = h.rank_differs_at
    return Finding(
        category="rank_graph_mismatch",
        severity="warning" if already else "error",
        workload=wl,
        probe="fsdp",
        location=at,
        message=f"{name}: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} compiled a "
        f"different graph #{graph} than rank 0"
        + (f", differing first at {at.path}:{at.line}" if at is not None else "")
        + (" (already so on base)" if already else ""),
        evidence={
            "variant": name,
            "graph": graph,
            "ranks": ranks,
            "hashes": {str(r.rank): r.graph_hashes for r in h.ranks},
            "nodes": "\n".join(h.rank_differing_nodes),
        },
    )


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    b, h = _metrics(base), _metrics(head)
    if b is None or h is None:
        return Compared(inconclusive=[f"{wl}/fsdp: no FSDP measurements to compare"])
    findings = _layout(wl, b, h)
    bv = _ok(b)
    pairs = [(name, bv[name], hv) for name, hv in _ok(h).items() if name in bv]
    findings += _reuse(wl, pairs)
    for name, hv in _ok(h).items():
        rank = _ranks(wl, name, bv.get(name), hv)
        findings += [rank] if rank else []
    # The same change of collectives in several variants is one finding naming them all.
    drifts: dict[str, list[tuple[str, FsdpVariant, FsdpVariant]]] = {}
    for name, old, hv in pairs:
        before, after = _keys(old), _keys(hv)
        if before != after:
            change = str(
                (sorted((after - before).items(), key=str), sorted((before - after).items(), key=str))
            )
            drifts.setdefault(change, []).append((name, old, hv))
        overlap = _overlap(wl, name, old, hv, config, h.backend)
        findings += [overlap] if overlap else []
    for same in drifts.values():
        drift = _drift(wl, ", ".join(n for n, _, _ in same), same[0][1], same[0][2], b, h)
        findings += [drift] if drift else []
    failed = failed_variants(wl, "fsdp", b.variants, h.variants)
    return Compared(findings=findings + failed.findings, inconclusive=failed.inconclusive)


# -- the workload table -----------------------------------------------------------------------


def _layers(v: FsdpVariant, wrapped: list[str]) -> str:
    """ " (3 for 4 layers)": the graphs of the wrapped layers' function (else of the function that
    serves most modules), for the table."""
    ours = [g for g in v.graphs if g.code.split(".")[0] in wrapped and g.modules]
    group = max(ours or [g for g in v.graphs if g.modules], key=lambda g: g.modules, default=None)
    if group is None:
        return ""
    what = "layers" if ours else f"{group.code.split('.')[0]} modules"
    return f" ({group.graphs} for {group.modules} {what})"


def _cell(v: FsdpVariant | None, r: ProbeResult | None, wrapped: list[str]) -> str:
    if v is None:
        return status_cell(r) or "—"
    if v.error:
        return "fails"
    step = str(Figure(v.step_ms, "ms", 1)) if v.step_ms is not None else "—"
    calls = Counter()  # type: Counter[str]
    for c in v.collectives:
        calls[c.op] += c.count
    comm = (
        ", ".join(f"{n} {op.replace('_', '-')}{'s' if n != 1 else ''}" for op, n in sorted(calls.items()))
        or "no collectives"
    )
    overlap = f", {Figure(v.comm_overlap_pct, '%')} hidden" if v.comm_overlap_pct is not None else ""
    graphs = ""
    if v.variant != "eager":
        breaks = sum(g.count for g in v.graph_breaks)
        reuse = _layers(v, wrapped)
        plural = "s" if v.graph_count != 1 else ""
        graphs = f", {v.graph_count} graph{plural}{reuse}, {breaks} break{'s' if breaks != 1 else ''}"
    return f"{step}{graphs}, {comm}{overlap}"


def _layout_cell(m: FsdpMetrics | None, r: ProbeResult | None) -> str:
    if m is None:
        return status_cell(r) or "—"
    kinds = Counter(_placed(p.placements) for p in m.params)
    laid = ", ".join(f"{n}× {k}" for k, n in kinds.most_common(2))
    grouped = [u for u in m.units if len(u.modules) > 1]
    of = f" ({len(grouped)} of several modules)" if grouped else ""
    return f"{len(m.units)} unit{'s' if len(m.units) != 1 else ''}{of}, {len(m.params)} params ({laid})"


def rows(bd: ProbeResult | None, hd: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    b, h = _metrics(bd), _metrics(hd)
    either = h or b
    world = either.world_size if either else "?"
    out = [
        Row(
            f"FSDP layout ({world} rank{'s' if world != 1 else ''})",
            _layout_cell(b, bd),
            _layout_cell(h, hd),
            "",
        )
    ]
    bv = {v.variant: v for v in b.variants} if b else {}
    hv = {v.variant: v for v in h.variants} if h else {}
    wrapped = sorted({*(b.wrap if b else []), *(h.wrap if h else [])})
    for name in [*bv, *[n for n in hv if n not in bv]]:
        out.append(
            Row(f"FSDP {name}", _cell(bv.get(name), bd, wrapped), _cell(hv.get(name), hd, wrapped), "")
        )
    return settled(out, bd, hd)


_VERIFY = "perfcheck review --base {base} --head {head} --workloads {workload} --probes fsdp"
_FULLY_SHARD = "https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html"

# What a change of FSDP's units or their settings does, for the causes and rules below.
_WRAP = (
    "a unit's wrap changed: a layer lost its own `fully_shard` (its class no longer matches "
    "`fsdp.wrap`, or the workload no longer shards it), or one `fully_shard([a, b])` now groups "
    "modules into one unit, so their parameters are all-gathered and reduce-scattered together"
)
_RESHARD = (
    "`reshard_after_forward` changed: a unit that keeps its parameters after forward (`False`, "
    "FSDP2's default for the root) runs no all-gather in backward; one that reshards gathers them again"
)
_MIXED = (
    "mixed precision changed (`MixedPrecisionPolicy`): `param_dtype` is what the all-gathers move, "
    "`reduce_dtype` what the reduce-scatters reduce"
)
_REDISTRIBUTE = (
    "the model's own code runs a collective outside FSDP's units: a DTensor `redistribute` (to "
    "`Replicate()`, say) or a `torch.distributed` call in forward"
)

PROBE = ProbeKind(
    name="fsdp",
    summary="FSDP2 (fully_shard) under torchrun: eager, per-layer and whole-model compile; graph reuse, "
    "collectives, DTensor layouts, overlap",
    compare=compare,
    rows=rows,
    settings=FsdpSettings,
    metrics=FsdpMetrics,
    run="perfcheck.runner.probes.fsdp_probe:run",
    raises=("rank_graph_mismatch", "collective_drift", VARIANT_FAILED),
    # The shared categories as FSDP raises them: its units, not DDP's buckets.
    entries={
        "collective_drift": {
            "symptom": "the collectives of a training step changed: FSDP's all-gathers and "
            "reduce-scatters (op, dtype, bytes, calls per step) or the unit that issues them.",
            "causes": [_WRAP, _RESHARD, _MIXED, _REDISTRIBUTE],
            "verify": [_VERIFY],
            "docs": _FULLY_SHARD,
            "rules": [
                {"when": {"reading": "wrap"}, "cause": _WRAP},
                {"when": {"reading": "reshard_after_forward"}, "cause": _RESHARD},
                {"when": {"reading": "mixed precision"}, "cause": _MIXED},
                {"when": {"reading": "outside FSDP"}, "cause": _REDISTRIBUTE},
            ],
        },
        "rank_graph_mismatch": {
            "causes": [
                "Python in a sharded unit's forward that depends on the rank (`dist.get_rank()`, a "
                "rank-dependent flag or shape), traced into each rank's graph",
                "a value read in forward that differs between ranks (an environment variable, the "
                "local device), which Dynamo specialises on",
                "nondeterministic guards",
            ],
            "verify": ["TORCH_LOGS=graph_code " + _VERIFY],
            "docs": _FULLY_SHARD,
        },
    },
    categories={
        "graph_reuse_lost": {
            "title": "Identical layers no longer share a compiled graph",
            "nature": "structural",
            "role": "neither",
            "severity": "error",
            "details": [{"field": "guard", "label": "The guard that made another graph"}],
            "symptom": "Dynamo compiles more graphs for the same layers than base: N identical layers "
            "used to be served by one graph.",
            "causes": [
                "Python in the layer that depends on which layer it is (an index or flag the layer keeps), "
                "so each layer's guards differ",
                "a per-layer attribute or config read in forward that Dynamo specialises on",
                "layers that are no longer instances of one class, or a unit's wrap changed (a layer "
                "without its own `fully_shard` is compiled as part of the unit that holds it)",
            ],
            "verify": [
                "TORCH_LOGS=recompiles " + _VERIFY,
            ],
            "docs": "https://docs.pytorch.org/docs/stable/torch.compiler_faq.html#why-is-my-code-recompiling",
            "rules": [
                {
                    "when": {"guard": "self."},
                    "cause": "a guard on the layer module's own attribute (an int or flag that differs per "
                    "layer) specialises the graph: each distinct value compiles its own",
                }
            ],
        },
        "dtensor_layout_changed": {
            "title": "DTensor layout changed",
            "nature": "structural",
            "role": "neither",
            "severity": "error",
            "details": [
                {"field": "unit_changes", "label": "FSDP units grouped or run differently"},
                {"field": "changes", "label": "Parameters laid out differently"},
            ],
            "symptom": "a parameter, gradient or activation is sharded, replicated or owned differently "
            "than on base, or an FSDP unit groups or runs differently, which the FX graph does not show.",
            "causes": [
                _WRAP,
                "a `redistribute` (to `Replicate()`, say) or `distribute_tensor` call was added",
                "a parameter left unsharded (created after fully_shard, or ignored)",
                "`reshard_after_forward`, mixed precision or the mesh changed",
            ],
            "verify": [_VERIFY],
            "docs": "https://docs.pytorch.org/docs/stable/distributed.tensor.html",
            "rules": [
                {
                    "when": {"kind": "redistribute"},
                    "cause": "the model's code redistributes a DTensor: each call "
                    "runs a collective (an all-gather to `Replicate()`) that the graph does not show",
                },
                {
                    "when": {"change": "unwrapped"},
                    "cause": "the layer is no longer wrapped by a fully_shard of its own (its class no "
                    "longer matches `fsdp.wrap`), so the root's unit gathers its parameters with everything "
                    "else",
                },
                {
                    "when": {"change": "merged"},
                    "cause": "one `fully_shard([a, b])` now groups these modules into one unit: their "
                    "parameters are gathered in one all-gather before the first of them runs and freed "
                    "after the last, so more of them are held at once (meant for modules that run "
                    "together: tied weights, a chunked loss)",
                },
                {"when": {"change": "reshard_after_forward"}, "cause": _RESHARD},
                {"when": {"change": "mixed_precision"}, "cause": _MIXED},
                {
                    "when": {"change": "unit"},
                    "cause": "the parameter is sharded by another FSDP unit: its module moved, or a "
                    "`fully_shard` call now takes it",
                },
            ],
        },
        "fsdp_overlap_drop": {
            "title": "Less FSDP communication hidden behind compute",
            "nature": "measured",
            "role": "neither",
            "severity": "error",
            "symptom": "less of FSDP's all-gather and reduce-scatter time runs while compute does.",
            "causes": [
                "prefetch lost: a unit's all-gather now waits for the layer before it",
                _RESHARD,
                "compile wrapping moved outside fully_shard, so one graph holds every layer",
                "fewer units (a layer left out of the wrap policy) leave less to overlap",
            ],
            "verify": [_VERIFY + ",profile"],
            "docs": _FULLY_SHARD,
        },
    },
    prior_s={"cpu": 60.0, "cuda": 120.0},  # several variants under torchrun
)
