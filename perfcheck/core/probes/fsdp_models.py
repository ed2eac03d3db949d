"""The `fsdp` probe's settings and metrics models (perfcheck/core/probes/fsdp.py is its descriptor):
what perfcheck.yml's `fsdp:` section says, and what an FSDP2 (``fully_shard``) run measured, as its
rank's worker writes them (perfcheck/runner/distributed/fsdp_worker.py) and the comparator reads them.

A unit of several modules (``fully_shard([block0, block1])``) is named by its modules joined with
" + ", never with commas (FSDP's own name for it, "block0, block1", would read as two units).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from perfcheck.core.probes.collective_groups import RankCalls
from perfcheck.core.probes.ddp import RankGraphs
from perfcheck.measures import GraphBreak, SourceLocation

Variant = Literal["eager", "compiled_layers", "compiled_model"]
Dtype = Literal["float32", "bfloat16", "float16"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FsdpSettings(_Model):
    """The `fsdp:` section of perfcheck.yml."""

    world_size: int = Field(
        default=2, ge=1, description="ranks (one per GPU with nccl; ranks share GPUs beyond)"
    )
    backend: Literal["auto", "gloo", "nccl"] = Field(
        default="auto", description="auto: nccl on cuda, else gloo"
    )
    wrap: list[str] = Field(
        default=[],
        description="class names of the modules that get a fully_shard of their own before the root "
        "(the decoder layer's class, say); empty: every class that repeats in a ModuleList or "
        "Sequential. A workload whose build() applies fully_shard itself keeps its own wrapping.",
    )
    reshard_after_forward: bool | None = Field(
        default=None,
        description="free the gathered parameters after forward; unset: FSDP2's default (every unit "
        "but the root, which keeps its parameters for backward)",
    )
    param_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.param_dtype")
    reduce_dtype: Dtype | None = Field(default=None, description="MixedPrecisionPolicy.reduce_dtype")
    variants: list[Variant] = Field(
        default=["eager", "compiled_layers", "compiled_model"],
        min_length=1,
        description="eager; each wrapped layer compiled (module.compile()); the whole model compiled",
    )
    steps: int = Field(default=4, ge=2, description="training steps per variant (the first compiles)")


def unit_name(modules: list[str]) -> str:
    """A unit's name: its module's path ('' the root); a unit of several modules, their paths
    joined by " + "."""
    return " + ".join(modules)


def shared(values: list[Any]) -> Any:
    """The value all of ``values`` share; None when they differ or there are none."""
    return values[0] if values and all(v == values[0] for v in values) else None


class FsdpUnit(_Model):
    """One FSDP unit as FSDP2 holds it: the module or modules one fully_shard call sharded, whose
    parameters are all-gathered and reduce-scattered together."""

    name: str = Field(description="'' the root; several modules: their paths joined by ' + '")
    modules: list[str] = Field(description="the paths of the modules it groups ('' the root)")
    reshard_after_forward: bool | int | None = Field(
        default=None,
        description="as FSDP runs it (FSDP2's default: True, the root False); an int: the ranks it "
        "reshards to; None: not known",
    )
    param_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.param_dtype")
    reduce_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.reduce_dtype")
    output_dtype: str | None = Field(default=None, description="MixedPrecisionPolicy.output_dtype")
    cast_forward_inputs: bool | None = Field(
        default=None, description="MixedPrecisionPolicy.cast_forward_inputs; None: not known"
    )
    offload_policy: str | None = Field(
        default=None,
        description="its OffloadPolicy as FSDP2 writes it ('OffloadPolicy()': none, "
        "'CPUOffloadPolicy(pin_memory=True)'); None: not known",
    )
    params: int = Field(default=0, ge=0, description="parameters it shards")
    sharded_at: SourceLocation | None = Field(
        default=None, description="the workload's own fully_shard call; None: perfcheck's wrap"
    )


class ParamLayout(_Model):
    name: str = Field(description="the parameter's qualified name")
    unit: str | None = Field(
        description="the FSDP unit (module path; '' is the root) sharding it; None: none"
    )
    placements: list[str] = Field(description="DTensor placements, e.g. ['Shard(dim=0)']; []: a plain tensor")
    mesh: list[int] = Field(default=[], description="the device mesh's shape")
    dtype: str
    grad_placements: list[str] | None = Field(
        default=None, description="its gradient's placements after backward"
    )
    sharded_at: SourceLocation | None = Field(
        default=None,
        description="the workload's own fully_shard / distribute_tensor call; None: perfcheck's wrap",
    )


class Redistribute(_Model):
    """A DTensor the model's own code moved to another layout during a step."""

    source: list[str]
    target: list[str]
    mesh: list[int] = []
    shape: list[int] = []
    location: SourceLocation | None = None
    count: int = Field(default=1, ge=1, description="calls per step")


