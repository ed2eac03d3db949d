"""The probe interface: what a probe's run gets (a built workload) and hands back (ProbeOutput).

A probe measures one aspect of one workload on one side and returns its metrics; the worker
process wraps that into a ProbeResult. Probes never compare sides: that is the bot's job. Which
run function a probe name means is perfcheck/runner/probes/lookup.py's to say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from perfcheck.core.probes.kind import ProbeKind
from perfcheck.spec import ProbeSpec


@dataclass(frozen=True)
class Workload:
    """A built workload: the model and its example inputs, already on the device."""

    name: str
    model: Any  # torch.nn.Module; typed loosely so this module stays importable without torch
    inputs: tuple[Any, ...]
    # The recompile check's call with another batch: what build() gave as a third item (None: no
    # such call), else ``second_given`` is False and the probe cuts the batch in half itself.
    second: tuple[Any, ...] | None = None
    second_given: bool = False


@dataclass(frozen=True)
class ProbeOutput:
    """What a probe hands back: a status other than ok only for failures the probe understands."""

    status: str = "ok"
    message: str | None = None
    # What it measured: its metrics model (perfcheck/core/probes/<probe>.py), or that model's
    # fields as JSON (a plugin's run function may hand back either).
    metrics: BaseModel | dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def metrics_json(self) -> dict[str, Any]:
        if isinstance(self.metrics, BaseModel):
            return self.metrics.model_dump(mode="json")
        return dict(self.metrics or {})


class Probe(Protocol):
    @property
    def name(self) -> str: ...

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput: ...


PluginRun = Callable[[ProbeSpec, Callable[[], Workload], Any], ProbeOutput]


@dataclass(frozen=True)
class PluginProbe:
    """A run function its descriptor names (``run=``: a plugin's, or a built-in probe's written in
    that shape) behind the Probe interface: it gets the probe's settings as its own model, and
    what it measures is checked against its metrics model here, in the worker, so that a
    plugin's mistake reads as its own crash."""

    kind: ProbeKind
    function: PluginRun

    @property
    def name(self) -> str:
        return self.kind.name

    def run(self, spec: ProbeSpec, build: Callable[[], Workload]) -> ProbeOutput:
        settings = spec.section(self.kind.settings) if self.kind.settings else None
        out = self.function(spec, build, settings)
        if not isinstance(out, ProbeOutput):
            raise TypeError(
                f"the {self.name} probe's run function returned {type(out).__name__}, not ProbeOutput"
            )
        metrics, model = out.metrics, self.kind.metrics
        if model is not None and out.status == "ok" and not isinstance(metrics, model):
            metrics = model.model_validate(out.metrics_json())
        return ProbeOutput(out.status, out.message, metrics or None, out.details)
