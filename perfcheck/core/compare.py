"""Compare base and head probe results into findings and a verdict. Pure functions, no I/O.

Each probe compares its own results (``perfcheck/core/probes/<probe>.py``, found through the registry);
here: what every probe shares — a side that crashed or timed out — and the review's verdict.
Structural findings are exact: a new graph break, a changed IR hash or a new recompile reason
is a difference, not a statistic. Budgets only say how many of them a project tolerates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perfcheck.config import Config
from perfcheck.core import probes
from perfcheck.core.explain import explain
from perfcheck.core.matrix import known
from perfcheck.core.probes.kind import ProbeKind
from perfcheck.core.setup_faults import setup_fault
from perfcheck.measures import CompileLatencyChange, Severity, TimingChange, Verdict
from perfcheck.schema import Finding, ProbeResult, WorkloadReview


@dataclass(frozen=True)
class Comparison:
    findings: list[Finding]
    # Why the verdict could not be decided either way (a side that could not be probed, ...).
    inconclusive: list[str] = field(default_factory=list)
    timing_changes: dict[str, TimingChange] = field(default_factory=dict)
    compile_latency_changes: dict[str, CompileLatencyChange] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.findings, self.inconclusive)


def verdict_of(findings: list[Finding], inconclusive: list[str]) -> Verdict:
    """The one verdict rule: an error no acknowledgement covers fails the review; otherwise any
    reason it could not be decided makes it inconclusive."""
    if any(f.severity == "error" and f.ack is None for f in findings):
        return "fail"
    return "inconclusive" if inconclusive else "pass"


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
        severity: Severity
        if side == "head":
            severity = "warning" if both else "error"
            message = f"{what} (it does on base too)" if both else what
            if both:
                inconclusive.append(f"{wl}/{probe}: neither side could be probed")
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
                message=message,
                evidence={"side": side, "detail": result.message or ""},
            )
        )
    return out


def _not_measured(
    wl: str, probe: str, b: ProbeResult, h: ProbeResult, found: list[Finding], why: list[str]
) -> str | None:
    """Why the verdict cannot be a pass where a side of ``probe`` did not finish and neither its
    comparator nor the crash findings said anything that decides: a probe that did not run on a
    side is never "unchanged" (issue 40). Head fixing what failed on base (torch refused base's
    code, head's runs) is measured on head and needs no reason."""
    if b.status == h.status == "ok" or (b.status == "failed" and h.status == "ok") or why:
        return None
    if any(f.severity == "error" and f.probe == probe for f in found):
        return None  # decided: it fails
    sides = [r for r in (b, h) if r.status != "ok"]
    where = "either side" if len(sides) == 2 else sides[0].side
    first = ((sides[-1].message or "").strip().splitlines() or [sides[-1].status])[0]
    hint = f"; where it cannot run, leave {probe} out of the workload's probes" if len(sides) == 2 else ""
    statuses = ", ".join(dict.fromkeys(r.status for r in sides))
    return f"{wl}/{probe}: not measured on {where} ({statuses}): {first[:300]}{hint}"


def _by_probe(results: list[ProbeResult]) -> dict[str, ProbeResult]:
    return {r.probe: r for r in results}


def _unfit_metrics(kind: ProbeKind, *results: ProbeResult) -> str | None:
    """Why a plugin probe's results cannot be compared (their metrics do not fit its model), or None.
    The orchestrator checks what its own workers write; a merged shard is checked here."""
    for r in results:
        try:
            kind.metrics_of(r)
        except ValueError as err:
            return f"{r.side}: {err}"
    return None


def compare_workload(wl: WorkloadReview, config: Config) -> Comparison:
    base, head = _by_probe(wl.base), _by_probe(wl.head)
    findings: list[Finding] = []
    inconclusive: list[str] = []
    changes: dict[str, TimingChange] = {}
    latency: dict[str, CompileLatencyChange] = {}
    # A module the workload imports that is not installed: one finding for the probes it stopped.
    fault = setup_fault(wl)
    findings += fault.findings
    inconclusive += fault.inconclusive
    for name in sorted(set(base) | set(head)):
        if name in fault.stopped:
            continue
        b, h = base.get(name), head.get(name)
        said = len(findings), len(inconclusive)
        findings += _status_findings(wl.name, name, b, h, inconclusive)
        kind = probes.get(name)
        if b is None or h is None or kind is None or kind.compare is None:
            continue
        if b.status == h.status == "skipped":
            # Asked for and not run (the review's time budget ran out first): nothing was measured.
            first = ((h.message or "").strip().splitlines() or ["not run"])[0]
            inconclusive.append(f"{wl.name}/{name}: {first[:300]}")
            continue
        rejected = [r for r in (h, b) if r.status == "failed" and r.status not in kind.compared]
        if rejected:
            # torch refused the side's code: the compile or export probe says so as a finding;
            # this probe has nothing to compare. Refused on base only, head fixed it: measured
            # on head, as _not_measured has it, and no reason the review cannot be decided.
            for r in rejected if rejected[0] is h else ():
                first = ((r.message or "").strip().splitlines() or ["torch rejected the code"])[0]
                inconclusive.append(f"{wl.name}/{name}: not measured on {r.side}: {first[:300]}")
            continue
        if b.status in kind.compared and h.status in kind.compared:
            unfit = _unfit_metrics(kind, b, h)
            if unfit:
                inconclusive.append(f"{wl.name}/{name}: {unfit}")
                continue
            got = kind.compare(wl.name, b, h, config)
            findings += got.findings
            inconclusive += got.inconclusive
            if got.timing is not None:
                changes[wl.name] = got.timing
            if got.compile_latency is not None:
                latency[wl.name] = got.compile_latency
        unsaid = _not_measured(wl.name, name, b, h, findings[said[0] :], inconclusive[said[1] :])
        inconclusive += [unsaid] if unsaid else []
    return Comparison(with_project_severity(explain(findings), config), inconclusive, changes, latency)


_ARTICLE = {"error": "an", "warning": "a", "info": "an"}


def with_project_severity(findings: list[Finding], config: Config) -> list[Finding]:
    """A project's ``matrix.<category>.severity`` (perfcheck.yml, read from base): the findings
    at the category's own severity take the project's, saying so; those their comparator softened
    (within a budget, as on base) keep theirs. After ``explain``, which reads perfcheck's own."""
    wanted = {c: e.severity for c, e in config.matrix.items() if e.severity is not None}
    if not wanted:
        return findings
    entries = known()
    out = []
    for f in findings:
        to, entry = wanted.get(f.category), entries.get(f.category)
        if to is None or entry is None or f.severity != entry.severity or to == f.severity:
            out.append(f)
            continue
        out.append(
            f.model_copy(
                update={
                    "severity": to,
                    "message": f"{f.message}; {_ARTICLE[to]} {to} by this project's "
                    f"matrix.{f.category}.severity, not {_ARTICLE[entry.severity]} {entry.severity}",
                    "evidence": {**f.evidence, "severity_by_default": entry.severity},
                }
            )
        )
    return out


_ORDER = {"error": 0, "warning": 1, "info": 2}


def compare(workloads: list[WorkloadReview], config: Config) -> Comparison:
    each = [compare_workload(wl, config) for wl in workloads]
    findings = [f for c in each for f in c.findings]
    findings.sort(key=lambda f: _ORDER[f.severity])
    return Comparison(
        findings=findings,
        inconclusive=[why for c in each for why in c.inconclusive],
        timing_changes={k: v for c in each for k, v in c.timing_changes.items()},
        compile_latency_changes={k: v for c in each for k, v in c.compile_latency_changes.items()},
    )
