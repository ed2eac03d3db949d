"""What one probe run is asked to do: the message from the orchestrator to a worker process.

Torch-free, so the orchestrator can build it without importing torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.config import (
    CompileConfig,
    CustomOpsConfig,
    DdpConfig,
    ExportConfig,
    ProfileConfig,
    TimingConfig,
    WorkloadConfig,
)
from perfcheck.schema import Side


class ProbeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: str
    side: Side
    tree: str
    device: Literal["cpu", "cuda"] = "cpu"
    workload: WorkloadConfig
    compile: CompileConfig = CompileConfig()
    export: ExportConfig = ExportConfig()
    timing: TimingConfig = TimingConfig()
    ddp: DdpConfig = DdpConfig()
    custom_ops: CustomOpsConfig = CustomOpsConfig()
    profile: ProfileConfig = ProfileConfig()
    # Benchmark-only: busy work of this share of the calibrated step time added to every timed
    # step, a slowdown of known size for measuring detection rates (bench/trust.py).
    planted_slowdown_pct: float = Field(default=0.0, ge=0)
