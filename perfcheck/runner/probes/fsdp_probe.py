"""The `fsdp` probe's run function: the workload under FSDP2 on ``fsdp.world_size`` ranks,
launched with torchrun like `ddp` (perfcheck/runner/distributed/torchrun.py). The ranks are
perfcheck.runner.distributed.fsdp_worker; rank 0 writes the gathered metrics, read back here. The probe's
descriptor (its categories) is perfcheck/core/probes/fsdp.py, its settings and metrics models
perfcheck/core/probes/fsdp_models.py.
"""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpSettings
from perfcheck.runner.distributed.torchrun import run_ranks
from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.schema import load_model
from perfcheck.spec import ProbeSpec


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: FsdpSettings) -> ProbeOutput:
    data, where = run_ranks(
        "perfcheck.runner.distributed.fsdp_worker", spec, settings.world_size, "fsdp.json"
    )
    metrics = load_model(FsdpMetrics, data, where)
    failed = [v for v in metrics.variants if v.error]
    message = "; ".join(f"{v.variant}: {v.error}" for v in failed) or None
    return ProbeOutput(metrics=metrics.model_dump(mode="json"), message=message)
