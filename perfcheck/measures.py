"""What a probe measured and how two sides' figures compare, as the result contract holds them:
source locations, graph breaks and recompiles, compile metrics and compile-latency samples,
timing processes and their device steps, and the ratio estimates of head against base.

The parts of the contract (perfcheck/schema.py) that need no vocabulary of findings: nothing
here reads the probe registry, so the probes' own metrics models can be built of them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

# error fails the check, warning is shown but does not fail, info is neutral or good news.
Severity = Literal["error", "warning", "info"]


ProbeStatus = Literal["ok", "failed", "crashed", "timeout", "skipped"]


Verdict = Literal["pass", "fail", "inconclusive"]


Side = Literal["base", "head"]


class Strict(BaseModel):
    # NaN and infinities are no measurement: a document holding one is refused whole.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SourceLocation(Strict):
    path: str = Field(
        description="file path relative to the side's tree; outside it, relative to the import root "
        "it was found under (x_transformers/attend.py), never an absolute path"
    )
    line: int = Field(ge=0)
    function: str | None = None
    code: str | None = Field(default=None, description="the source line, stripped")
    in_tree: bool = Field(default=True, description="the path is a file of the reviewed repository")


BlockKind = Literal["if", "for", "async for", "while", "with", "async with", "try", "match"]


class NestingBlock(Strict):
    """A control-flow block around a graph break, within the break's own function."""

    kind: BlockKind
    line: int = Field(ge=1, description="the line of the header that opens it (an `elif`'s own)")
    code: str | None = Field(default=None, description="that header, stripped")


# Frames kept of a break's stack: a model's nesting is a few dozen deep at most.
MAX_CALLERS = 64


class GraphBreak(Strict):
    break_type: str = Field(
        description="Dynamo's graph-break type, e.g. 'Unsupported Tensor.item() call ...'"
    )
    reason: str = Field(
        description="the full reason Dynamo gave (its fullest wording, where it logs several)"
    )
    location: SourceLocation | None = Field(
        default=None, description="the innermost line of the reviewed tree that reached the break"
    )
    count: int = Field(default=1, ge=1)
    origin: SourceLocation | None = Field(
        default=None, description="where the break is when that is outside the tree (an installed package)"
    )
    fell_back: bool = Field(
        default=False,
        description="Dynamo could not resume after this break and ran the frame it was compiling eagerly",
    )
    recompiling_after: SourceLocation | None = Field(
        default=None,
        description="Dynamo took it only while recompiling the code after the break at this line (that "
        "break's resume function), never on a first compile of that code",
    )
    callers: list[SourceLocation] = Field(
        default=[],
        max_length=MAX_CALLERS,
        description="the frames of the reviewed tree that call into the break, outermost first (its "
        "location not among them), from the fullest stack Dynamo gave of it",
    )
    changed_at: SourceLocation | None = Field(
        default=None,
        description="the innermost frame of the break's stack (callers and its own line) whose line "
        "the pull request changed (differs in the other side's tree), where that is not the break's "
        "own line; None where none of them changed, or the review did not compare the trees",
    )
    gave_up: list[SourceLocation] = Field(
        default=[],
        max_length=MAX_CALLERS,
        description="the frames Dynamo gave up compiling because of this break (it runs them eagerly): "
        "each by its function's first line",
    )
    nesting_depth: int | None = Field(
        default=None,
        ge=0,
        description="how many if/for/while/with/try/match blocks are around the break's line within "
        "its own function (0: at the function's top level); None where the probe could not read "
        "the source file, or a result from before perfcheck measured it",
    )
    nesting: list[NestingBlock] = Field(
        default=[], description="those blocks, outermost first (as many as nesting_depth)"
    )

    @model_validator(mode="after")
    def _depth_is_its_blocks(self) -> GraphBreak:
        if len(self.nesting) != (self.nesting_depth or 0):
            raise ValueError(f"nesting_depth {self.nesting_depth} but {len(self.nesting)} nesting block(s)")
        return self


class Recompile(Strict):
    function: str
    reason: str
    location: SourceLocation | None = Field(
        default=None,
        description="where the recompiled code starts: the function's first line, or for a resume "
        "function (torch_dynamo_resume_in_F_at_N) the line of F where it resumes after a break",
    )
    every_step: bool = Field(
        default=False, description="it recompiled on the same inputs again: a cost every step pays"
    )
    made_at: SourceLocation | None = Field(
        default=None,
        description="where the tree makes the value the failed guard checks (a buffer's registration, "
        "an attribute's assignment), when it can be found",
    )


class RecompileLimitHit(Strict):
    """A frame Dynamo gave up recompiling: its cache reached a recompile limit, so a call no cached
    entry's guards accept runs eagerly from then on."""

    function: str
    location: SourceLocation | None = Field(
        default=None, description="where the frame's code starts, as Recompile.location"
    )
    limit: str = Field(
        description="the torch._dynamo.config limit hit: recompile_limit (a frame's entries) or "
        "accumulated_recompile_limit (all of a code object's entries)"
    )
    value: int = Field(ge=0, description="the limit's value in the probe's process")
    compiles: int | None = Field(
        default=None, ge=0, description="compiles of the frame before the one the limit refused"
    )
    reason: str = Field(description="the last guard that failed, as Dynamo gave it")
    made_at: SourceLocation | None = Field(
        default=None, description="where the tree makes the value that guard checks, as Recompile.made_at"
    )


