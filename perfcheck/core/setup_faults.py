"""A setup fault told as one: a module a workload imports that is not installed where its probes run.

A missing module stops every probe that reaches the import, each its own way: the compile probe's
process crashes, torch.export fails on it (and its error, read as a model's, would say
"data-dependent control flow"), the timing worker crashes and the other side's is not compared.
None of those is the model's fault, and none says what to do. Read from each probe result's own
words (Python's "No module named 'x'"), a workload's missing modules are one finding per module
and side: the module, where the tree imports it, and which probes it stopped, whose own findings
are not made. Where both sides miss the same module, nothing of the workload was measured: the
setup is wrong, not the pull request (the CLI exits 2); where only head misses it, the pull request
imports something the runner lacks, a regression; where only base does, head is measured alone.

Pure: results in, a finding and the probes it stands for out. The texts are untrusted (the probe
job's): only searched by fixed expressions, and a location is taken only as a tree-relative path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding, ProbeResult, WorkloadReview

CATEGORY = "module_missing"

_MISSING = re.compile(r"No module named '([A-Za-z_][\w.]{0,200})'")
# "(at model.py:11)": the worker's tree-relative place; an absolute one is never shown.
_AT = re.compile(r"\(at ([^()\s:]{1,400}):(\d{1,7})\)")
# "  model.py:11 in forward: import fancy": the worker's user frames, innermost last.
_FRAME = re.compile(r"^\s+([^\s:]{1,400}):(\d{1,7}) in ([\w.<>]{1,200}): (.{0,400})$", re.M)


@dataclass(frozen=True)
class Missing:
    module: str
    where: SourceLocation | None


def missing_in(result: ProbeResult) -> Missing | None:
    """The module ``result``'s probe could not import, from its own words, or None."""
    if result.status not in ("crashed", "failed"):
        return None
    text = "\n".join(t for t in (result.message, str(result.metrics.get("error_message") or "")) if t)
    found = _MISSING.search(text)
    if found is None:
        return None
    return Missing(found.group(1), _where(result, text))


def _where(result: ProbeResult, text: str) -> SourceLocation | None:
    frames = _FRAME.findall(text)
    if frames:
        path, line, function, code = frames[-1]
        if not path.startswith("/"):
            return SourceLocation(path=path, line=int(line), function=function, code=code.strip() or None)
    located = result.metrics.get("error_location")
    if isinstance(located, dict):
        try:
            loc = SourceLocation.model_validate(located)
        except ValueError:
            loc = None
        if loc is not None and loc.in_tree:
            return loc
    at = _AT.search(text)
    if at is not None and not at.group(1).startswith("/"):
        return SourceLocation(path=at.group(1), line=int(at.group(2)))
    return None


@dataclass(frozen=True)
class Fault:
    """What a workload's missing modules make of its review."""

    findings: list[Finding] = field(default_factory=list)
    stopped: frozenset[str] = frozenset()  # the probes whose own findings these stand for
    inconclusive: list[str] = field(default_factory=list)
    both: bool = False  # a module neither side has: nothing of the workload was measured


def _stopped_by_the_other(result: ProbeResult) -> bool:
    """A paired probe's side that did not run because the other side's worker failed."""
    return result.status == "skipped" and "other side" in (result.message or "")


def setup_fault(wl: WorkloadReview) -> Fault:
    """The workload's missing modules, one finding each (per module, on the sides that miss it)."""
    seen: dict[tuple[str, str], tuple[Missing, list[str]]] = {}
    for side, results in (("head", wl.head), ("base", wl.base)):
        for r in results:
            got = missing_in(r)
            if got is None:
                continue
            key = (side, got.module)
            where, probes = seen.get(key, (got, []))
            if where.where is None and got.where is not None:
                where = got
            seen[key] = (where, [*probes, r.probe])
    if not seen:
        return Fault()
    stopped = {p for _, probes in seen.values() for p in probes}
    stopped |= {r.probe for r in (*wl.base, *wl.head) if _stopped_by_the_other(r)}
    findings, inconclusive = [], []
    modules = dict.fromkeys(module for _, module in seen)
    both = False
    for module in modules:
        sides = [side for side in ("base", "head") if (side, module) in seen]
        missing, probes = seen[(sides[-1], module)]
        if sides == ["base", "head"]:
            probes = list(dict.fromkeys([*seen[("base", module)][1], *probes]))
        both = both or len(sides) == 2
        findings.append(_finding(wl.name, module, sides, missing.where, probes))
        if sides != ["head"]:
            what = "either side" if len(sides) == 2 else "base"
            inconclusive.append(
                f"{wl.name}: not measured on {what}: module {module!r} is not installed where the probes run"
            )
    return Fault(findings, frozenset(stopped), inconclusive, both)


def _finding(
    wl: str, module: str, sides: list[str], where: SourceLocation | None, probes: list[str]
) -> Finding:
    at = f" (imported at {where.path}:{where.line})" if where is not None else ""
    stops = ", ".join(dict.fromkeys(probes))
    if sides == ["head"]:
        severity, said = (
            "error",
            (
                f"head imports `{module}`{at}, which is not installed where the probes run: "
                "add it to what the runner installs, or drop the import"
            ),
        )
    elif sides == ["base"]:
        severity, said = (
            "warning",
            (
                f"base cannot import `{module}`{at}, which is not installed where the probes run; "
                "head does not need it, so head is measured alone"
            ),
        )
    else:
        severity, said = (
            "warning",
            (
                f"`{module}`{at} is not installed where the probes run, on base and head alike: the "
                "runner's setup is missing a dependency, not the pull request"
            ),
        )
    return Finding(
        category=CATEGORY,
        severity=severity,  # type: ignore[arg-type]
        workload=wl,
        probe=probes[0],
        location=where,
        message=f"{said} (it stops the {stops} probe{'s' if len(probes) > 1 else ''})",
        evidence={"module": module, "sides": sides, "side": sides[-1], "stops": stops},
    )


def both_sides_missing(wl: WorkloadReview) -> str | None:
    """Why ``wl`` measured nothing because a module is missing on both sides, or None: a setup
    error (the CLI's exit 2), as a workload whose own import fails on both sides is."""
    fault = setup_fault(wl)
    if not fault.both:
        return None
    first = next(f for f in fault.findings if f.evidence.get("sides") == ["base", "head"])
    return f"workload {wl.name!r}: {first.message}"
