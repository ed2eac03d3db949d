"""The `fsdp` probe, torch-free side: FSDP2 (``fully_shard``) training under eager and compiled
variants, written in the plugin shape (perfcheck/core/probes/kind.py): its own finding categories
live here, its settings and metrics models in perfcheck/core/probes/fsdp_models.py, the comparison
of its units in perfcheck/core/probes/fsdp_units.py, of its DTensors' layouts in
perfcheck/core/probes/fsdp_layout.py, the run function in perfcheck/runner/probes/fsdp_probe.py.

What it compares, base against head, per variant: how many graphs Dynamo compiles for each
function of the model (N identical layers served by one graph is the healthy case), the
collectives of one training step and the FSDP unit each belongs to, the share of them hidden
behind compute, the graphs each rank compiled, the FSDP units as FSDP2 groups them (one per
``fully_shard`` call, with its ``reshard_after_forward``, mixed precision and offload as they run:
a change of them is the cause the collectives' and overlap's changes are read against), the
DTensor layout of every parameter and gradient (placements, mesh) and of activations the model
redistributes: changes the FX graph does not show; and each collective's process group and where
in the compiled step it ran (perfcheck/core/probes/collective_groups.py).
"""

from __future__ import annotations

from collections import Counter

from perfcheck.core.markdown import Figure
from perfcheck.core.probes.collective_groups import CATEGORY as GROUP_CHANGED
from perfcheck.core.probes.collective_groups import group_findings
from perfcheck.core.probes.ddp import first_rank_mismatch
from perfcheck.core.probes.fsdp_layout import layout_findings, placements_said
from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpSettings, FsdpUnit, FsdpVariant, GraphGroup
from perfcheck.core.probes.fsdp_units import same_units, unit_findings, unit_said
from perfcheck.core.probes.kind import (
    VARIANT_FAILED,
    Compared,
    ProbeKind,
    Row,
    failed_variants,
    settled,
    status_cell,
)
from perfcheck.schema import Finding, ProbeResult, WorkloadReview
from perfcheck.settings import SettingsView


def _metrics(r: ProbeResult | None) -> FsdpMetrics | None:
    if r is None or r.status != "ok":
        return None
    got = PROBE.metrics_of(r)
    return got if isinstance(got, FsdpMetrics) else None


def _ok(m: FsdpMetrics | None) -> dict[str, FsdpVariant]:
    return {v.variant: v for v in m.variants if v.error is None} if m else {}


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
        f"{n}× {op} of {f'{b:,} B {dtype}' if b else 'an unknown size'} over {g} ranks ({unit_said(unit)})"
        for (op, unit, dtype, b, g), n in sorted(
            keys.items(), key=lambda kv: (unit_said(kv[0][1]), str(kv[0]))
        )
    ]


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
    parts += [f"no unit of its own any more: {', '.join(map(unit_said, alone))}"] if alone else []
    rest = [g for g in gained if g not in merged]
    parts += [f"new unit: {', '.join(map(unit_said, rest))}"] if rest else []
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
    same = same_units(bm, hm)
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
            "calls": [sum(before.values()), sum(after.values())],
            "bytes": [bytes_of(before), bytes_of(after)],
            "wrapping": "fsdp",
            "reading": ", ".join(reading),
            "units_lost": [unit_said(u) for u in lost],
            "units_added": [unit_said(u) for u in gained],
            "removed": _describe(before - after),
            "added": _describe(after - before),
        },
    )


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
    findings = unit_findings(wl, b, h) + layout_findings(wl, b, h)
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
    findings += group_findings(
        wl, "fsdp", [(n, o.collective_calls, hv.collective_calls) for n, o, hv in pairs]
    )
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
    kinds = Counter(placements_said(p.placements) for p in m.params)
    laid = ", ".join(f"{n}× {k}" for k, n in kinds.most_common(2))
    grouped = [u for u in m.units if len(u.modules) > 1]
    of = f" ({len(grouped)} of several modules)" if grouped else ""
    return f"{len(m.units)} unit{'s' if len(m.units) != 1 else ''}{of}, {len(m.params)} params ({laid})"


def _of(n: int, units: int) -> str:
    return "every unit" if n == units and units > 1 else f"{n} of {units}"


