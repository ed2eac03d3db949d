"""The `ddp` probe: the workload under DistributedDataParallel on ``ddp.world_size`` ranks,
launched with torchrun (perfcheck/runner/torchrun.py). The ranks are perfcheck.runner.ddp_worker; rank 0
writes the gathered metrics, read back here.
"""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.runner.probes.base import ProbeOutput, Workload, register
from perfcheck.runner.torchrun import run_ranks
from perfcheck.schema import DdpMetrics, load_model
from perfcheck.spec import ProbeSpec


class DdpProbe:
    name = "ddp"

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput:
        data, where = run_ranks("perfcheck.runner.ddp_worker", spec, spec.ddp.world_size, "ddp.json")
        metrics = load_model(DdpMetrics, data, where)
        failed = [v for v in metrics.variants if v.error]
        message = "; ".join(f"{v.variant}: {v.error}" for v in failed) or None
        return ProbeOutput(metrics=metrics, message=message)


@register("ddp")
def _factory() -> DdpProbe:
    return DdpProbe()
