"""What a review says of its plan before anything runs, which probes the first results call
for, and how a step's parts are said in its progress line.
"""

from __future__ import annotations

from collections.abc import Mapping

from perfcheck.config import follow_up_probes
from perfcheck.core import probes
from perfcheck.runner.budget import prior
from perfcheck.runner.latency import runs as latency_runs
from perfcheck.runner.review_run import ReviewRun
from perfcheck.schema import ProbeResult
from perfcheck.settings import WorkloadConfig


def plan_line(
    run: ReviewRun,
    wanted: list[tuple[WorkloadConfig, str]],
    latency_at: Mapping[str, latency_runs.Where | None],
    budget_s: float,
) -> str:
    """The plan, said before anything runs: which probes of which workloads, what each costs
    before this review measured anything (a prior), and the budget they are fitted to."""
    per_side = [p for _, p in wanted if p != "timing"]
    kinds = list(dict.fromkeys(per_side))
    parts = [f"{k} ×{2 * per_side.count(k)} (~{prior(k, run.device):.0f} s each)" for k in kinds]
    timed = [w.name for w, p in wanted if p == "timing"]
    cfg = run.config.timing
    if timed:
        parts.append(
            f"timing of {len(timed)} workload{'s' if len(timed) != 1 else ''} "
            f"({cfg.processes}–{cfg.max_processes} pairs each)"
        )
    where = {v for v in latency_at.values() if v is not None}
    if where:
        places = {
            "timing": "in the timing pairs",
            "rounds": "both sides at once, after the compile probes",
            "callgrind": "under callgrind",
        }
        parts.append(
            f"compile latency ({run.config.compile.runs} cache-cold compiles a side, "
            + " / ".join(places[w] for w in sorted(where))
            + ")"
        )
    return f"plan: {', '.join(parts)}; review.time_budget_s {budget_s:g} s"


def follow_ups(
    run: ReviewRun, wanted: list[tuple[WorkloadConfig, str]], done: list[ProbeResult]
) -> list[tuple[WorkloadConfig, str]]:
    """Probes the first results call for (a descriptor's ``follow_up``: custom_ops on a workload
    whose exported graph calls a custom op, say), where its probes were left to the defaults."""
    out = []
    for wl in run.workloads:
        planned = {p for w, p in wanted if w.name == wl.name}
        mine = [r for r in done if r.workload == wl.name]
        for name in follow_up_probes(run.config, wl, planned, run.probes):
            follow = kind.follow_up if (kind := probes.get(name)) is not None else None
            if follow is not None and follow.called_for(run.config, mine):
                out.append((wl, name))
    return out


def parts_said(parts_s: Mapping[str, float]) -> str:
    """A step's parts as its progress line ends: ' — set-up 24 s, pairs 20 s, ...', the parts
    of a second or more, largest first."""
    said = [f"{name} {s:.0f} s" for name, s in sorted(parts_s.items(), key=lambda kv: -kv[1]) if s >= 1]
    return f" — {', '.join(said)}" if said else ""
