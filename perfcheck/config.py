"""perfcheck.yml: the project's settings, read once at the edge into one typed object.

Torch-free. A config error names the file, the key and what was expected (the CLI exits 2).
"""

from __future__ import annotations

import difflib
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

CONFIG_NAMES = ("perfcheck.yml", ".github/perfcheck.yml")

S = TypeVar("S", bound=BaseModel)


def probe_names() -> tuple[str, ...]:
    """Every probe the review knows (the registry in perfcheck/core/probes), built-in or a plugin's."""
    from perfcheck.core import probes

    return probes.names()


def default_probes() -> tuple[str, ...]:
    """What runs when neither --probes nor a workload's `probes` says: the single-process checks.
    The others cost more (several processes, a profile pass) and are asked for by name."""
    from perfcheck.core import probes

    return probes.defaults()


DEFAULT_WORKLOAD = "mlp-tiny"

_WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ConfigError(ValueError):
    """A config that cannot be used; the message is meant for the user as it stands."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadConfig(_Section):
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
    def _probes(cls, v: list[str] | None) -> list[str] | None:
        for p in v or []:
            if p not in probe_names():
                raise ValueError(f"probe names from {', '.join(probe_names())}; got {p!r}")
        return v


class BudgetsConfig(_Section):
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


class CompileConfig(_Section):
    backend: str = "inductor"
    mode: str | None = None
    dynamic: bool | None = None
    measure: Literal["auto", "callgrind", "wall", "off"] = Field(
        default="auto",
        description="how compile latency is measured: instructions under callgrind, wall-clock "
        "seconds, auto (callgrind on a CPU with valgrind where it fits callgrind_budget_s), or off "
        "(only the compile probe's own first compile, against budgets.compile_latency_s)",
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
        description="auto: callgrind only where its estimated cost fits (and what is left of "
        "review.time_budget_s); a small model under aot_eager fits, Inductor's C++ builds do not",
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


class TimingConfig(_Section):
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


class ReviewConfig(_Section):
    """The review as a whole."""

    time_budget_s: float = Field(
        default=600.0,
        gt=0,
        description="seconds the probes of one review (or shard) may take: the plan is made to fit, "
        "and what is cut or cheapened to fit is said in the output",
    )


class HistoryConfig(_Section):
    enabled: bool = Field(default=False, description="record every `report` in the history store")
    path: str = Field(default=".perfcheck/history.sqlite", description="the SQLite file (one file)")


class BisectConfig(_Section):
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


class SweepConfig(_Section):
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


def gitignore_pattern(pattern: str) -> str:
    """``pattern`` when it is a gitignore line that can match a file (pathspec's GitIgnoreSpec, the
    matcher of `paths`), else a ValueError that says why: pathspec refuses a `!` with no pattern
    after it and a backslash that escapes nothing, and reads a comment, a blank or an unclosed `[`
    as matching nothing. pathspec is imported here, only for a config that sets `paths`."""
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


class MatrixEntry(_Section):
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


class AckEntry(_Section):
    """A known change accepted in config: findings of this category (and workload) do not fail."""

    category: str
    workload: str | None = None
    reason: str = Field(min_length=1)


class GitHubConfig(_Section):
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


class Config(_Section):
    workloads: list[WorkloadConfig] = Field(
        default_factory=lambda: [WorkloadConfig(name=DEFAULT_WORKLOAD, entry=DEFAULT_WORKLOAD)]
    )
    budgets: BudgetsConfig = BudgetsConfig()
    compile: CompileConfig = CompileConfig()
    timing: TimingConfig = TimingConfig()
    github: GitHubConfig = GitHubConfig()
    review: ReviewConfig = ReviewConfig()
    history: HistoryConfig = HistoryConfig()
    bisect: BisectConfig = BisectConfig()
    sweep: SweepConfig = SweepConfig()
    matrix: dict[str, MatrixEntry] = Field(
        default_factory=dict,
        description="category -> entry: the project's additions to the root-cause matrix",
    )
    acks: list[AckEntry] = Field(default_factory=list, description="known changes, accepted with a reason")
    paths: list[Annotated[str, AfterValidator(gitignore_pattern)]] = Field(
        default_factory=lambda: ["**/*.py"],
        description="gitignore (gitwildmatch) patterns of the files whose change triggers a review; "
        "the last pattern that matches a file decides, so `!pattern` leaves out what an earlier one named",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules of plugin probes (installed packages); each section under a plugin "
        "probe's name holds its settings",
    )
    # Filled by parse_config from the sections under probes' names (perfcheck's own and the
    # plugins'), each validated by its probe's settings model (its descriptor's ``settings``);
    # not a key of the file. Read with ``section``.
    probe_settings: dict[str, BaseModel] = Field(default_factory=dict, exclude=True)
    source: str = Field(default="(defaults)", exclude=True, description="where this config came from")

    @field_validator("matrix")
    @classmethod
    def _categories(cls, v: dict[str, MatrixEntry]) -> dict[str, MatrixEntry]:
        from perfcheck.schema import categories

        for category in v:
            if category not in categories():
                raise ValueError(f"finding categories as keys; {category!r} is not one{_closest(category)}")
        return v

    @field_validator("acks")
    @classmethod
    def _ack_categories(cls, v: list[AckEntry]) -> list[AckEntry]:
        from perfcheck.schema import categories

        for ack in v:
            if ack.category not in categories():
                raise ValueError(f"finding categories; {ack.category!r} is not one{_closest(ack.category)}")
        return v

    @field_validator("workloads")
    @classmethod
    def _unique(cls, v: list[WorkloadConfig]) -> list[WorkloadConfig]:
        if not v:
            raise ValueError("at least one workload")
        seen: set[str] = set()
        for w in v:
            if w.name in seen:
                raise ValueError(f"unique workload names; {w.name!r} appears twice")
            seen.add(w.name)
        return v

    def workload(self, name: str) -> WorkloadConfig:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

    def section(self, model: type[S]) -> S:
        """A probe's config section, as its settings model (``model``): the file's, else the
        model's defaults."""
        found = next((s for s in self.probe_settings.values() if type(s) is model), None)
        return found if found is not None else model()


