"""The `ddp` probe's run function: the workload under DistributedDataParallel on ``ddp.world_size``
ranks, launched with torchrun (perfcheck/runner/distributed/torchrun.py). The ranks are
perfcheck.runner.distributed.ddp_worker; rank 0 writes the gathered metrics, read back here. The probe's
descriptor (settings, metrics, categories) is perfcheck/core/probes/ddp.py.
"""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.core.probes.ddp import DdpMetrics, DdpSettings
from perfcheck.runner.distributed.torchrun import run_ranks
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: DdpSettings) -> ProbeOutput:
    data, where = run_ranks("perfcheck.runner.distributed.ddp_worker", spec, settings.world_size, "ddp.json")
    metrics = load_model(DdpMetrics, data, where)
    failed = [v for v in metrics.variants if v.error]
    message = "; ".join(f"{v.variant}: {v.error}" for v in failed) or None
    return ProbeOutput(metrics=metrics, message=message)