class UnitCollective(_Model):
    op: str = Field(description="all_gather, reduce_scatter, all_reduce, ...")
    unit: str | None = Field(description="the FSDP unit that issued it ('' the root); None: outside FSDP")
    dtype: str
    bytes: int = Field(ge=0, description="the unsharded message of one call")
    group_size: int = Field(ge=1)
    count: int = Field(default=1, ge=1, description="calls per step")


class GraphGroup(_Model):
    """The graphs Dynamo compiled for one function of the model."""

    code: str = Field(description="Class.function, or the function's name")
    location: SourceLocation | None = None
    graphs: int = Field(ge=0, description="graphs compiled for it (recompiles included)")
    distinct: int = Field(ge=0, description="of those, graphs with different code")
    modules: int = Field(
        default=0, ge=0, description="modules of its class in the model (the layers it serves)"
    )
    guard: str | None = Field(default=None, description="the first guard that failed, making another graph")


class FsdpVariant(_Model):
    variant: Variant
    step_ms: float | None = Field(default=None, ge=0, description="median step time on rank 0")
    graph_count: int = Field(default=0, ge=0)
    graph_breaks: list[GraphBreak] = Field(
        default=[], description="breaks in the workload's code, not FSDP's"
    )
    fsdp_breaks: int = Field(
        default=0, ge=0, description="breaks inside torch.distributed (FSDP's own hooks)"
    )
    recompiles: int = Field(default=0, ge=0)
    graphs: list[GraphGroup] = []
    ranks: list[RankGraphs] = []
    collectives: list[UnitCollective] = []
    comm_overlap_pct: float | None = Field(default=None, ge=0, le=100)
    peak_memory_mb: list[float] = Field(default=[], description="per rank: CUDA peak allocated, CPU peak RSS")
    rank_differs_at: SourceLocation | None = Field(
        default=None,
        description="where ranks' graphs differ: the line that made the first node of the first "
        "differing graph that is not the same on rank 0 and the first rank that differs",
    )
    rank_differing_nodes: list[str] = Field(default=[], description="those nodes, 'rank N: node'")
    collective_calls: list[RankCalls] = Field(
        default=[],
        description="each collective of one step in order, with its process group and where in the "
        "compiled step it ran, per set of ranks that issued the same; []: not recorded",
    )
    error: str | None = None


class FsdpMetrics(_Model):
    backend: str
    world_size: int = Field(ge=1)
    device: str
    wrapped_by: Literal["perfcheck", "workload"]
    wrap: list[str] = Field(default=[], description="the classes perfcheck wrapped")
    units: list[FsdpUnit] = Field(default=[], description="the FSDP units, as FSDP2 groups them")
    reshard_after_forward: bool | int | None = Field(
        default=None, description="the units' but the root's, where they agree (each unit's is in units)"
    )
    param_dtype: str | None = Field(default=None, description="every unit's, where they agree")
    reduce_dtype: str | None = Field(default=None, description="every unit's, where they agree")
    params: list[ParamLayout] = []
    redistributes: list[Redistribute] = []
    outputs: list[list[str]] = Field(default=[], description="placements of the outputs that are DTensors")
    variants: list[FsdpVariant] = []

    @field_validator("units", mode="before")
    @classmethod
    def _paths(cls, v: Any) -> Any:
        # Results written before units were recorded as FSDP groups them list module paths.
        return (
            [{"name": u, "modules": [u]} if isinstance(u, str) else u for u in v]
            if isinstance(v, list)
            else v
        )
