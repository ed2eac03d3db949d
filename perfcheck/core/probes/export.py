"""The export probe, reviewed: the canonical exported graph's hash and ops, denied ops, failures."""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcheck.core.markdown import Compound, Figure
from perfcheck.core.probes.kind import (
    Cell,
    Column,
    Compared,
    ProbeKind,
    Row,
    entries_beside,
    rejected_finding,
    settled,
    status_or,
)
from perfcheck.measures import SourceLocation, Strict
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView

MAX_DIFF_LINES = 120


class ExportMetrics(Strict):
    graph_sha256: str | None = None
    graph_text: str | None = Field(default=None, description="canonical rendering of the exported graph")
    op_counts: dict[str, int] = Field(default={})
    denied_ops: list[str] = Field(default=[])
    error_type: str | None = None
    error_kind: str | None = Field(
        default=None,
        max_length=100,
        description="what torch's error says it is, where it says (a UserError's type, e.g. "
        "DYNAMIC_CONTROL_FLOW)",
    )
    error_message: str | None = None
    error_location: SourceLocation | None = None


# An op as the export: section names it: aten.addmm or aten.addmm.default.
_OP_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*){1,2}$")


class ExportSettings(BaseModel):
    """The `export:` section of perfcheck.yml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow_ops: list[str] = Field(default_factory=list, description="if set, every op must be listed")
    deny_ops: list[str] = Field(default_factory=list)
    strict: bool = Field(default=False, description="torch.export strict (Dynamo) tracing")
    decompose: bool = Field(default=True, description="hash the core ATen IR after run_decompositions()")
    fail_on_ir_change: bool = Field(
        default=False,
        description="an IR change fails the check (a compiler repo, where the IR is the contract); "
        "off, it is a warning. Denied ops and ops outside allow_ops fail either way",
    )

    @field_validator("allow_ops", "deny_ops")
    @classmethod
    def _ops(cls, v: list[str]) -> list[str]:
        for op in v:
            if not _OP_NAME.match(op):
                raise ValueError(f"op names like 'aten.native_dropout.default'; got {op!r}")
        return v


def _total(op_diff: dict[str, list[int]], part: str, side: int) -> int:
    return sum(counts[side] for op, counts in op_diff.items() if part in op)


def read_op_diff(op_diff: dict[str, list[int]], base_text: str, head_text: str, training: bool) -> str | None:
    """What the op diff itself says happened, for the matrix's rules; None when it says nothing
    more than "different ops". ``op_diff`` holds only the ops whose counts differ."""
    sdpa_b, sdpa_h = _total(op_diff, "scaled_dot_product", 0), _total(op_diff, "scaled_dot_product", 1)
    soft_b, soft_h = _total(op_diff, "softmax", 0), _total(op_diff, "softmax", 1)
    if sdpa_b > sdpa_h and soft_h > soft_b:
        return "sdpa lost"
    if sdpa_h > sdpa_b and soft_b > soft_h:
        return "sdpa gained"
    if "torch.float64" in head_text and "torch.float64" not in base_text:
        return "float64"
    if not training and _total(op_diff, "dropout", 1) > _total(op_diff, "dropout", 0):
        return "dropout in eval"
    return None


def _training(config: SettingsView, wl: str) -> bool:
    try:
        return config.workload(wl).train
    except KeyError:
        return False


def _ir_changed(wl: str, b: ExportMetrics, h: ExportMetrics, config: SettingsView) -> Finding:
    ops = sorted(set(b.op_counts) | set(h.op_counts))
    op_diff = {
        op: [b.op_counts.get(op, 0), h.op_counts.get(op, 0)]
        for op in ops
        if b.op_counts.get(op, 0) != h.op_counts.get(op, 0)
    }
    diff = list(
        difflib.unified_diff(
            (b.graph_text or "").splitlines(),
            (h.graph_text or "").splitlines(),
            "base",
            "head",
            lineterm="",
            n=1,
        )
    )
    summary = ", ".join(f"{op} {n0}→{n1}" for op, (n0, n1) in op_diff.items()) or "same ops, different graph"
    # Severity by intent: a model repo changes its IR on purpose; a compiler repo makes it a contract.
    fail = config.section(ExportSettings).fail_on_ir_change
    decided = "export.fail_on_ir_change is on" if fail else "a warning: export.fail_on_ir_change is off"
    evidence: dict[str, object] = {
        "base_sha256": b.graph_sha256,
        "head_sha256": h.graph_sha256,
        "op_diff": op_diff,
        "diff": "\n".join(diff[:MAX_DIFF_LINES]),
        "diff_truncated": len(diff) > MAX_DIFF_LINES,
    }
    reading = read_op_diff(op_diff, b.graph_text or "", h.graph_text or "", _training(config, wl))
    if reading is not None:
        evidence["reading"] = reading
    return Finding(
        category="export_ir_changed",
        severity="error" if fail else "warning",
        workload=wl,
        probe="export",
        message=f"ops: {summary} ({decided})",
        evidence=evidence,
    )


def _export_findings(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> list[Finding]:
    out: list[Finding] = []
    b, h = probe_metrics(base, ExportMetrics), probe_metrics(head, ExportMetrics)
    if h is None:
        return out
    if base.status == "failed" and head.status == "ok" and b is not None:
        out.append(
            Finding(
                category="export_fixed",
                severity="info",
                workload=wl,
                probe="export",
                message=f"torch.export works on head (on base it failed: {b.error_type})",
                # Base's failure is the evidence: its verify commands show base's side.
                evidence={"side": "base", "base_error": (b.error_message or "")[:2000]},
                # Where base's export failed: the line head changed, most likely.
                location=b.error_location,
            )
        )
    if head.status == "failed":
        out.append(rejected_finding("export_failed", wl, "export", "torch.export", h, base))
        return out
    base_denied = set(b.denied_ops) if b is not None else set()
    for op in h.denied_ops:
        known = op in base_denied
        out.append(
            Finding(
                category="export_op_denied",
                severity="warning" if known else "error",
                workload=wl,
                probe="export",
                message=f"exported graph uses `{op}`, which the config does not allow"
                + (" (as on base)" if known else ""),
                evidence={"op": op, "count": h.op_counts.get(op, 0)},
            )
        )
    if b is not None and base.status == "ok" and b.graph_sha256 != h.graph_sha256:
        out.append(_ir_changed(wl, b, h, config))
    return out


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    return Compared(_export_findings(wl, base, head, config))


def rows(be: ProbeResult | None, he: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    rows: list[Row] = []
    if be or he:
        bx, hx = probe_metrics(be, ExportMetrics), probe_metrics(he, ExportMetrics)

        def ir(m: ExportMetrics | None) -> Cell:
            if m is None or m.graph_sha256 is None:
                return "—"
            return Compound(m.graph_sha256[:10], Figure(sum(m.op_counts.values()), "ops"))

        same = bx is not None and hx is not None and bx.graph_sha256 and bx.graph_sha256 == hx.graph_sha256
        rows.append(Row("export IR", ir(bx), ir(hx), "=" if same else ("changed" if bx and hx else "")))
    return settled(rows, be, he)


def overview(be: ProbeResult | None, he: ProbeResult | None, wl: WorkloadReview) -> dict[str, str]:
    """Whether the canonical graph's hash is the same ("=") or "changed" (a side's status where it
    did not finish; "—" where export ran on neither side)."""

    def ir(r: ProbeResult | None) -> str | None:
        x = probe_metrics(r, ExportMetrics)
        return status_or(r, x.graph_sha256[:10] if x and x.graph_sha256 else None)

    b, h = ir(be), ir(he)
    return {"export": "—" if b is None and h is None else ("=" if b == h else "changed")}


PROBE = ProbeKind(
    name="export",
    reusable=True,
    summary="the canonical torch.export graph: hash, op multiset, allow/deny lists, failures",
    default=True,
    compare=compare,
    rows=rows,
    compared=("ok", "failed"),
    settings=ExportSettings,
    metrics=ExportMetrics,
    run="perfcheck.runner.probes.export_probe:run",
    categories=entries_beside(__file__),  # export.yml: its own categories' entries
    columns=(Column("export", "export IR"),),
    overview=overview,
    prior_s={"cpu": 2.0, "cuda": 15.0},
)
