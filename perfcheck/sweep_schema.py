"""The documents of `perfcheck sweep`: what one point's worker is asked, and what the sweep found.

Torch-free. A point's result comes from a process that ran the PR's code, so it is read back as
untrusted JSON (``perfcheck.schema.load_model``) and validated whole. Kept apart from
``perfcheck.schema``: a sweep is a tuning aid, not part of the review contract.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from perfcheck.measures import Environment
from perfcheck.settings import WorkloadConfig

SWEEP_SCHEMA_VERSION: Final = 1
DEFAULT_MODE = "default"

PointStatus = Literal["ok", "crashed", "timeout", "skipped"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SweepPoint(_Strict):
    """One combination of compile settings."""

    mode: str | None = Field(default=None, description="torch.compile mode; None is the default mode")
    dynamic: bool | None = None
    options: dict[str, Any] | None = Field(default=None, description="torch.compile(options=...)")

    @property
    def label(self) -> str:
        parts = [self.mode or DEFAULT_MODE, f"dynamic={self.dynamic}"]
        if self.options is not None:
            parts.append(json.dumps(self.options, sort_keys=True, separators=(",", ":")))
        return " · ".join(parts)


class PointSpec(_Strict):
    """The message to one point's worker process."""

    tree: str
    device: Literal["cpu", "cuda"] = "cpu"
    workload: WorkloadConfig
    backend: str
    point: SweepPoint
    steps: int = Field(ge=1)
    warmup_steps: int = Field(ge=1, description="steps per warm-up block; blocks repeat while compiling")


class PointMeasurement(_Strict):
    """What a worker writes: the measurements, or why there are none."""

    status: Literal["ok", "crashed"]
    message: str | None = None
    step_ms: float | None = Field(default=None, ge=0, description="median of the timed steps")
    peak_mb: float | None = Field(default=None, ge=0)
    memory_kind: Literal["cuda_max_allocated", "peak_rss"] | None = None
    compile_s: float | None = Field(default=None, ge=0, description="cold first step: compile and run")
    environment: Environment | None = None


class PointResult(_Strict):
    point: SweepPoint
    status: PointStatus
    message: str | None = None
    step_ms: float | None = Field(default=None, ge=0)
    peak_mb: float | None = Field(default=None, ge=0)
    memory_kind: Literal["cuda_max_allocated", "peak_rss"] | None = None
    compile_s: float | None = Field(default=None, ge=0)
    duration_s: float = Field(default=0.0, ge=0, description="the point's process, start to end")
    pareto: bool = Field(default=False, description="on the Pareto front of step time, memory, compile")

    @property
    def measured(self) -> bool:
        return (
            self.status == "ok"
            and self.step_ms is not None
            and self.peak_mb is not None
            and self.compile_s is not None
        )


class SweepReport(_Strict):
    schema_version: Literal[1] = SWEEP_SCHEMA_VERSION
    workload: str
    backend: str
    device: Literal["cpu", "cuda"]
    steps: int = Field(ge=1)
    points: list[PointResult]
    environment: Environment | None = None

    @property
    def failed(self) -> list[PointResult]:
        return [p for p in self.points if p.status in ("crashed", "timeout")]
