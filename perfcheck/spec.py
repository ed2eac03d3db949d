"""What one probe run is asked to do: the message from the orchestrator to a worker process.

Torch-free, so the orchestrator can build it without importing torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from perfcheck.measures import CompileMeasure, Plant, Side
from perfcheck.settings import CompileConfig, TimingConfig, WorkloadConfig

S = TypeVar("S", bound=BaseModel)


class LatencyPlan(BaseModel):
    """What one compile-latency process measures: ``compiles`` cache-cold compiles after a warm-up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    measure: CompileMeasure
    compiles: int
    # The time (seconds since the epoch: the process's clock is not the orchestrator's monotonic
    # one) by which the compiles are to be over, the review's time budget: the process starts no
    # compile that, as long as its longest so far, would end after it, and hands back those it
    # made. None: all of them.
    stop_by: float | None = None


def side_files(probes_dir: Path, side: str) -> Path:
    """The folder in the review's probes folder where a side's processes write what they hand
    on as files (a profile's trace): the one place of the review's a sandboxed side may write."""
    return probes_dir / "files" / side


class Walls(BaseModel):
    """What a side's probe processes see besides a read-only file system
    (perfcheck/runner/process/sandbox.py): its own scratch folder as /tmp, the folders it may write, those
    hidden from it (the other side's tree, every compile cache of the review) and those put back read-only
    inside a hidden one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scratch: str
    writable: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    visible: tuple[str, ...] = ()
    # (folder, path): the folder shown, writable, at the path: head's own copy of base's compile
    # cache where base's is, since cache entries name the folder they were compiled in.
    moved: tuple[tuple[str, str], ...] = ()

    def with_writable(self, *paths: object) -> Walls:
        return self.model_copy(update={"writable": (*self.writable, *(str(p) for p in paths))})

    def with_moved(self, folder: object, path: object) -> Walls:
        return self.model_copy(update={"moved": (*self.moved, (str(folder), str(path)))})


class ProbeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: str
    side: Side
    tree: str
    device: Literal["cpu", "cuda"] = "cpu"
    workload: WorkloadConfig
    compile: CompileConfig = CompileConfig()
    timing: TimingConfig = TimingConfig()
    # Plugin probes: the modules the worker loads before it looks the probe up.
    plugins: tuple[str, ...] = ()
    # The probes' config sections, under their names, as their settings models write them
    # (perfcheck/core/probes/<probe>.py): the probe's own, and another's it measures with (the amp
    # probe's kernel pass takes profile.steps). Validated again in the worker (``section``).
    settings: dict[str, dict[str, Any]] = {}
    # Benchmark-only: busy work of a known share of device or host time added to every step, a
    # slowdown of known size for measuring detection rates (bench/processes.py). Set, it also
    # launches the (empty) sleep kernel on a side planted with 0 %, so that both sides launch the
    # same kernels and only time tells them apart.
    plant: Plant | None = None
    # The compile_latency worker's plan (perfcheck/runner/latency/runs.py); None for every other probe.
    latency: LatencyPlan | None = None
    # The sandbox its processes run in; None: none (the machine has none and this is not Actions,
    # or PERFCHECK_SANDBOX=0). Read by the orchestrator, not the worker.
    walls: Walls | None = None
    # Say which files of the tree the process read (``ProbeResult.read_files``): set for base's
    # reusable probes of a run that records them (--record-base), and only there, since the audit
    # hook that sees the reads is called on every audited event of the process.
    track_reads: bool = False

    def section(self, model: type[S]) -> S:
        """A probe's config section, as its settings model (``model``): as the orchestrator sent
        it, else the model's defaults."""
        from perfcheck.core import probes

        name = next((k.name for k in probes.kinds() if k.settings is model), None)
        if name is None:
            raise KeyError(f"no probe has the settings model {model.__name__}")
        return model.model_validate(self.settings.get(name, {}))
