"""The settings sections of perfcheck.yml that the probes, the gates and the root-cause matrix
read: each a typed, frozen model, validated strictly. Below both the config (perfcheck/config.py
composes them with the probe registry's own sections into one Config) and the probes, which
take the whole as ``SettingsView`` (what they read of it), so that neither imports the other.

Torch-free, and nothing of perfcheck imported here.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

_WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# The validation context's key for the probe names a workload's `probes` may take.
PROBE_NAMES = "probe_names"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadConfig(Section):
    name: str = Field(description="short name used in reports and --workloads")
    entry: str = Field(description="built-in name, path/to/file.py:function or package.module:function")
    train: bool = Field(default=False, description="forward + backward instead of inference")
    amp: Literal["none", "bf16", "fp16"] = "none"
    probes: list[str] | None = Field(default=None, description="probes to run; all by default")
    timeout_s: float = Field(default=600.0, gt=0, description="per-probe time limit")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _WORKLOAD_NAME.match(v):
            raise ValueError("a name of letters, digits, '.', '_' or '-'")
        return v

    @field_validator("entry")
    @classmethod
    def _entry(cls, v: str) -> str:
        if ":" in v:
            target, _, func = v.rpartition(":")
            if not target or not func.isidentifier():
                raise ValueError("'path/to/file.py:function' or 'package.module:function'")
        return v

    @field_validator("probes")
    @classmethod
    def _probes(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # The probes the review knows come from the probe registry, above this module: the config
        # passes their names as the validation context (PROBE_NAMES) when it reads a file. A
        # workload made in code, with no context, is not checked here.
        known = (info.context or {}).get(PROBE_NAMES)
        for p in v or []:
            if known is not None and p not in known:
                raise ValueError(f"probe names from {', '.join(known)}; got {p!r}")
        return v


class BudgetsConfig(Section):
    max_new_graph_breaks: int = Field(default=0, ge=0)
    max_overlap_drop_pp: float = Field(
        default=10.0, ge=0, description="drop in DDP communication hidden by compute, percentage points"
    )
    max_throughput_regression_pct: float = Field(
        default=2.3, ge=0, description="device time per step on a GPU, wall-clock step time on a CPU"
    )
    max_host_overhead_regression_pct: float = Field(
        default=10.0, ge=0, description="host time to issue a step, judged where the step is host-bound"
    )
    max_peak_memory_growth_mb: float = Field(default=112.0, ge=0)
    compile_latency_s: dict[str, float] = Field(default_factory=dict, description="workload name -> seconds")
    max_compile_instructions_regression_pct: float = Field(
        default=10.0, ge=0, description="a cold compile's instructions under callgrind, head over base"
    )
    max_compile_time_regression_pct: float = Field(
        default=20.0, ge=0, description="a cold compile's wall-clock time, head over base"
    )


# The most cache-cold compiles a side may make per workload (compile.runs): each costs a compile.
COMPILE_RUNS_MAX = 20


class CompileConfig(Section):
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool | None = None
    measure: Literal["auto", "callgrind", "wall", "off"] = Field(
        default="auto",
        description="how compile latency is measured: instructions under callgrind, wall-clock "
        "seconds, auto (the wall clock, and callgrind on a CPU with valgrind where the wall clock "
        "leaves it undecided and callgrind fits callgrind_budget_s), or off (only the compile "
        "probe's own first compile, against budgets.compile_latency_s)",
    )
    runs: int = Field(
        default=3, ge=2, le=COMPILE_RUNS_MAX, description="cache-cold compiles measured per side"
    )
    rebuild_kernels: bool = Field(
        default=False,
        description="each measured compile also builds every kernel anew (gcc, Triton) on empty caches; "
        "off, kernels whose source is cached are read, so the figure is Dynamo, AOTAutograd and "
        "Inductor's own work (ten times cheaper on the H200)",
    )
    callgrind_budget_s: float = Field(
        default=60.0,
        gt=0,
        description="auto: callgrind only where its estimated cost (from the review's wall-clock "
        "cache-cold compiles) fits, and what is left of review.time_budget_s; a small model under "
        "aot_eager fits, the demo under Inductor does not",
    )

    @field_validator("measure", mode="before")
    @classmethod
    def _measure_off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `off` as false; `measure: off` means what it says.
        return "off" if v is False else v


# Settings of the round-based gate that the process-based one replaced, and what took their place.
_REMOVED_TIMING_KEYS = {
    "min_rounds": "`processes` (pairs of worker processes before the first verdict)",
    "extra_rounds": "`extra_processes` (pairs added while the verdict is inconclusive)",
    "max_rounds": "`max_processes`",
    "confirm_fail": "`processes`: every verdict now comes from several pairs of processes",
    "steps_per_round": "`round_ms` (a round runs the steps that fill it)",
}


class TimingConfig(Section):
    """How the timing probe measures; see docs/measuring.md."""

    compiled: bool = Field(default=True, description="time the torch.compile'd model (false: eager)")
    processes: int = Field(
        default=3, ge=2, description="pairs of worker processes (one base, one head) before the first verdict"
    )
    extra_processes: int = Field(
        default=2, ge=1, description="pairs added each time the verdict is inconclusive"
    )
    max_processes: int = Field(default=9, ge=2, description="at most this many pairs")
    rounds: int = Field(
        default=16, ge=2, description="timed rounds per pair, alternating which side goes first"
    )
    round_ms: float = Field(
        default=50.0,
        gt=0,
        description="a round runs as many steps as fill this long (at least one), the same on both sides",
    )
    setup_together: int = Field(
        default=3,
        ge=1,
        description="pairs set up (compiled from the warm cache) at once, so that the first look's "
        "pairs set up together; 1 for models that fill the GPU",
    )
    device_steps: int = Field(default=10, ge=1, description="GPU: steps of the profiler pass for device time")
    cpu_threads: int = Field(
        default=1,
        ge=1,
        description="CPU: torch intra-op threads while timing; one keeps a busy neighbour out of the step",
    )
    time_budget_s: float = Field(default=300.0, gt=0, description="per workload, for timing")
    warmup_block: int = Field(default=5, ge=1, description="steps per warm-up block")
    warmup_max_steps: int = Field(default=300, ge=1)
    warmup_tolerance_pct: float = Field(
        default=2.0, gt=0, description="block-to-block change that counts as steady"
    )
    warmup_extra_steps: int = Field(
        default=10, ge=0, description="steps run after steady state, before timing"
    )
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    alpha: float = Field(
        default=0.01, gt=0, lt=0.5, description="significance level of the t test over pairs"
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for old, new in _REMOVED_TIMING_KEYS.items():
                if old in data:
                    raise PydanticCustomError(
                        "removed_key",
                        "no longer a setting: the worker process is the unit of replication now; "
                        "set {new} instead",
                        {"key": old, "new": new},
                    )
        return data

    @model_validator(mode="after")
    def _ordered(self) -> TimingConfig:
        if self.max_processes < self.processes:
            raise ValueError("max_processes at least processes")
        return self


class ReviewConfig(Section):
    """The review as a whole."""

    time_budget_s: float = Field(
        default=600.0,
        gt=0,
        description="seconds the probes of one review (or shard) may take: the plan is made to fit, "
        "and what is cut or cheapened to fit is said in the output",
    )


class HistoryConfig(Section):
    enabled: bool = Field(default=False, description="record every `report` in the history store")
    path: str = Field(default=".perfcheck/history.sqlite", description="the SQLite file (one file)")


class BisectConfig(Section):
    """The probe job's bisection of a failing PR (`perfcheck probe --bisect auto`)."""

    auto: bool = Field(
        default=True,
        description="bisect the failing structural findings of a PR with more than one commit; "
        "`/perfcheck bisect` asks for it whatever this says",
    )
    timing: bool = Field(
        default=False,
        description="search the timing probe's findings too: each step is the gate's paired runs of "
        "base against that commit, and a step it cannot decide is skipped and said so",
    )
    budget_s: float = Field(
        default=1800.0,
        gt=0,
        description="seconds the search may take per shard; a finding not narrowed down by then says "
        "between which commits it lies",
    )


