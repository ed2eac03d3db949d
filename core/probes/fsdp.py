"""The `fsdp` probe, torch-free side: FSDP2 (``fully_shard``) training under eager and compiled
variants, written in the plugin shape (core/probes/kind.py): its settings, its metrics and its own
finding categories live here, the run function in perfcheck/runner/probes/fsdp_probe.py.

What it compares, base against head, per variant: how many graphs Dynamo compiles for each
function of the model (N identical layers served by one graph is the healthy case), the
collectives of one training step and the FSDP unit each belongs to, the share of them hidden
behind compute, the graphs each rank compiled, and the DTensor layout of every parameter and
gradient (placements, mesh, the unit that shards it) and of activations the model redistributes:
changes the FX graph does not show.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.config import Config
from perfcheck.core.probes.ddp import first_rank_mismatch
from perfcheck.core.probes.kind import Compared, ProbeKind, Row, settled, status_cell
from perfcheck.schema import Finding, GraphBreak, ProbeResult, RankGraphs, SourceLocation, WorkloadReview

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
    reshard_after_forward: bool = Field(
        default=True, description="free the gathered parameters after forward"
    )
    param_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.param_dtype")
    reduce_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.reduce_dtype")
    variants: list[Variant] = Field(
        default=["eager", "compiled_layers", "compiled_model"],
        min_length=1,
        description="eager; each wrapped layer compiled (module.compile()); the whole model compiled",
    )
    steps: int = Field(default=4, ge=2, description="training steps per variant (the first compiles)")


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
    error: str | None = None


class FsdpMetrics(_Model):
    backend: str
    world_size: int = Field(ge=1)
    device: str
    wrapped_by: Literal["perfcheck", "workload"]
    wrap: list[str] = Field(default=[], description="the classes perfcheck wrapped")
    units: list[str] = Field(default=[], description="FSDP units, module paths ('' the root)")
    reshard_after_forward: bool | None = None
    param_dtype: str | None = None
    reduce_dtype: str | None = None
    params: list[ParamLayout] = []
    redistributes: list[Redistribute] = []
    outputs: list[list[str]] = Field(default=[], description="placements of the outputs that are DTensors")
    variants: list[FsdpVariant] = []


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
        f"{n}× {op} of {f'{b:,} B {dtype}' if b else 'tensors'} over {g} ranks ({_unit(unit)})"
        for (op, unit, dtype, b, g), n in sorted(keys.items(), key=lambda kv: (_unit(kv[0][1]), str(kv[0])))
    ]


def _drift(wl: str, name: str, b: FsdpVariant, h: FsdpVariant) -> Finding | None:
    before, after = _keys(b), _keys(h)
    if before == after:
        return None
    units_before = {k[1] for k in before if k[1] is not None}
    units_after = {k[1] for k in after if k[1] is not None}
    lost, gained = sorted(units_before - units_after), sorted(units_after - units_before)
    bytes_of = lambda keys: sum(k[3] * n for k, n in keys.items())  # noqa: E731
    named = (f"; no unit of its own any more: {', '.join(map(_unit, lost))}" if lost else "") + (
        f"; new unit: {', '.join(map(_unit, gained))}" if gained else ""
    )
    return Finding(
        category="collective_drift",
        severity="error",
        workload=wl,
        probe="fsdp",
        message=f"collectives per step changed ({name}) "
        f"({sum(before.values())} → {sum(after.values())} calls, "
        f"{bytes_of(before):,} → {bytes_of(after):,} B){named}: "
        + "; ".join(
            [f"now {d}" for d in _describe(after - before)[:3]]
            + [f"no longer {d}" for d in _describe(before - after)[:3]]
        ),
        evidence={
            "variants": name,
            "wrapping": "fsdp",
            "units_lost": [_unit(u) for u in lost],
            "units_added": [_unit(u) for u in gained],
            "removed": _describe(before - after),
            "added": _describe(after - before),
        },
    )


# -- layouts ----------------------------------------------------------------------------------


def _param_changes(b: FsdpMetrics, h: FsdpMetrics) -> list[tuple[str, str, str, SourceLocation | None]]:
    """(parameter, what changed, how, where) for every parameter whose layout differs."""
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
                (p.name, "placement", f"{_placed(old.placements)} → {_placed(p.placements)}{mesh}", where)
            )
        elif old.unit != p.unit:
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
        shown = [[_placed(p) for p in m.outputs] or "none" for m in (b, h)]
        message = f"the model's DTensor outputs are laid out differently: {shown[0]} → {shown[1]}"
        out.append(_layout_finding(wl, message, {"kind": "output"}))
    return out


# -- overlap and ranks ------------------------------------------------------------------------


def _overlap(
    wl: str, name: str, b: FsdpVariant, h: FsdpVariant, config: Config, backend: str
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
    return Finding(
        category="rank_graph_mismatch",
        severity="warning" if already else "error",
        workload=wl,
        probe="fsdp",
        message=f"{name}: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} compiled a "
        f"different graph #{graph} than rank 0" + (" (already so on base)" if already else ""),
        evidence={
            "variant": name,
            "graph": graph,
            "ranks": ranks,
            "hashes": {str(r.rank): r.graph_hashes for r in h.ranks},
        },
    )


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: Config) -> Compared:
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
        drift = _drift(wl, ", ".join(n for n, _, _ in same), same[0][1], same[0][2])
        findings += [drift] if drift else []
    return Compared(findings=findings)


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
    step = f"{v.step_ms:.1f} ms" if v.step_ms is not None else "—"
    calls = Counter()  # type: Counter[str]
    for c in v.collectives:
        calls[c.op] += c.count
    comm = ", ".join(f"{n} {op.replace('_', '-')}s" for op, n in sorted(calls.items())) or "no collectives"
    overlap = f", {v.comm_overlap_pct:.0f} % hidden" if v.comm_overlap_pct is not None else ""
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
    return f"{len(m.units)} units, {len(m.params)} params ({laid})"


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

PROBE = ProbeKind(
    name="fsdp",
    summary="FSDP2 (fully_shard) under torchrun: eager, per-layer and whole-model compile; graph reuse, "
    "collectives, DTensor layouts, overlap",
    compare=compare,
    rows=rows,
    settings=FsdpSettings,
    metrics=FsdpMetrics,
    run="perfcheck.runner.probes.fsdp_probe:run",
    categories={
        "graph_reuse_lost": {
            "title": "Identical layers no longer share a compiled graph",
            "details": [{"field": "guard", "label": "The guard that made another graph"}],
            "symptom": "Dynamo compiles more graphs for the same layers than base: N identical layers "
            "used to be served by one graph.",
            "causes": [
                "Python in the layer that depends on which layer it is (an index or flag the layer keeps), "
                "so each layer's guards differ",
                "a per-layer attribute or config read in forward that Dynamo specialises on",
                "layers that are no longer instances of one class",
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
            "details": [{"field": "changes", "label": "Parameters laid out differently"}],
            "symptom": "a parameter, gradient or activation is sharded, replicated or owned differently "
            "than on base, which the FX graph does not show.",
            "causes": [
                "a layer's class changed, so `fsdp.wrap` no longer gives it a unit of its own",
                "a `redistribute` (to `Replicate()`, say) or `distribute_tensor` call was added",
                "a parameter left unsharded (created after fully_shard, or ignored)",
                "`reshard_after_forward` or the mesh changed",
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
                    "when": {"change": "unit"},
                    "cause": "the layer is no longer wrapped by a fully_shard of its own (its class no "
                    "longer matches `fsdp.wrap`), so the root's unit gathers its parameters with everything "
                    "else",
                },
            ],
        },
        "fsdp_overlap_drop": {
            "title": "Less FSDP communication hidden behind compute",
            "symptom": "less of FSDP's all-gather and reduce-scatter time runs while compute does.",
            "causes": [
                "prefetch lost: a unit's all-gather now waits for the layer before it",
                "compile wrapping moved outside fully_shard, so one graph holds every layer",
                "fewer units (a layer left out of the wrap policy) leave less to overlap",
            ],
            "verify": [_VERIFY + ",profile"],
            "docs": "https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html",
        },
    },
)
