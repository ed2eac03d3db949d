"""Cache-cold compiles of one workload in a process of its own, counted under callgrind.

Valgrind must start the process, so callgrind's compiles cannot run in a process that is there
anyway: the orchestrator runs this worker-only probe (``compile_latency``) under valgrind, one
process a side, and hands its samples to the side's compile result (perfcheck/runner/latency/runs.py). The
first compile of the process is a warm-up and is not counted (perfcheck/runner/latency/cold_compile.py says
why).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from perfcheck.measures import CompileLatency
from perfcheck.runner.latency.callgrind import Counter
from perfcheck.runner.latency.cold_compile import cold_compile
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.spec import ProbeSpec


class CompileLatencyProbe:
    name = "compile_latency"

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput:
        plan = spec.latency
        if plan is None:
            raise ValueError("compile_latency needs the spec's latency plan")
        counter = Counter() if plan.measure == "callgrind" else None
        start = time.time()
        cold_compile(spec, build, None)  # the warm-up: what a process pays once
        longest = time.time() - start
        samples = []
        for _ in range(plan.compiles):
            if plan.stop_by is not None and time.time() + longest > plan.stop_by:
                break  # it would end past the review's budget: keep what was measured
            began = time.time()
            samples.append(cold_compile(spec, build, counter))
            longest = time.time() - began if len(samples) == 1 else max(longest, time.time() - began)
        note = (
            f"stopped after {len(samples)} of {plan.compiles} compiles: the next would have ended past "
            "review.time_budget_s"
            if len(samples) < plan.compiles
            else None
        )
        latency = CompileLatency(measure=plan.measure, samples=samples, note=note)
        return ProbeOutput(metrics={"latency": latency.model_dump(mode="json")})