class SweepConfig(Section):
    """`perfcheck sweep`: the compile settings to try; every combination of the lists is one point."""

    modes: list[str | None] = Field(
        default=["default", "reduce-overhead", "max-autotune-no-cudagraphs"],
        description="torch.compile modes (inductor); `default` is mode=None",
    )
    dynamic: list[bool | None] = Field(default=[False, True])
    options: list[dict[str, Any]] = Field(
        default_factory=list,
        description="extra torch.compile(options=...) dicts, each one more point per mode",
    )
    steps: int = Field(default=20, ge=2, description="timed steps per point, after warm-up")
    timeout_s: float = Field(default=900.0, gt=0, description="per point")


_PAIRS = {"(": ")", "[": "]", "{": "}"}


def split_phrase(text: str) -> str | None:
    """Why ``text`` is not one whole cause or command, or None when it is: a bracket it opens and
    does not close, or closes without opening, or a backtick left open. That is what a list written
    inline leaves where YAML splits an item at a comma inside parentheses: ``[a (b, c), d]`` is the
    three items ``a (b``, ``c)`` and ``d``."""
    open_: list[str] = []
    for ch in text:
        if ch in _PAIRS:
            open_.append(ch)
        elif ch in _PAIRS.values() and (not open_ or _PAIRS[open_.pop()] != ch):
            return f"{text!r} closes {ch!r} without opening it"
    if open_:
        return f"{text!r} opens {open_[-1]!r} without closing it"
    if text.count("`") % 2:
        return f"{text!r} leaves a backtick open"
    return None


