"""The documents `perfcheck trace summary|diff --json` write: what a script can rely on.

Versioned on their own (``TRACE_SCHEMA_VERSION``): they did not change with result.json's
versions 3 and 4."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from perfcheck.measures import Strict

TRACE_SCHEMA_VERSION: Final = 2


class TraceOpDoc(Strict):
    name: str
    kind: str = Field(description="compute, communication, memory for GPU activity; cpu_op for CPU ops")
    count: int = Field(ge=0)
    total_us: float = Field(description="over the analysed steps (GPU time; CPU ops: self time)")
    per_step_us: float
    variants: int = Field(
        default=1,
        ge=1,
        description="full names added up in this row: more than 1 only when naming is hta-short",
    )


TraceNaming = Literal["full", "hta-short"]
NAMING_DESCRIPTION = (
    "what keys the rows: full kernel (or CPU op) names, or hta-short: HolisticTraceAnalysis "
    "0.5.0's short name (--short-names), the rows of its TraceDiff with use_short_name=True"
)


class TraceBreakdownDoc(Strict):
    span_us: float = Field(description="first to last GPU activity of the analysed steps")
    idle_pct: float
    compute_pct: float
    non_compute_pct: float


class TraceSummaryDoc(Strict):
    schema_version: Literal[2] = TRACE_SCHEMA_VERSION
    kind: Literal["trace-summary"] = "trace-summary"
    file: str
    events: int = Field(ge=0, description="events with a duration")
    steps: list[int] = Field(description="the N of each ProfilerStep#N analysed")
    steps_chosen: bool = Field(description="chosen with --steps; false: every step but the last, as HTA does")
    last_step_dropped: bool
    on_gpu: bool = Field(description="ops are GPU kernels; false: CPU ops by self time")
    breakdown: TraceBreakdownDoc | None = None
    comm_overlap_pct: float | None = Field(
        default=None, description="communication time with compute running; None without communication"
    )
    naming: TraceNaming = Field(default="full", description=NAMING_DESCRIPTION)
    ops: list[TraceOpDoc] = Field(description="largest total first; all of them, --top does not cut")


class TraceChangeDoc(Strict):
    status: Literal["added", "removed", "changed"]
    name: str
    base_us: float | None = Field(description="per analysed step; None: not in base")
    head_us: float | None
    delta_us: float


class TraceDiffDoc(Strict):
    schema_version: Literal[2] = TRACE_SCHEMA_VERSION
    kind: Literal["trace-diff"] = "trace-diff"
    naming: TraceNaming = Field(default="full", description=NAMING_DESCRIPTION)
    base: TraceSummaryDoc
    head: TraceSummaryDoc
    changes: list[TraceChangeDoc] = Field(
        description="largest absolute change first; unchanged names left out"
    )
