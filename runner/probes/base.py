"""The probe interface and registry.

A probe measures one aspect of one workload on one side and returns its metrics; the worker
process wraps that into a ProbeResult. Probes never compare sides: that is the bot's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from perfcheck.spec import ProbeSpec


@dataclass(frozen=True)
class Workload:
    """A built workload: the model and its example inputs, already on the device."""

    name: str
    model: Any  # torch.nn.Module; typed loosely so this module stays importable without torch
    inputs: tuple[Any, ...]


@dataclass(frozen=True)
class ProbeOutput:
    """What a probe hands back: a status other than ok only for failures the probe understands."""

    status: str = "ok"
    message: str | None = None
    metrics: dict[str, Any] | None = None  # field name on ProbeResult -> model fields


class Probe(Protocol):
    name: str

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput: ...


_REGISTRY: dict[str, Callable[[], Probe]] = {}


def register(name: str) -> Callable[[Callable[[], Probe]], Callable[[], Probe]]:
    def deco(factory: Callable[[], Probe]) -> Callable[[], Probe]:
        _REGISTRY[name] = factory
        return factory

    return deco


def get_probe(name: str) -> Probe:
    # Probe modules register themselves on import; importing them here keeps import side effects
    # out of the package's __init__ and loads torch only in the worker.
    from perfcheck.runner.probes import (  # noqa: F401
        amp_probe,
        compile_probe,
        custom_op_probe,
        ddp_probe,
        export_probe,
        profile_probe,
    )

    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown probe {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None