def _settings_cell(m: FsdpMetrics | None, r: ProbeResult | None) -> str:
    """How the units run, in short: "reshard after forward: 4 of 5, param bfloat16 (every unit)"."""
    if m is None:
        return status_cell(r) or "—"
    n = len(m.units)
    parts = []
    known = [u.reshard_after_forward for u in m.units if u.reshard_after_forward is not None]
    if known:
        parts.append(f"reshard after forward: {_of(sum(1 for x in known if x is not False), n)}")
    mixed = []
    for field in ("param", "reduce", "output"):
        dtypes = Counter(d for u in m.units if (d := getattr(u, f"{field}_dtype")) is not None)
        mixed += [f"{field} {d} ({_of(k, n)})" for d, k in sorted(dtypes.items())]
    uncast = sum(1 for u in m.units if u.cast_forward_inputs is False)
    mixed += [f"inputs not cast ({_of(uncast, n)})"] if uncast else []
    parts.append(", ".join(mixed) if mixed else "no mixed precision")
    offload = Counter(u.offload_policy for u in m.units if u.offload_policy not in (None, "OffloadPolicy()"))
    parts += [f"{policy} ({_of(k, n)})" for policy, k in sorted(offload.items())]
    return ", ".join(parts) if n else "no units"


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
        ),
        Row("FSDP unit settings", _settings_cell(b, bd), _settings_cell(h, hd), ""),
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
_OFFLOAD = (
    "the offload policy changed (`CPUOffloadPolicy`): the unit's sharded parameters and gradients "
    "live on the CPU, copied to the device for each all-gather and back after each reduce-scatter"
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
    raises=("rank_graph_mismatch", "collective_drift", GROUP_CHANGED, VARIANT_FAILED),
    # The shared categories as FSDP raises them: its units, not DDP's buckets.
    entries={
        "collective_drift": {
            "symptom": "the collectives of a training step changed: FSDP's all-gathers and "
            "reduce-scatters (op, dtype, bytes, calls per step) or the unit that issues them.",
            "causes": [_WRAP, _RESHARD, _MIXED, _REDISTRIBUTE],
            "verify": [_VERIFY],
            "docs": _FULLY_SHARD,
            "rules": [
                {
                    "when": {"explained_by": "moved to another process group"},
                    "cause": "a collective moved to another process group in this review (its finding "
                    "names the line): the model's own collective, not FSDP's units",
                },
                {"when": {"reading": "wrap"}, "cause": _WRAP},
                {"when": {"reading": "reshard_after_forward"}, "cause": _RESHARD},
                {"when": {"reading": "mixed precision"}, "cause": _MIXED},
                {"when": {"reading": "outside FSDP"}, "cause": _REDISTRIBUTE},
            ],
        },
        GROUP_CHANGED: {
            "causes": [
                "a graph break moved the collective: the code after the break is compiled as a "
                "function of its own (or runs eagerly), and the group it passes there is not the one "
                "base's graph used (a group held in a local or a default argument, a helper that picks one)",
                "the call lost its `group=` (the default is WORLD, which a one-dimensional mesh's "
                "all-gathers and reduce-scatters run on too): it now runs in order with FSDP's own "
                "collectives, where a group of its own ran beside them",
                "the group is made with fewer or other ranks (`dist.new_group(ranks=...)`, a "
                "`DeviceMesh` dimension): the ranks left out no longer take part",
            ],
            "verify": ["TORCH_LOGS=graph_breaks " + _VERIFY],
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
        "fsdp_unit_changed": {
            "title": "FSDP unit settings changed",
            "nature": "structural",
            # What the units all-gather and reduce-scatter, when and in which dtype, and what they
            # hold between forward and backward follow from it: the collectives' drift, the overlap
            # lost, a slower step or more memory of the same workload name it as their cause.
            "role": "cause",
            "because": "the FSDP unit settings changed{{ at }} ({{ evidence.summary }})",
            "severity": "warning",
            "details": [{"field": "changes", "label": "FSDP units run or grouped differently"}],
            "symptom": "an FSDP unit runs with other settings than on base (its `reshard_after_forward`, "
            "`MixedPrecisionPolicy` or `OffloadPolicy`), or FSDP groups the modules into units "
            "differently (a layer gained or lost a `fully_shard` of its own, one `fully_shard([a, b])` "
            "groups several, a module's parameters moved to another unit): no DTensor layout changes, "
            "but what each unit gathers, reduces and holds does.",
            "causes": [_WRAP, _RESHARD, _MIXED, _OFFLOAD],
            "verify": [_VERIFY],
            "docs": _FULLY_SHARD,
            "rules": [
                {"when": {"change": "reshard_after_forward"}, "cause": _RESHARD},
                {"when": {"change": "mixed_precision"}, "cause": _MIXED},
                {"when": {"change": "offload"}, "cause": _OFFLOAD},
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
                {
                    "when": {"change": "moved"},
                    "cause": "the parameter is sharded by another FSDP unit: its module moved, or a "
                    "`fully_shard` call now takes it",
                },
            ],
        },
        "dtensor_layout_changed": {
            "title": "DTensor layout changed",
            "nature": "structural",
            "role": "neither",
            "severity": "error",
            "details": [{"field": "changes", "label": "Parameters laid out differently"}],
            "symptom": "a parameter, gradient or activation is laid out differently than on base: "
            "other DTensor placements (`Shard`, `Replicate`, `Partial`) or another mesh, or a "
            "redistribute the model's code runs, which the FX graph does not show.",
            "causes": [
                "a `redistribute` (to `Replicate()`, say) or `distribute_tensor` call was added",
                "the placements a parameter is sharded with changed: a `fully_shard` "
                "`shard_placement_fn`, or a `distribute_tensor` with other placements",
                "the mesh changed (its shape or dimensions)",
                "a parameter left unsharded (created after fully_shard, or ignored)",
            ],
            "verify": [_VERIFY],
            "docs": "https://docs.pytorch.org/docs/stable/distributed.tensor.html",
            "rules": [
                {
                    "when": {"kind": "redistribute"},
                    "cause": "the model's code redistributes a DTensor: each call "
                    "runs a collective (an all-gather to `Replicate()`) that the graph does not show",
                },
            ],
        },
        "fsdp_overlap_drop": {
            "title": "Less FSDP communication hidden behind compute",
            "nature": "measured",
            "role": "effect",
            "figure": "{% if evidence.base_pct is number and evidence.head_pct is number %}overlap "
            "{{ '%.0f' | format(evidence.base_pct) }} → {{ '%.0f' | format(evidence.head_pct) }} %"
            "{% endif %}",
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
            "rules": [
                {
                    "when": {"explained_by": "FSDP unit settings changed"},
                    "cause": "the FSDP unit settings changed in this review: a unit that reshards "
                    "differently, gathers in another dtype or groups other modules issues its "
                    "all-gathers and reduce-scatters at other points of the step",
                },
            ],
        },
    },
    prior_s={"cpu": 60.0, "cuda": 120.0},  # several variants under torchrun
)