def planned_probes(
    workloads: list[WorkloadConfig], probes: tuple[str, ...] = ()
) -> list[tuple[WorkloadConfig, str]]:
    """(workload, probe) for every probe a run of these workloads makes: ``probes`` where given
    (within a workload's own ``probes`` list, if it has one), else the workload's, else the defaults
    and what the workload's own settings declare (amp under autocast)."""
    return [
        (wl, p)
        for wl in workloads
        for p in (probes or wl.probes or (*default_probes(), *declared_probes(wl)))
        if not probes or wl.probes is None or p in wl.probes
    ]


def follow_up_probes(
    config: Config, wl: WorkloadConfig, planned: set[str], probes: tuple[str, ...]
) -> tuple[str, ...]:
    """Probes a workload may get once the planned ones show they apply (a descriptor's
    ``follow_up``: custom_ops, when its exported graph calls a custom op); only where its probes
    were left to the defaults."""
    from perfcheck.core import probes as registry  # the descriptors; they import this module

    if probes or wl.probes is not None:
        return ()
    return tuple(
        k.name
        for k in registry.kinds()
        if k.follow_up is not None
        and k.name not in planned
        and set(k.follow_up.after) <= planned
        and k.follow_up.enabled(config)
    )


def declared_probes(wl: WorkloadConfig) -> tuple[str, ...]:
    """The probes a workload asks for by what it is (a descriptor's ``asked_by``: the amp probe
    when it runs under autocast)."""
    from perfcheck.core import probes as registry

    return tuple(k.name for k in registry.kinds() if k.asked_by is not None and k.asked_by(wl))


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# pydantic's words for a type, in the words of a YAML file (no class names).
_TYPE_WORDS = {
    "model_type": "a mapping of settings (indented `key: value` lines)",
    "model_attributes_type": "a mapping of settings (indented `key: value` lines)",
    "dict_type": "a mapping (indented `key: value` lines)",
    "list_type": "a list (`[a, b]` or `- item` lines)",
    "int_type": "a whole number, without quotes",
    "float_type": "a number, without quotes",
    "bool_type": "true or false, without quotes",
    "string_type": "text",
}