CompileMeasure = Literal["callgrind", "wall"]


class CompileSample(Strict):
    """One cache-cold compile in a warm process: torch.compile and the first step, fresh caches."""

    wall_s: float = Field(ge=0)
    stages_s: dict[str, float] = Field(default_factory=dict, description="torch's own seconds per stage")
    instructions: int | None = Field(
        default=None, ge=0, description="callgrind: instructions of the compiling process in the region"
    )
    stage_instructions: dict[str, int] = Field(default_factory=dict, description="callgrind, per stage")
    work: dict[str, int] = Field(
        default_factory=dict,
        max_length=64,
        description="what the compile did, by Inductor's own counters over it (Triton kernels built "
        "or found, autotuning benchmarks run): two sides' samples that differ here did different "
        "work, not the same work at different speeds",
    )
    earlier: dict[str, int] = Field(
        default_factory=dict,
        max_length=64,
        description="the same counters over what the process compiled before this sample (its "
        "warm-up: compiled code read from the caches handed out, or compiled afresh)",
    )
    primed: bool = Field(
        default=False,
        description="an untimed cache-cold compile ran before it, its process's warm-up having read "
        "the compiled model from the caches: every sample follows a compile that traced and lowered "
        "in that process (perfcheck/runner/latency/cold_compile.py)",
    )


class CompileLatency(Strict):
    """Repeated cold compiles of one side; sample i of base ran as the pair of sample i of head."""

    measure: CompileMeasure
    samples: list[CompileSample] = Field(default_factory=list, max_length=64)
    note: str | None = Field(
        default=None, max_length=2000, description="why the measure is not the one asked for"
    )
    failures: list[str] = Field(
        default_factory=list, max_length=40, description="processes that handed back no samples, and why"
    )


class CompileMetrics(Strict):
    backend: str
    graph_count: int = Field(ge=0)
    graph_break_count: int = Field(ge=0)
    graph_breaks: list[GraphBreak] = []
    recompile_count: int = Field(ge=0)
    recompiles: list[Recompile] = []
    frames: list[str] = Field(
        default=[],
        max_length=5000,
        description="the frames Dynamo compiled as frames of their own, `function path:first line`",
    )
    cache_entries: dict[str, int] = Field(
        default_factory=dict,
        max_length=5000,
        description="compiled entries each frame (`function path:first line`, as in frames) holds in "
        "Dynamo's cache after the probe's steps on the workload's inputs (the other batch's recompiles "
        "are in recompile_count); empty where not measured",
    )
    recompile_limit_hits: list[RecompileLimitHit] = Field(
        default=[], max_length=1000, description="frames that hit a recompile limit, once each"
    )
    second_batch: str | None = Field(
        default=None,
        description="why the recompile check's call with another batch did not run as planned "
        "(the workload gave none, or it raised); None: it ran",
    )
    cold_compile_s: float = Field(ge=0)
    from_base_cache: bool = Field(
        default=False,
        description="head's probe started from a copy of base's compile cache (set by the "
        "orchestrator): what both sides compile alike was compiled once, so cold_compile_s is not cold",
    )
    compile_breakdown_s: dict[str, float] = Field(
        default_factory=dict, description="dynamo / aot / inductor seconds where torch reports them"
    )
    latency: CompileLatency | None = Field(
        default=None, description="the repeated cold compiles the latency verdict comes from"
    )
    op_count: int = Field(default=0, ge=0)
    # Set when torch.compile itself rejected the code (the probe's status is then "failed").
    error_type: str | None = None
    error_message: str | None = Field(default=None, max_length=20_000)
    error_location: SourceLocation | None = None


class Plant(Strict):
    """Benchmark-only: a slowdown of known size, added to every step of one side."""

    device_pct: float = Field(
        default=0.0, ge=0, description="a GPU sleep kernel of this share of device time"
    )
    host_pct: float = Field(default=0.0, ge=0, description="host busy work of this share of host issue time")


class DeviceStep(Strict):
    """What the GPU did per step, from CUPTI activity in a profiler pass of its own (CUDA only)."""

    steps: int = Field(ge=1, description="profiled steps")
    busy_ms: float = Field(ge=0, description="union of kernel, memcpy and memset intervals: device time")
    kernel_ms: float = Field(ge=0, description="sum of kernel durations")
    kernels: float = Field(ge=0, description="kernels launched")
    memcpy: float = Field(default=0.0, ge=0)
    memcpy_bytes: float = Field(default=0.0, ge=0)
    memset: float = Field(default=0.0, ge=0)
    memset_bytes: float = Field(default=0.0, ge=0)
    profiled_step_ms: float = Field(
        ge=0, description="wall time per step with the profiler on: what the collection itself costs"
    )


