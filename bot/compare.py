"""Compare base and head probe results into findings and a verdict. Pure functions, no I/O.

Structural findings are exact: a new graph break, a changed IR hash or a new recompile reason
is a difference, not a statistic. Budgets only say how many of them a project tolerates.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from dataclasses import dataclass, field

from perfcheck.config import Config
from perfcheck.schema import (
    CompileMetrics,
    ExportMetrics,
    Finding,
    GraphBreak,
    ProbeResult,
    Verdict,
    WorkloadReview,
)

MAX_DIFF_LINES = 120


@dataclass(frozen=True)
class Comparison:
    findings: list[Finding]
    # Why the verdict could not be decided either way (a side that could not be probed, ...).
    inconclusive: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        if any(f.severity == "error" for f in self.findings):
            return "fail"
        return "inconclusive" if self.inconclusive else "pass"


def _break_key(gb: GraphBreak) -> tuple[str, str, str]:
    # Keyed by the source text, not the line number: a PR that adds lines above an old break
    # moves it without adding one.
    loc = gb.location
    where = (loc.path, loc.code or str(loc.line)) if loc else ("?", "?")
    return (gb.break_type, *where)


def _resume_base(function: str) -> str:
    match = re.match(r"torch_dynamo_resume_in_(\w+?)_at_\d+$", function)
    return match.group(1) if match else function


def normalize_guard(reason: str) -> str:
    """A recompile reason with its values blanked, so the same cause compares equal."""
    text = re.sub(r"'[^']*'", "'…'", reason)
    return re.sub(r"\d+", "N", text)


def _status_findings(
    wl: str, probe: str, base: ProbeResult | None, head: ProbeResult | None, inconclusive: list[str]
) -> list[Finding]:
    out: list[Finding] = []
    for side, result in (("head", head), ("base", base)):
        if result is None or result.status not in ("crashed", "timeout"):
            continue
        category = "probe_crashed" if result.status == "crashed" else "probe_timeout"
        what = f"the {probe} probe {'crashed' if result.status == 'crashed' else 'timed out'} on {side}"
        other = base if side == "head" else head
        both = other is not None and other.status == result.status
        if side == "head":
            severity = "warning" if both else "error"
            message = f"{what} (it does on base too)" if both else what
        else:
            if both:
                continue  # already reported from the head side
            severity = "warning"
            message = f"{what}: head cannot be compared"
            inconclusive.append(f"{wl}/{probe}: base could not be probed")
        out.append(
            Finding(
                category=category,
                severity=severity,
                workload=wl,
                probe=probe,
                message=message,  # type: ignore[arg-type]
                evidence={"side": side, "detail": result.message or ""},
            )
        )
    return out


def _compile_findings(wl: str, base: CompileMetrics, head: CompileMetrics, config: Config) -> list[Finding]:
    out: list[Finding] = []
    base_breaks = Counter({_break_key(b): b.count for b in base.graph_breaks})
    head_breaks = Counter({_break_key(b): b.count for b in head.graph_breaks})
    added, removed = head_breaks - base_breaks, base_breaks - head_breaks
    over_budget = sum(added.values()) > config.budgets.max_new_graph_breaks
    graphs = [base.graph_count, head.graph_count]
    changes = (
        ("graph_break_added", "error" if over_budget else "warning", head.graph_breaks, added, "splits"),
        ("graph_break_removed", "info", base.graph_breaks, removed, "no longer splits"),
    )
    for category, severity, breaks, delta, verb in changes:
        for gb in breaks:
            if delta[_break_key(gb)]:
                out.append(
                    Finding(
                        category=category,  # type: ignore[arg-type]
                        severity=severity,  # type: ignore[arg-type]
                        workload=wl,
                        probe="compile",
                        location=gb.location,
                        message=f"Dynamo {verb} the graph here: {gb.break_type}",
                        evidence={
                            "break_type": gb.break_type,
                            "reason": gb.reason,
                            "count": delta[_break_key(gb)],
                            "graphs": graphs,
                        },
                    )
                )
    base_reasons = {(_resume_base(r.function), normalize_guard(r.reason)) for r in base.recompiles}
    new = [
        r
        for r in head.recompiles
        if (_resume_base(r.function), normalize_guard(r.reason)) not in base_reasons
    ]
    seen: set[tuple[str, str]] = set()
    for r in new:
        key = (_resume_base(r.function), normalize_guard(r.reason))
        if key in seen:
            continue
        seen.add(key)
        out.append(
            Finding(
                category="recompile",
                severity="error",
                workload=wl,
                probe="compile",
                message=f"new recompilation of `{r.function}`: {r.reason.splitlines()[0]}",
                evidence={
                    "function": r.function,
                    "reason": r.reason,
                    "recompiles": [base.recompile_count, head.recompile_count],
                },
            )
        )
    return out


def _export_findings(wl: str, base: ProbeResult, head: ProbeResult) -> list[Finding]:
    out: list[Finding] = []
    b: ExportMetrics | None = base.export
    h: ExportMetrics | None = head.export
    if h is None:
        return out
    if head.status == "failed":
        base_failed = base.status == "failed"
        out.append(
            Finding(
                category="export_failed",
                severity="warning" if base_failed else "error",
                workload=wl,
                probe="export",
                location=h.error_location,
                message=f"torch.export fails{' (as on base)' if base_failed else ''}: {h.error_type}",
                evidence={"error_type": h.error_type, "error": (h.error_message or "")[:2000]},
            )
        )
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
        summary = (
            ", ".join(f"{op} {n0}→{n1}" for op, (n0, n1) in op_diff.items()) or "same ops, different graph"
        )
        out.append(
            Finding(
                category="export_ir_changed",
                severity="error",
                workload=wl,
                probe="export",
                message=f"ops: {summary}",
                evidence={
                    "base_sha256": b.graph_sha256,
                    "head_sha256": h.graph_sha256,
                    "op_diff": op_diff,
                    "diff": "\n".join(diff[:MAX_DIFF_LINES]),
                    "diff_truncated": len(diff) > MAX_DIFF_LINES,
                },
            )
        )
    return out


def _by_probe(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {r.probe: r for r in results}


def compare_workload(wl: WorkloadReview, config: Config, inconclusive: list[str]) -> list[Finding]:
    base, head = _by_probe(wl.base), _by_probe(wl.head)
    findings: list[Finding] = []
    for probe in sorted(set(base) | set(head)):
        b, h = base.get(probe), head.get(probe)
        findings += _status_findings(wl.name, probe, b, h, inconclusive)
        if b is None or h is None:
            continue
        if probe == "compile" and b.compile and h.compile and b.status == h.status == "ok":
            findings += _compile_findings(wl.name, b.compile, h.compile, config)
        elif probe == "export" and b.status in ("ok", "failed") and h.status in ("ok", "failed"):
            findings += _export_findings(wl.name, b, h)
    return findings


_ORDER = {"error": 0, "warning": 1, "info": 2}


def compare(workloads: list[WorkloadReview], config: Config) -> Comparison:
    inconclusive: list[str] = []
    findings = [f for wl in workloads for f in compare_workload(wl, config, inconclusive)]
    findings.sort(key=lambda f: _ORDER[f.severity])
    return Comparison(findings=findings, inconclusive=inconclusive)