def _expectation(e: Any) -> str:
    if e["type"] == "missing":
        return "a value for this required key"
    if e["type"] in _TYPE_WORDS:
        return _TYPE_WORDS[e["type"]]
    msg = e["msg"].removeprefix("Value error, ").removeprefix("Input should be ")
    return msg.replace(", unable to interpret input", "")


def _closest(category: str) -> str:
    """' (did you mean `recompile`?)' for a misspelt finding category, else ''."""
    from perfcheck.schema import categories

    close = difflib.get_close_matches(category, list(categories()), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _suggestion(key: str, loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> str:
    """' (did you mean `workloads`?)' for a key close to one its section knows, else ''; ``loc``
    is within ``root`` (a probe's settings model; the config's own by default)."""
    model: Any = root or Config
    for part in loc[:-1]:
        field = (
            model.model_fields.get(part) if isinstance(part, str) and hasattr(model, "model_fields") else None
        )
        if field is None:
            if isinstance(part, int):
                continue  # an item of a list: the list's model stays
            return ""
        annotation = field.annotation
        inner = getattr(annotation, "__args__", None)
        model = next((a for a in inner or () if hasattr(a, "model_fields")), annotation)
    names = [n for n in getattr(model, "model_fields", {}) if n not in ("source", "probe_settings")]
    if model is Config:  # the sections of perfcheck's own probes that carry their settings
        from perfcheck.core import probes

        names += [k.name for k in probes.built_in() if k.settings is not None]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _describe(
    err: ValidationError, source: str, under: tuple[str, ...] = (), root: type[BaseModel] | None = None
) -> str:
    """The errors as the user reads them: file, key, expectation. ``under``: the section the
    errors' locations are within, validated by ``root`` (a probe's settings model)."""
    lines = []
    for e in err.errors():
        key = _key((*under, *e["loc"]))
        if e["type"] == "removed_key":
            lines.append(f"{source}: {key}.{e['ctx']['key']}: {e['msg']}")
            continue
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: {key}: unknown key{_suggestion(str(e['loc'][-1]), e['loc'], root)}")
            continue
        got = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"{source}: {key}: expected {_expectation(e)}{shown}")
    return "\n".join(lines)


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}:{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if data is None:
        raise ConfigError(
            f"{source}: the file is empty; name your workloads under `workloads:` (README, "
            '"Adopting it in a repository"), or delete the file to review the built-in mlp-tiny workload'
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): expected a mapping of settings, got {type(data).__name__}")
    if "probe_settings" in data or "source" in data:
        key = "probe_settings" if "probe_settings" in data else "source"
        raise ConfigError(f"{source}: {key}: unknown key")
    return dict(data)


def parse_config(text: str, source: str) -> Config:
    return _validate(_load_yaml(text, source), source)


def _validate(data: dict[str, Any], source: str) -> Config:
    sections = _probe_sections(data, source)  # takes the probes' sections out of data
    data["probe_settings"] = sections
    try:
        # Strict: a quoted "0" is text, not the number a budget needs; YAML says which it is.
        return Config.model_validate({**data, "source": source}, strict=True)
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None


# A first adoption (base has no perfcheck.yml, so the PR's own is followed) is judged by settings
# the PR wrote. The trusted report job reads them too, so none of them may make it run, write or
# accept anything the PR chooses, nor judge more loosely than perfcheck does with no file at all.
FIRST_ADOPTION_REFUSED = {
    "plugins": "the trusted report job would import the modules it names",
    "history": "the trusted report job would write the file it names",
    "acks": "they would accept findings of the PR that adds them",
}
# (section, key, "at most" | "at least"): the default is the loosest value a first adoption may set.
_NEVER_LOOSER = (
    *(("budgets", k, "at most") for k in BudgetsConfig.model_fields if k.startswith("max_")),
    ("timing", "confidence", "at least"),  # a narrower interval passes a regression sooner
    ("profile", "min_change_pct", "at most"),  # a higher threshold hides kernel changes
)


def first_adoption_config(text: str, source: str) -> Config:
    """The PR's own perfcheck.yml where base has none, parsed so that it cannot widen the gate:
    no key of FIRST_ADOPTION_REFUSED (checked before any plugin is imported), no budget looser than
    the default, and no category's severity softer than its own. ConfigError names the key and what
    a first adoption may set."""
    data = _load_yaml(text, source)
    for key, why in FIRST_ADOPTION_REFUSED.items():
        if key in data:
            raise ConfigError(
                f"{source}: {key}: not read from a pull request's own perfcheck.yml while the base "
                f"branch has none (a first adoption): {why}. Remove it here and add it to the base "
                "branch's perfcheck.yml once this one is merged"
            )
    config = _validate(data, source)
    defaults = Config()
    for section, key, bound in _NEVER_LOOSER:
        got, default = (
            getattr(_named_section(config, section), key),
            getattr(_named_section(defaults, section), key),
        )
        if (got > default) if bound == "at most" else (got < default):
            raise ConfigError(
                f"{source}: {section}.{key}: expected {bound} {default:g} (the default) in a first "
                f"adoption, got {got:g}: while the base branch has no perfcheck.yml, the pull request "
                "that adds one cannot judge itself more loosely than perfcheck's defaults; loosen it "
                "in a later pull request, which the base branch's copy then gates"
            )
    _no_softer_severity(config, source)
    return config


_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def _no_softer_severity(config: Config, source: str) -> None:
    """A first adoption may make a category's findings stricter (a warning an error), never softer
    than its entry's own severity: a PR's ``matrix.<category>.severity: info`` would otherwise
    turn its own failing review into a pass (issue 45)."""
    from perfcheck.core.matrix import known

    entries = known()
    for category, entry in config.matrix.items():
        own = entries.get(category)
        if entry.severity is None or own is None:
            continue
        if _SEVERITY_RANK[entry.severity] < _SEVERITY_RANK[own.severity]:
            raise ConfigError(
                f"{source}: matrix.{category}.severity: expected {own.severity} or stricter (the "
                f"category's own) in a first adoption, got {entry.severity}: while the base branch has "
                "no perfcheck.yml, the pull request that adds one cannot judge itself more loosely than "
                "perfcheck's defaults; soften it in a later pull request, which the base branch's copy "
                "then gates"
            )


def _named_section(config: Config, name: str) -> BaseModel:
    """The config's section ``name``: one of its own, or a probe's (its defaults if not set)."""
    if name in Config.model_fields:
        return getattr(config, name)
    from perfcheck.core import probes

    kind = probes.get(name)
    section = kind.settings_of(config) if kind is not None else None
    if section is None:
        raise KeyError(name)
    return section


def _probe_sections(data: dict[str, Any], source: str) -> dict[str, BaseModel]:
    """Load the plugins ``data`` names (they add probes, categories and config sections), then take
    each probe's section (perfcheck's own and the plugins') out of ``data`` and validate it with
    the probe's settings model."""
    from perfcheck import plugins

    names = data.get("plugins", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{source}: plugins: expected a list of module names")
    loaded = []
    for i, name in enumerate(names):
        try:
            loaded.append(plugins.load(name, reserved=frozenset(Config.model_fields)))
        except plugins.PluginError as err:
            raise ConfigError(f"{source}: plugins[{i}]: {err}") from None
    from perfcheck.core import probes

    sections: dict[str, BaseModel] = {}
    # Only perfcheck's own probes and this config's plugins own a section of it.
    for kind in [*probes.built_in(), *loaded]:
        if kind.settings is None or kind.name not in data:
            continue
        try:
            sections[kind.name] = kind.settings.model_validate(data.pop(kind.name), strict=True)
        except ValidationError as err:
            raise ConfigError(_describe(err, source, (kind.name,), kind.settings)) from None
    return sections


def find_config(tree: Path) -> Path | None:
    for name in CONFIG_NAMES:
        candidate = tree / name
        if candidate.is_file():
            return candidate
    return None


# The most of a perfcheck.yml the probe job carries to the report job (ProbeRun.head_config).
MAX_CONFIG_CHARS = 256 * 1024


@dataclass(frozen=True)
class ReviewSettings:
    """The settings of a review, where they came from (a ``ConfigOrigin``) and, where they are the
    PR's own, their text, read before any of the PR's code ran (the report job gets that copy)."""

    config: Config
    origin: str
    head_text: str | None = None


def review_config(explicit: Path | None, base: Path | None, head: Path | None) -> tuple[Config, str]:
    """read_settings' config and origin."""
    found = read_settings(explicit, base, head)
    return found.config, found.origin


def read_settings(
    explicit: Path | None, base: Path | None, head: Path | None, *, committed_only: bool = True
) -> ReviewSettings:
    """``--config``, else base's perfcheck.yml (the gate: a PR must not loosen its own), else the
    PR's own when base has none yet (the first PR adds it: first_adoption_config, as committed;
    with ``committed_only`` off, as the tree has it where that differs), else the built-in
    workload."""
    if explicit is not None:
        return ReviewSettings(load_config(explicit, None), "given")
    found = find_config(base) if base is not None and base.is_dir() else None
    if found is not None:
        return ReviewSettings(load_config(found, None), "base")
    own = head_config_text(head, committed_only) if head is not None and head.is_dir() else None
    if own is not None:
        text, source = own
        return ReviewSettings(first_adoption_config(text, source), "head", text)
    return ReviewSettings(Config(), "built-in")


def _git_top(tree: Path) -> bool:
    """Whether ``tree`` is the top of a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == tree.resolve()


def _committed(tree: Path, name: str) -> bytes | None:
    """``name`` as the checkout's HEAD commit holds it (no replace refs), or None."""
    try:
        done = subprocess.run(
            ["git", "--no-replace-objects", "-C", str(tree), "cat-file", "blob", f"HEAD:{name}"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def head_config_text(head: Path, committed_only: bool = True) -> tuple[str, str] | None:
    """The PR's perfcheck.yml and the name to show for it, or None: from the head commit where the
    head tree is a git checkout, else from the tree. Called before any probe runs, so what the
    review follows is what the PR committed, not what its code wrote into the tree afterwards;
    a tree that disagrees with its commit is refused rather than guessed between. Without
    ``committed_only`` (a review outside GitHub Actions: someone trying the config they are
    writing) the tree's text is followed, and its name says it is not committed."""
    if not _git_top(head) or not committed_only:
        path = find_config(head)
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: cannot read config ({err})") from None
        return _bounded(text, str(path)), str(path)
    committed = next(((n, t) for n in CONFIG_NAMES if (t := _committed(head, n)) is not None), None)
    on_disk = find_config(head)
    if committed is None:
        if on_disk is not None:
            raise ConfigError(
                f"{on_disk}: not in the head commit; while the base branch has no perfcheck.yml the "
                "review follows the head commit's: commit it, or pass --config"
            )
        return None
    name, blob = committed
    source = f"{head / name} (as committed)"
    if on_disk is None or on_disk != head / name or on_disk.read_bytes() != blob:
        raise ConfigError(
            f"{on_disk or head / name}: differs from the head commit's {name}; while the base branch has "
            "no perfcheck.yml the review follows the head commit's: commit the change, or pass --config"
        )
    try:
        return _bounded(blob.decode("utf-8"), source), source
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: cannot read config ({err})") from None


def _bounded(text: str, source: str) -> str:
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(f"{source}: expected at most {MAX_CONFIG_CHARS} characters, got {len(text)}")
    return text


def load_config(explicit: Path | None, tree: Path | None) -> Config:
    """``--config`` if given, else the first of CONFIG_NAMES in ``tree``, else the defaults."""
    path = explicit if explicit is not None else (find_config(tree) if tree is not None else None)
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror})") from None
    return parse_config(text, str(path))