class TimingProcess(Strict):
    """One worker process's figures. Process i of base ran beside process i of head, as a pair."""

    step_ms: float = Field(gt=0, description="wall-clock step: the mean of the fastest 5 % of timed steps")
    median_step_ms: float = Field(gt=0, description="the median step: the wall figure compared on a GPU")
    steps: int = Field(ge=1, description="timed steps")
    host_ms: float | None = Field(
        default=None,
        gt=0,
        description="GPU only: host time to issue a step (the fastest 5 %), timed in the same rounds",
    )
    device: DeviceStep | None = None
    peak_memory_mb: float | None = Field(default=None, ge=0)
    first: bool = Field(description="went first in its pair's rounds")
    ready_s: float = Field(
        ge=0, description="from spawn to ready to time: import, build, compile, first step"
    )
    warmup_steps: int = Field(ge=0)
    warmup_converged: bool
    recompiles: int = Field(default=0, ge=0, description="frames compiled during the timed steps")
    phases_s: dict[str, float] = Field(
        default={},
        max_length=16,
        description="where the process's time went: ready (spawned to set up), warmup, rounds, device, "
        "finish, latency (its cache-cold compile)",
    )


class TimingMetrics(Strict):
    mode: Literal["eager", "compiled"]
    backend: str | None = None
    batch_size: int = Field(ge=1)
    steps_per_round: int = Field(ge=1)
    cold_compile_s: float | None = Field(
        default=None,
        ge=0,
        description="the first process's compile on a fresh cache; none when it began warm",
    )
    compile_breakdown_s: dict[str, float] = {}
    memory_kind: Literal["cuda_max_allocated", "peak_rss"]
    cpu: int | None = Field(default=None, description="the core both sides' host work was pinned to")
    threads: int | None = Field(default=None, ge=1, description="torch intra-op threads (CPU timing)")
    plant: Plant | None = None
    processes: list[TimingProcess] = Field(min_length=1, max_length=1000)
    stopped: str | None = Field(
        default=None,
        max_length=500,
        description="the limit that ended the pairs before the gate decided (max_processes, a budget)",
    )


class Environment(Strict):
    python: str
    torch: str | None = None
    triton: str | None = None
    cuda: str | None = None
    driver: str | None = None
    gpu_name: str | None = None
    gpu_count: int = 0
    cpu: str | None = None
    cpu_count: int | None = Field(
        default=None,
        ge=1,
        description="the machine's logical CPUs (os.cpu_count, not the process's affinity: a timing "
        "worker pinned to one core still runs on the same runner); part of the runner class",
    )
    platform: str | None = None


TimingMetric = Literal["device_ms", "step_ms", "host_ms"]


class RatioChange(Strict):
    """head/base over pairs (perfcheck/core/stats.py's estimate) and what it says against a budget."""

    base: float = Field(gt=0, description="geometric mean over base's processes (or compiles)")
    head: float = Field(gt=0)
    ratio: float = Field(gt=0, description="head / base; equals head / base of the two figures")
    ratio_low: float = Field(gt=0)
    ratio_high: float = Field(gt=0)
    confidence: float = Field(gt=0, lt=1)
    p_value: float = Field(ge=0, le=1)
    budget_pct: float
    verdict: Verdict

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1) * 100

    @property
    def low_pct(self) -> float:
        return (self.ratio_low - 1) * 100

    @property
    def high_pct(self) -> float:
        return (self.ratio_high - 1) * 100


class MetricChange(RatioChange):
    """head/base of one timing metric over the process pairs, as the verdict saw it."""

    metric: TimingMetric
    processes: int = Field(ge=2, description="process pairs")
    decides: bool = Field(description="whether this metric counts toward the verdict")


class TimingChange(Strict):
    """The timing verdict of one workload, judged by what bounds its step."""

    bound: Literal["device", "host", "cpu"]
    gpu_busy_pct: float | None = Field(
        default=None, ge=0, description="device time as a share of the wall-clock step (GPU)"
    )
    metrics: list[MetricChange]
    kernels: list[float] | None = Field(default=None, description="kernels per step, base and head")
    kernels_exact: bool = Field(default=False, description="every process of a side launched the same count")
    verdict: Verdict
    settled_by_device: bool = Field(
        default=False,
        description="a host-bound step whose host issue time stayed undecided after every pair, while "
        "device time passed and every process launched the same kernels: the device decided",
    )


class StageLatency(Strict):
    """One compile stage's cost, the median over a side's samples, in the deciding measure's unit."""

    stage: str
    base: float = Field(ge=0)
    head: float = Field(ge=0)


class CompileLatencyChange(RatioChange):
    """head/base of cache-cold compiles over pairs of compiles, as the compile verdict saw it."""

    measure: CompileMeasure = Field(description="callgrind: instructions decide; wall: seconds")
    pairs: int = Field(ge=2, description="pairs of compiles")
    warn: bool = Field(description="a significant slowdown within the budget")
    stages: list[StageLatency] = []
