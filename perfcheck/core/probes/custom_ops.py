"""custom_op_check_failed: a custom op that fails torch.library.opcheck on head. Pure; no torch.

A check that fails on head but not on base is the PR's doing (error); one that fails the same
way on both sides is old news, still shown so it is not forgotten (warning).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.core.markdown import Compound, Figure
from perfcheck.core.probes.export import ExportMetrics
from perfcheck.core.probes.kind import (
    Cell,
    Compared,
    FollowUp,
    ProbeKind,
    Row,
    entries_beside,
    settled,
    status_cell,
)
from perfcheck.measures import SourceLocation, Strict
from perfcheck.schema import Finding, ProbeResult, WorkloadReview, probe_metrics
from perfcheck.settings import SettingsView

# opcheck raising before any of its checks ran (e.g. it refused the op) has no check name.
NO_CHECK = "opcheck"

# PyTorch's own operator namespaces; '_'-prefixed ones (_c10d_functional, _quantized, ...) are
# internal too. Anything else was registered by a project through torch.library or TORCH_LIBRARY.
TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "c10d", "debugprims", "inductor", "profiler"})


class CustomOpCheck(Strict):
    op: str = Field(description="namespace::name")
    ok: bool
    failed_check: str | None = Field(
        default=None, description="e.g. test_faketensor, test_aot_dispatch_dynamic"
    )
    message: str | None = None
    fake_at: SourceLocation | None = Field(
        default=None, description="where the op's fake (meta) kernel is registered, when it has one"
    )


class CustomOpMetrics(Strict):
    ops: list[CustomOpCheck] = Field(default=[])


class CustomOpsSettings(BaseModel):
    """The `custom_ops:` section of perfcheck.yml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespaces: list[str] = Field(
        default_factory=list,
        description="torch.library namespaces to opcheck (default: those the workload uses)",
    )
    auto: bool = Field(
        default=True,
        description="run custom_ops on a workload whose exported graph calls a custom op, though it was "
        "not asked for (a workload's own `probes` list or --probes still decides)",
    )


def is_custom(namespace: str, configured: list[str]) -> bool:
    if configured:
        return namespace in configured
    return namespace not in TORCH_NAMESPACES and not namespace.startswith("_")


def custom_ops_in_export(result: ProbeResult | None, configured: list[str]) -> list[str]:
    """The custom ops an exported graph calls (``ns.op.overload`` names in its op counts)."""
    exported = probe_metrics(result, ExportMetrics)
    if exported is None:
        return []
    return sorted(op for op in exported.op_counts if "." in op and is_custom(op.split(".")[0], configured))


def check_name(c: CustomOpCheck) -> str:
    return c.failed_check or NO_CHECK


def fake_check(check: str) -> bool:
    """opcheck's checks that compare the fake (meta) kernel with the real one: when one fails,
    tracing (torch.compile, torch.export) sees shapes the real op does not make."""
    return "fake" in check or "aot_dispatch" in check


def custom_op_findings(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> list[Finding]:
    h, b = probe_metrics(head, CustomOpMetrics), probe_metrics(base, CustomOpMetrics)
    if h is None:
        return []
    failing_on_base = {(c.op, check_name(c)) for c in (b.ops if b else []) if not c.ok}
    out: list[Finding] = []
    for c in h.ops:
        if c.ok:
            continue
        still = (c.op, check_name(c)) in failing_on_base
        out.append(
            Finding(
                category="custom_op_check_failed",
                severity="warning" if still else "error",
                workload=wl,
                probe="custom_ops",
                message=f"custom op {c.op} fails opcheck's {check_name(c)}"
                + (" (still failing: it does on base too)" if still else ""),
                evidence={"op": c.op, "check": check_name(c), "message": c.message or "", "on_base": still},
                # Where the kernel the check disagrees with is registered: the line to fix.
                location=c.fake_at if fake_check(check_name(c)) else None,
            )
        )
    return out


def rows(bo: ProbeResult | None, ho: ProbeResult | None, wl: WorkloadReview) -> list[Row]:
    rows: list[Row] = []
    if bo or ho:

        def passing(r: ProbeResult | None) -> Cell:
            m = probe_metrics(r, CustomOpMetrics)
            if m is None:
                return status_cell(r) or "—"
            return Compound(Figure(sum(o.ok for o in m.ops)), Figure(len(m.ops), "pass"), "of")

        rows.append(Row("custom ops (opcheck)", passing(bo), passing(ho), ""))
    return settled(rows, bo, ho)


def compare(wl: str, base: ProbeResult, head: ProbeResult, config: SettingsView) -> Compared:
    return Compared(custom_op_findings(wl, base, head, config))


def _called_for(config: SettingsView, results: list[ProbeResult]) -> bool:
    """A workload whose exported graph (on either side) calls a custom op, or where torch.compile
    or torch.export failed on a side: a custom op's fake kernel that disagrees with the real one
    stops both, and opcheck names the op where the exported graph that would have shown it never
    came. Its eager step then finds the custom ops the workload calls (where there are none it
    says so and nothing more)."""
    if any(r.status == "failed" and r.probe in ("compile", "export") for r in results):
        return True
    namespaces = config.section(CustomOpsSettings).namespaces
    return any(custom_ops_in_export(r, namespaces) for r in results if r.probe == "export")


PROBE = ProbeKind(
    name="custom_ops",
    reusable=True,
    summary="torch.library.opcheck on the custom ops the workload calls, with their real arguments",
    compare=compare,
    rows=rows,
    settings=CustomOpsSettings,
    metrics=CustomOpMetrics,
    run="perfcheck.runner.probes.custom_op_probe:run",
    categories=entries_beside(__file__),  # custom_ops.yml: its own categories' entries
    prior_s={"cpu": 10.0, "cuda": 20.0},
    follow_up=FollowUp(
        after=("export",),
        enabled=lambda config: config.section(CustomOpsSettings).auto,
        called_for=_called_for,
    ),
)
