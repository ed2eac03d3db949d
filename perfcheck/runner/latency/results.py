"""Compile-latency samples joined to the compile results they belong to: where a workload's are
measured, whether head's compile starts from base's cache, and each side's samples with the
note that says why they are what they are (perfcheck/runner/latency/runs.py makes them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from perfcheck.measures import CompileLatency, CompileMetrics, Side, TimingMetrics
from perfcheck.runner.latency import runs as latency_runs
from perfcheck.runner.process.sides import (
    SHARED_CACHE_ENV,
)
from perfcheck.runner.review_run import ReviewRun
from perfcheck.runner.timing.pairs import PendingLatency
from perfcheck.schema import ProbeResult, probe_metrics
from perfcheck.settings import WorkloadConfig


def latency_place(run: ReviewRun, planned: set[str]) -> latency_runs.Where | None:
    """Where a workload's compile latency is measured (perfcheck/runner/latency/runs.py), or None: not where
    no compile is cold (``PERFCHECK_COMPILE_CACHE``), nor with ``compile.measure: off``, nor
    without the compile probe, whose results it joins."""
    measure = run.config.compile.measure
    if os.environ.get(SHARED_CACHE_ENV) or measure == "off" or "compile" not in planned:
        return None
    if measure == "callgrind":
        return "callgrind"
    # A compiled timing worker has compiled once and sits idle after its rounds: the place to make
    # a cache-cold compile that pays nothing a fresh process would.
    # Without them, a round of processes a side at once after the compile probes
    # (perfcheck/runner/latency/stage.py ``_first_round``).
    return "timing" if "timing" in planned and run.config.timing.compiled else "rounds"


def shares_compile_cache(run: ReviewRun, wl: WorkloadConfig, busy: bool = False) -> bool:
    """Whether head's compile probe waits for base's and starts from a copy of its cache: where
    probes run one at a time (--jobs 1, a CPU's default), waiting costs nothing and what both sides
    compile alike is compiled once; so too where there are more per-side probes than slots
    (``busy``), whose slot does other probes' work meanwhile (head's compiles are queued last).
    Where every probe has a slot of its own (a GPU runner's default, one workload), the sides
    compile at the same time instead, on cores that would idle: measured on the H200, a Llama
    review's head waited 39 s for base and then compiled its changed attention for 59 s anyway."""
    return (
        (run.jobs <= 1 or busy)
        and run.base.python == run.head.python
        and wl.name not in run.config.budgets.compile_latency_s
    )


def compiled_both(results: list[ProbeResult], workload: str) -> dict[str, CompileMetrics] | None:
    """Both sides' compile metrics of ``workload`` where both compiled, else None."""
    got = {
        r.side: probe_metrics(r, CompileMetrics)
        for r in results
        if r.workload == workload and r.probe == "compile" and r.status == "ok"
    }
    if set(got) != {"base", "head"} or any(m is None for m in got.values()):
        return None
    return got  # type: ignore[return-value]


def with_latency(
    results: list[ProbeResult],
    workload: str,
    measured: Mapping[Side, CompileLatency] | Mapping[str, CompileLatency],
) -> list[ProbeResult]:
    """The compile results of ``workload`` with each side's compile-latency samples."""
    out = []
    for r in results:
        compiled = probe_metrics(r, CompileMetrics) if r.workload == workload else None
        if compiled is not None and r.side in measured:
            r = r.with_metrics(compiled.model_copy(update={"latency": measured[r.side]}))
        out.append(r)
    return out


def noted_more(
    latency: Mapping[Side, CompileLatency], compiled: Mapping[str, CompileMetrics], said: str
) -> dict[Side, CompileLatency]:
    """Each side's samples after more pairs, its note saying so after what it said already."""
    out: dict[Side, CompileLatency] = {}
    for side, m in latency.items():
        was = compiled[side].latency
        before = was.note if was is not None and was.note else None
        out[side] = m.model_copy(update={"note": f"{before}; {said}" if before else said})
    return out


def stopped_at_limit(counted: Mapping[Side, CompileLatency]) -> bool:
    """Whether callgrind's time-out (its choice's limit) stopped a side's process before it made
    the two samples a comparison needs."""
    short = min(len(m.samples) for m in counted.values()) < 2
    return short and any(f.startswith("timeout") for m in counted.values() for f in m.failures)


def with_sample_phases(result: ProbeResult, pending: Sequence[PendingLatency]) -> ProbeResult:
    """A timing result whose pairs made their samples after it was written, with the seconds each
    of its processes spent on its sample among its phases, as where they were made at once."""
    spent = next((p.latency_s() for p in pending if p.workload == result.workload), None)
    timing = probe_metrics(result, TimingMetrics)
    if timing is None or spent is None:
        return result
    mine = spent.get(result.side, {})
    processes = [
        p.model_copy(update={"phases_s": {**p.phases_s, "latency": mine[i]}}) if i in mine else p
        for i, p in enumerate(timing.processes)
    ]
    return result.with_metrics(timing.model_copy(update={"processes": processes}))


def samples_said(latency: Mapping[str, CompileLatency]) -> str:
    """'3 cache-cold per side', or why there are none."""
    n = min((len(m.samples) for m in latency.values()), default=0)
    if n:
        return f"{n} cache-cold per side"
    failures = [f for m in latency.values() for f in m.failures]
    return f"not measured: {failures[0] if failures else 'no sample came back'}"