def whole_phrases(values: list[str]) -> list[str]:
    """Each of ``values`` one whole phrase (split_phrase), or a ValueError that says how YAML split it."""
    for v in values:
        why = split_phrase(v)
        if why is not None:
            raise ValueError(
                f"one cause or command per item; {why}: a list written inline ([a (b, c), d]) is "
                "split by YAML at every comma, so write one item per line (- a (b, c))"
            )
    return values


class MatrixEntry(Section):
    """A project's own root-cause matrix entry, added to or replacing the built-in one."""

    symptom: str | None = None
    causes: list[str] = Field(default_factory=list, description="likely causes, most likely first")
    verify: list[str] = Field(default_factory=list, description="commands that confirm the cause")
    docs: str | None = None
    severity: Literal["error", "warning", "info"] | None = Field(
        default=None,
        description="what this project makes the category's findings that are at its own severity "
        "(error fails the check); those a budget or base's state softened keep theirs",
    )

    @field_validator("causes", "verify")
    @classmethod
    def _whole(cls, v: list[str]) -> list[str]:
        return whole_phrases(v)


def gitignore_pattern(pattern: str) -> str:
    """``pattern`` when it is a gitignore line that can match a file (pathspec's GitIgnoreSpec, the
    matcher of `paths`), else a ValueError that says why: pathspec refuses a `!` with no pattern
    after it and a backslash that escapes nothing, and reads a comment, a blank or an unclosed `[`
    as matching nothing. pathspec is imported here, only for a config that sets `paths` or an
    ack's `break.file`."""
    from pathspec import GitIgnoreSpec
    from pathspec.patterns.gitignore import GitIgnorePatternError

    line = pattern.rstrip()
    try:
        spec = GitIgnoreSpec.from_lines([pattern])
    except GitIgnorePatternError as err:
        if line == "!":
            why = "`!` leaves out the files a pattern after it names, and none follows"
        elif line.endswith("\\"):
            why = "it ends in a backslash that escapes nothing (`\\\\` is a backslash)"
        else:
            why = str(err.__cause__ or err)
        raise ValueError(f"a gitignore pattern; {why}") from None
    if all(p.include is None for p in spec.patterns):
        if line.startswith("#"):
            why = "gitignore reads a line that starts with # as a comment (`\\#` is a #)"
        elif not line:
            why = "this one is blank"
        else:
            why = "gitignore discards this one (an unclosed `[`, or `/` alone)"
        raise ValueError(f"a gitignore pattern that can match a file; {why}")
    return pattern


# Dynamo's graph-break ids, as its graph-break site names them (gb0124 on the page, GB0124 in its
# registry): an ack's `break.id`, in either case.
GRAPH_BREAK_ID = re.compile(r"^[Gg][Bb]\d{4}$")
# A function's name as Python names a code object (`log_step`, `<lambda>`), or an fnmatch glob of one.
_FUNCTION_PATTERN = re.compile(r"^[\w<>.*?\[\]!-]{1,200}$")


def file_pattern(pattern: str) -> str:
    """One gitignore pattern that names files (gitignore_pattern), with no `!`: alone, a pattern
    that leaves files out names none."""
    if pattern.lstrip().startswith("!"):
        raise ValueError(
            "a gitignore pattern of the files it accepts breaks in; a `!` pattern leaves files out, "
            "and this key takes one pattern (write `\\!` for a name that starts with `!`)"
        )
    return gitignore_pattern(pattern)


