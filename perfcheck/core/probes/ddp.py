"""Findings of the `ddp` probe: ranks compiling different graphs, collectives that changed or moved
to another process group (perfcheck/core/probes/collective_groups.py), and communication that no
longer hides behind compute. Pure; torch-free."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.core.markdown import Figure
from perfcheck.core.probes.collective_groups import CATEGORY as GROUP_CHANGED
from perfcheck.core.probes.collective_groups import RankCalls, group_findings
from perfcheck.core.probes.kind import (
    VARIANT_FAILED,
    Compared,
    ProbeKind,
    Row,
    entries_beside,
    failed_variants,
    settled,
    status_cell,
)
from perfcheck.measures import GraphBreak, Strict
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView


class Collective(Strict):
    """One kind of collective a training step issues, as the profiler saw it."""

    op: str = Field(description="e.g. all_reduce, broadcast, all_gather")
    group_size: int = Field(ge=1)
    dtype: str
    bytes: int = Field(ge=0, description="message size of one call")
    count: int = Field(default=1, ge=1, description="calls per step")


class RankGraphs(Strict):
    rank: int = Field(ge=0)
    graph_hashes: list[str] = Field(description="hash of each compiled graph, in compile order")


class DdpVariantMetrics(Strict):
    variant: Literal["eager", "compiled_ddp", "ddp_compiled"] = Field(
        description="DDP(model); torch.compile(DDP(model)); DDP(torch.compile(model))"
    )
    step_ms: float | None = Field(default=None, ge=0, description="median step time on rank 0")
    graph_count: int = Field(default=0, ge=0)
    graph_breaks: list[GraphBreak] = Field(default=[], description="real breaks, not DDPOptimizer's")
    ddp_splits: int = Field(default=0, ge=0, description="DDPOptimizer's intentional bucket splits")
    ranks: list[RankGraphs] = Field(default=[])
    collectives: list[Collective] = Field(default=[])
    comm_overlap_pct: float | None = Field(
        default=None, ge=0, le=100, description="share of communication time hidden behind compute"
    )
    collective_calls: list[RankCalls] = Field(
        default=[],
        description="each collective of one step in order, with its process group and where in the "
        "compiled step it ran, per set of ranks that issued the same; []: not recorded",
    )
    error: str | None = None


class DdpMetrics(Strict):
    backend: str
    world_size: int = Field(ge=1)
    variants: list[DdpVariantMetrics]


class DdpSettings(BaseModel):
    """The `ddp:` section of perfcheck.yml: torchrun on world_size ranks of one host."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_size: int = Field(default=2, ge=1, description="ranks (one per GPU with nccl)")
    backend: Literal["auto", "gloo", "nccl"] = Field(
        default="auto", description="auto: nccl on cuda, else gloo"
    )
    variants: list[Literal["eager", "compiled_ddp", "ddp_compiled"]] = Field(
        default=["eager", "compiled_ddp", "ddp_compiled"]
    )
    steps: int = Field(default=6, ge=2, description="training steps per variant (the first warms up)")
    bucket_cap_mb: float = Field(
        default=25.0,
        ge=1,
        description="DDP bucket size; at least its 1 MB first bucket (DDPOptimizer needs it)",
    )


def _variants(m: DdpMetrics | None) -> dict[str, DdpVariantMetrics]:
    return {v.variant: v for v in m.variants if v.error is None} if m else {}


def first_rank_mismatch(ranks: list[RankGraphs]) -> tuple[int, list[int]] | None:
    """The first graph (1-based) where some rank's hash differs from rank 0's, and those ranks."""
    if len(ranks) < 2:
        return None
    ref = ranks[0].graph_hashes
    longest = max(len(r.graph_hashes) for r in ranks)
    for i in range(longest):
        odd = [
            r.rank
            for r in ranks[1:]
            if i >= len(r.graph_hashes) or i >= len(ref) or r.graph_hashes[i] != ref[i]
        ]
        if odd:
            return i + 1, odd
    return None


def _collective_key(v: DdpVariantMetrics) -> Counter[tuple[str, int, str, int]]:
    return Counter({(c.op, c.group_size, c.dtype, c.bytes): c.count for c in v.collectives})


def _describe(keys: Counter[tuple[str, int, str, int]]) -> list[str]:
    return [f"{n}× {op} of {b:,} B {dtype} over {g} ranks" for (op, g, dtype, b), n in sorted(keys.items())]


