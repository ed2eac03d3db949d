"""The toy probe's descriptor: it counts a workload's parameters and flags a change in the count
beyond what the project allows (settings ``toy.max_growth_pct``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.core.markdown import Figure
from perfcheck.core.probes.kind import (
    Column,
    Compared,
    ProbeKind,
    Row,
    settled,
    side_pair,
    status_cell,
    status_or,
)
from perfcheck.schema import Finding, ProbeResult, WorkloadReview
from perfcheck.settings import SettingsView


class ToySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_growth_pct: float = Field(default=0.0, ge=0, description="parameter growth allowed")


class ToyMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    parameters: int = Field(ge=0)
    tensors: int = Field(ge=0)


def _metrics(r: ProbeResult | None) -> ToyMetrics | None:
    got = PROBE.metrics_of(r) if r is not None else None
    return got if isinstance(got, ToyMetrics) else None


def compare(workload: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    settings = PROBE.settings_of(config)
    assert isinstance(settings, ToySettings)
    b, h = _metrics(base), _metrics(head)
    if b is None or h is None:
        return Compared(inconclusive=[f"{workload}/toy: no parameter count"])
    growth = 100.0 * (h.parameters - b.parameters) / max(b.parameters, 1)
    if growth <= settings.max_growth_pct:
        return Compared()
    finding = Finding(
        category="toy_parameters_grew",
        severity="error",
        workload=workload,
        probe="toy",
        message=f"parameters grew {growth:+.1f} % ({b.parameters} → {h.parameters})",
        evidence={
            "base": str(b.parameters),
            "head": str(h.parameters),
            "limit": f"{settings.max_growth_pct:g} %",
        },
    )
    return Compared(findings=[finding])


def rows(base: ProbeResult | None, head: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    b, h = _metrics(base), _metrics(head)
    row = Row(
        "parameters (toy)",
        status_cell(base) or (Figure(b.parameters) if b else "—"),
        status_cell(head) or (Figure(h.parameters) if h else "—"),
        Figure(h.parameters - b.parameters, signed=True) if b and h else "",
    )
    return settled([row], base, head)  # a side that did not finish: its status, never a figure


def overview(base: ProbeResult | None, head: ProbeResult | None, wl: WorkloadReview) -> dict[str, str]:
    b, h = _metrics(base), _metrics(head)
    counts = (status_or(r, f"{m.parameters:,}" if m else None) for r, m in ((base, b), (head, h)))
    return {"parameters": side_pair(*counts)}


PROBE = ProbeKind(
    name="toy",
    summary="counts the workload's parameters",
    compare=compare,
    rows=rows,
    settings=ToySettings,
    metrics=ToyMetrics,
    run="toyplugin.run:run",
    columns=(Column("parameters", "parameters", numeric=True),),
    overview=overview,
    categories={
        "toy_parameters_grew": {
            "title": "Parameter count grew",
            "nature": "structural",  # exact at any commit: bisect looks for it
            # a cause: a slower step in the same review names it (perfcheck/core/explain.py)
            "role": "cause",
            "because": "the parameter growth ({{ evidence.base }} → {{ evidence.head }})",
            "severity": "error",  # fails the check, unless a project's perfcheck.yml says otherwise
            "details": [{"field": "limit", "label": "Allowed growth"}],
            "symptom": "the model holds more parameters than base, beyond `toy.max_growth_pct`.",
            "causes": ["a layer was widened or added"],
            "verify": ["perfcheck review --base BASE --head HEAD --workloads {workload} --probes toy"],
        }
    },
)
