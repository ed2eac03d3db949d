"""The toy probe's run function: real torch on the side's real model."""

from __future__ import annotations

from collections.abc import Callable

from perfcheck.runner.probes.base import ProbeOutput, Workload
from perfcheck.spec import ProbeSpec


def run(spec: ProbeSpec, build: Callable[[], Workload], settings: object) -> ProbeOutput:
    model = build().model
    params = list(model.parameters())
    return ProbeOutput(metrics={"parameters": sum(p.numel() for p in params), "tensors": len(params)})