def findings(workload: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> list[Finding]:
    out: list[Finding] = []
    bm, hm = probe_metrics(base, DdpMetrics), probe_metrics(head, DdpMetrics)
    b, h = _variants(bm), _variants(hm)
    backend = hm.backend if hm else "?"
    # nccl: HolisticTraceAnalysis's time-based overlap; gloo: the share of collectives launched
    # before backward's last node (perfcheck/runner/distributed/comm_trace.py says why).
    for name, hv in h.items():
        bv = b.get(name)
        mismatch = first_rank_mismatch(hv.ranks)
        if mismatch is not None:
            graph, ranks = mismatch
            already = bv is not None and first_rank_mismatch(bv.ranks) is not None
            out.append(
                Finding(
                    category="rank_graph_mismatch",
                    severity="warning" if already else "error",
                    workload=workload,
                    probe="ddp",
                    message=f"{name}: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} "
                    f"compiled a different graph #{graph} than rank 0"
                    + (" (already so on base)" if already else ""),
                    evidence={
                        "variant": name,
                        "graph": graph,
                        "ranks": ranks,
                        "hashes": {str(r.rank): r.graph_hashes for r in hv.ranks},
                    },
                )
            )
        if bv is None:
            continue
        before, after = _collective_key(bv), _collective_key(hv)
        if before != after:
            bytes_before = sum(k[3] * n for k, n in before.items())
            bytes_after = sum(k[3] * n for k, n in after.items())
            out.append(
                Finding(
                    category="collective_drift",
                    severity="error",
                    workload=workload,
                    probe="ddp",
                    message=f"{name}: collectives per step changed ({sum(before.values())} → "
                    f"{sum(after.values())} calls, {bytes_before:,} → {bytes_after:,} B): "
                    + "; ".join(
                        [f"now {d}" for d in _describe(after - before)[:3]]
                        + [f"no longer {d}" for d in _describe(before - after)[:3]]
                    ),
                    evidence={
                        "variant": name,
                        "calls": [sum(before.values()), sum(after.values())],
                        "bytes": [bytes_before, bytes_after],
                        "removed": _describe(before - after),
                        "added": _describe(after - before),
                    },
                )
            )
        if bv.comm_overlap_pct is not None and hv.comm_overlap_pct is not None:
            drop = bv.comm_overlap_pct - hv.comm_overlap_pct
            if drop > config.budgets.max_overlap_drop_pp:
                out.append(
                    Finding(
                        category="ddp_overlap_drop",
                        severity="error",
                        workload=workload,
                        probe="ddp",
                        message=f"{name}: communication hidden behind compute "
                        f"{bv.comm_overlap_pct:.1f} % → {hv.comm_overlap_pct:.1f} %, a drop of {drop:.1f} pp "
                        f"(budget {config.budgets.max_overlap_drop_pp:g} pp)",
                        evidence={
                            "variant": name,
                            "base_pct": bv.comm_overlap_pct,
                            "head_pct": hv.comm_overlap_pct,
                            "ddp_splits": [bv.ddp_splits, hv.ddp_splits],
                            "splits_lost": bv.ddp_splits > 0 and hv.ddp_splits == 0,
                            "backend": backend,
                        },
                    )
                )
    pairs = [(name, b[name].collective_calls, hv.collective_calls) for name, hv in h.items() if name in b]
    return out + group_findings(workload, "ddp", pairs)


def rows(bd: ProbeResult | None, hd: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    def variants(m: DdpMetrics | None) -> dict[str, DdpVariantMetrics]:
        return {v.variant: v for v in m.variants} if m else {}

    bm, hm = probe_metrics(bd, DdpMetrics), probe_metrics(hd, DdpMetrics)
    bv, hv = variants(bm), variants(hm)
    world = m.world_size if (m := hm if hd else bm) else "?"
    rows: list[Row] = []
    for name in [*bv, *[n for n in hv if n not in bv]]:
        b, h = bv.get(name), hv.get(name)

        def cell(v: DdpVariantMetrics | None, r: ProbeResult | None) -> str:
            if v is None:
                return status_cell(r) or "—"
            if v.error:
                return "fails"
            overlap = f", {Figure(v.comm_overlap_pct, '%')} hidden" if v.comm_overlap_pct is not None else ""
            calls = sum(c.count for c in v.collectives)
            step = str(Figure(v.step_ms, "ms", 1)) if v.step_ms is not None else "—"
            graphs = ""
            if v.variant != "eager":
                breaks = sum(g.count for g in v.graph_breaks)
                graphs = f", {v.graph_count} graph{'s' if v.graph_count != 1 else ''}"
                graphs += f" ({breaks} break{'s' if breaks != 1 else ''}, {v.ddp_splits} DDP splits)"
            return f"{step}{graphs}, {calls} collectives{overlap}"

        ranks = f"{world} rank{'s' if world != 1 else ''}"
        rows.append(Row(f"DDP {name} ({ranks})", cell(b, bd), cell(h, hd), ""))
    return settled(rows, bd, hd)


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    bm, hm = probe_metrics(base, DdpMetrics), probe_metrics(head, DdpMetrics)
    if bm is None or hm is None:
        return Compared(inconclusive=[f"{wl}/ddp: no DDP measurements to compare"])
    failed = failed_variants(wl, "ddp", bm.variants, hm.variants)
    return Compared(findings(wl, base, head, config) + failed.findings, failed.inconclusive)


PROBE = ProbeKind(
    name="ddp",
    summary="DDP under torchrun: eager, compile(DDP), DDP(compile); rank graphs, collectives, overlap",
    compare=compare,
    rows=rows,
    settings=DdpSettings,
    metrics=DdpMetrics,
    run="perfcheck.runner.probes.ddp_probe:run",
    raises=("rank_graph_mismatch", "collective_drift", GROUP_CHANGED, VARIANT_FAILED),
    categories=entries_beside(__file__),  # ddp.yml: its own categories' entries
    prior_s={"cpu": 60.0, "cuda": 120.0},  # several variants under torchrun
)