class BreakMatcher(Section):
    """A graph break an ack accepts: what Dynamo says it is (its graph-break id, or text of its
    reason) and where it is (the file, and optionally the function and line, of the finding's
    place: the innermost line of the tree that reached the break). Every key given must match.
    Patterns come from perfcheck.yml only (the base branch's); the break's text is the PR's, and is
    only searched, never read as a pattern."""

    id: str | None = Field(
        default=None,
        description="Dynamo's graph-break id (GB0124 or gb0124), as its reason's link to the "
        "graph-break site names it",
    )
    message: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        description="text the break's type or reason contains: a plain substring, any case, no wildcards",
    )
    file: str = Field(
        description="a gitignore pattern of the break's file, from the repository root, as `paths` "
        "reads one (`utils/logging.py`, `utils/`, `**/log_*.py`)"
    )
    function: str | None = Field(
        default=None,
        description="the function the break is in: its plain or qualified name (`forward`, "
        "`Classifier.forward`), or an fnmatch glob of either (`log_*`)",
    )
    line: int | None = Field(default=None, ge=1, description="the break's line in the head's file")

    @field_validator("id")
    @classmethod
    def _id(cls, v: str | None) -> str | None:
        if v is not None and not GRAPH_BREAK_ID.match(v):
            raise ValueError("a Dynamo graph-break id, GB and four digits (GB0124 or gb0124)")
        return v.upper() if v is not None else None

    @field_validator("file")
    @classmethod
    def _file(cls, v: str) -> str:
        return file_pattern(v)

    @field_validator("function")
    @classmethod
    def _function(cls, v: str | None) -> str | None:
        if v is not None and not _FUNCTION_PATTERN.match(v):
            raise ValueError("a function's name (`log_step`) or an fnmatch glob of one (`log_*`)")
        return v

    @model_validator(mode="after")
    def _what(self) -> BreakMatcher:
        if self.id is None and self.message is None:
            raise ValueError(
                "what the break is, as well as where: an `id` (Dynamo's graph-break id, GB0124) or a "
                "`message` (text of its reason)"
            )
        return self

    def words(self) -> str:
        """The break it names, in a few words (``GB0124 in utils/logging.py, log_step``)."""
        what = " and ".join(
            w for w in (self.id, f'"{self.message}"' if self.message is not None else None) if w
        )
        where = (
            self.file
            + (f", {self.function}" if self.function else "")
            + (f", line {self.line}" if self.line is not None else "")
        )
        return f"{what} in {where}"


class AckEntry(Section):
    """A known change accepted in config: findings of this category (and workload) do not fail;
    with a ``break``, only the new graph breaks it names."""

    category: str | None = Field(
        default=None,
        description="a finding category; beside a `break`, the category of new graph breaks or none",
    )
    workload: str | None = None
    break_: BreakMatcher | None = Field(
        default=None,
        alias="break",
        description="accept only the new graph breaks this names, by reason and place (an accepted break)",
    )
    reason: str = Field(min_length=1)
    with_effects: bool = Field(
        default=False,
        description="beside a `break`: accept what the review reads as that break's effects too "
        "(a slower step, a slower compile it explains), not only the break",
    )

    @model_validator(mode="after")
    def _what(self) -> AckEntry:
        if self.break_ is None and self.category is None:
            raise ValueError(
                "a `category` (findings of it are accepted) or a `break` (the new graph breaks it "
                "names are accepted)"
            )
        if self.with_effects and self.break_ is None:
            raise ValueError("`with_effects` accepts a break's effects: it needs a `break` beside it")
        return self


class GitHubConfig(Section):
    """How perfcheck answers on GitHub; read from the base tree like everything else here."""

    check_name: str = Field(
        default="perfcheck", min_length=1, description="the check run's name (the required check)"
    )
    command_permission: Literal["read", "triage", "write", "maintain", "admin"] = Field(
        default="write", description="the least repository permission that may run `/perfcheck`"
    )
    rerun_label: str = Field(default="perfcheck", min_length=1, description="adding it asks for a review")
    inconclusive_conclusion: Literal["neutral", "action_required", "failure"] = Field(
        default="action_required",
        description="check conclusion for an inconclusive review (`neutral` lets a required check pass)",
    )
    probe_workflow: str = Field(
        default="perfcheck.yml", min_length=1, description="the workflow `perfcheck serve` dispatches"
    )


S = TypeVar("S", bound=BaseModel)


class SettingsView(Protocol):
    """What the probes' descriptors read of the whole config (perfcheck/config.py ``Config``
    is one): the shared sections, a workload by name, and a probe's own section by its model."""

    @property
    def budgets(self) -> BudgetsConfig: ...

    @property
    def compile(self) -> CompileConfig: ...

    @property
    def timing(self) -> TimingConfig: ...

    @property
    def acks(self) -> list[AckEntry]: ...

    def workload(self, name: str) -> WorkloadConfig: ...

    def section(self, model: type[S]) -> S: ...
