"""The result contract between the runner (which runs PR code) and the bot (which holds tokens).

This module must never import torch: the trusted bot side reads these documents as untrusted
data and validates them strictly. Bump ``SCHEMA_VERSION`` on any incompatible change. A probe's
metrics model lives in its descriptor (perfcheck/core/probes/<probe>.py), built on ``Strict``;
its results hold them under ``ProbeResult.metrics``, checked against it as they are read. The
finding categories and the metrics models are read from perfcheck/vocabulary.py, which the
registry fills: the descriptors are built of this module's types, so it imports none of them. The
compile and timing probes' models are in perfcheck/measures.py: their parts (CompileLatency,
Plant) are the worker's spec's and the timing gate's too, which import no descriptor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    PrivateAttr,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from perfcheck.bisect_schema import BisectDoc
from perfcheck.measures import (
    CompileLatencyChange,
    Environment,
    ProbeStatus,
    Severity,
    Side,
    SourceLocation,
    Strict,
    TimingChange,
    Verdict,
)
from perfcheck.trace_schema import TraceDiffDoc, TraceSummaryDoc
from perfcheck.vocabulary import categories, metrics_model, metrics_models

# 2: timing is measured per worker process (TimingMetrics.processes), with device time on GPUs.
# 3: a probe's metrics are under ProbeResult.metrics, in its descriptor's metrics model, for every
# probe (version 2 had a field per built-in probe: `compile`, `timing`, ...; ``upgraded_v2`` reads it).
# 4: a review's findings grouped by cause (Review.causes); a version 3 document is read as one
# without (its groups are made from its findings when it is shown).
SCHEMA_VERSION: Final = 4

M = TypeVar("M", bound=BaseModel)


# The stages of a compile, as torch itself splits its time (and the callgrind count follows):
# Dynamo's tracing, AOTAutograd inside the backend, Inductor's codegen inside AOTAutograd, and
# what lies outside all three (guards, running the first step).
COMPILE_STAGES: Final = ("dynamo", "aot_autograd", "inductor", "other")


# What a probe process read from its side's tree is said in at most this many paths; a process
# that read more says nothing (its result cannot be recorded for reuse: perfcheck/core/records.py).
MAX_READ_FILES: Final = 2000


def tree_path(path: str) -> str:
    """``path`` where it names a file inside a tree: relative, with no ``..``, ``.`` or empty part,
    of printable characters; else ValueError. Untrusted (a worker's, a record's): checked before
    any of it is joined to a folder."""
    parts = path.split("/")
    if (
        not path
        or len(path) > 400
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or any(c < " " or c in "\x7f\\" for c in path)
    ):
        raise ValueError(f"not a relative path inside the tree: {path[:100]!r}")
    return path


TreePath = Annotated[str, AfterValidator(tree_path)]


class Reused(Strict):
    """Where a reused result came from: the run that recorded it (perfcheck/runner/reuse/store.py)."""

    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,40}$", description="base's commit then")
    run: str | None = Field(
        default=None, max_length=100, pattern=r"^[\w.-]*$", description="the recording run (GITHUB_RUN_ID)"
    )
    files: int = Field(ge=0, le=MAX_READ_FILES, description="the workload's files whose content matched")


class ProbeResult(Strict):
    probe: str
    workload: str
    side: Side
    status: ProbeStatus
    duration_s: float = Field(ge=0)
    message: str | None = Field(default=None, description="why the probe did not finish, for non-ok statuses")
    workload_failed: bool = Field(
        default=False, description="crashed in the workload's own import or build(), before the probe's work"
    )
    environment: Environment | None = None
    metrics: dict[str, Any] = Field(
        default={},
        description="what the probe measured, in its descriptor's metrics model (`perfcheck schema "
        "result` gives each probe's); empty where it measured nothing",
    )
    details: dict[str, Any] = {}
    read_files: list[TreePath] | None = Field(
        default=None,
        max_length=MAX_READ_FILES,
        description="the files of its tree the process read (imports and opens), where the run "
        "was asked to record base's results for reuse (--record-base); None: not tracked",
    )
    reused_from: Reused | None = Field(
        default=None,
        description="not probed in this run: base's result recorded by an earlier run of the same "
        "content, configuration and environment (--reuse-base)",
    )
    # The metrics as the probe's own model, validated once: (the dict they were read from, the
    # model). A copy whose metrics were replaced (model_copy) no longer matches and validates anew.
    _typed: tuple[dict[str, Any], BaseModel] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _fit(self) -> ProbeResult:
        # A registered probe's metrics are checked as the result is read, as strictly as the rest
        # of the document; a plugin's not loaded yet are checked where its comparator asks for them.
        model = metrics_model(self.probe)
        if model is not None and self.metrics:
            try:
                self.metrics_as(model)
            except ValidationError as err:
                raise ValueError(f"the {self.probe} probe's metrics: {_first_problem(err)}") from None
        return self

    def metrics_as(self, model: type[M]) -> M:
        """The metrics as ``model``, validated on the first call (pydantic's ValidationError when
        they do not fit it)."""
        cached = self._typed
        if cached is not None and cached[0] is self.metrics and type(cached[1]) is model:
            return cached[1]
        typed = model.model_validate(self.metrics)
        self._typed = (self.metrics, typed)
        return typed

    def with_metrics(self, typed: BaseModel) -> ProbeResult:
        """This result holding ``typed`` as its metrics (the orchestrator adds to a probe's)."""
        copy = self.model_copy(update={"metrics": typed.model_dump(mode="json")})
        copy._typed = (copy.metrics, typed)
        return copy


def _first_problem(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"metrics.{where}: {first['msg']}{more}"


def probe_metrics(result: ProbeResult | None, model: type[M]) -> M | None:
    """``result``'s metrics as ``model``: None where there is no result, it measured nothing, or it
    is another probe's (whose metrics model is not ``model``). Validated once per result."""
    if result is None or not result.metrics or metrics_model(result.probe) is not model:
        return None
    return result.metrics_as(model)


class Acknowledgement(Strict):
    """A known change accepted by someone: the finding is shown but no longer fails the check."""

    by: str = Field(description="a login, or `config` for perfcheck.yml")
    reason: str
    at: str | None = Field(default=None, description="when (ISO 8601)")
    sha: str | None = Field(default=None, description="the head commit when it was acknowledged")
    entry: str | None = Field(
        default=None,
        max_length=40,
        description="the perfcheck.yml acks entry that accepted this graph break by its `break:` "
        "(`acks[1]`); none for an ack of a whole category",
    )


class ExpiredAck(Strict):
    """An acknowledgement posted before the head commit existed: it covered an earlier commit, so the
    finding it would cover counts again until someone acknowledges the head."""

    category: str
    workload: str | None = None
    by: str
    reason: str
    at: str | None = None


class StaleAck(Strict):
    """A perfcheck.yml ack with a `break:` (an accepted break) that matched no graph break of the
    head in this review, in the workloads it names whose compile probe ran: the break it accepted
    is gone, or the entry names it wrongly. A note, not a warning."""

    entry: str = Field(max_length=40, description="its place in perfcheck.yml (`acks[2]`)")
    names: str = Field(max_length=2000, description="the break it names, in words")
    workload: str | None = None
    reason: str


class Finding(Strict):
    category: str = Field(description="a finding category: one of the built-in vocabulary, or a plugin's")
    severity: Severity
    workload: str
    probe: str
    message: str
    evidence: dict[str, Any] = {}
    location: SourceLocation | None = None
    ack: Acknowledgement | None = None

    @field_validator("category")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in categories():
            raise ValueError(
                f"a known finding category, not {v!r} (a plugin probe's? name its module under "
                "`plugins:` in the config this command reads)"
            )
        return v


class SideInfo(Strict):
    tree: str
    revision: str | None = None
    environment: Environment | None = None


class WorkloadReview(Strict):
    name: str
    base: list[ProbeResult] = []
    head: list[ProbeResult] = []
    timing: TimingChange | None = None
    compile_latency: CompileLatencyChange | None = None


# Where a review's settings came from: --config, the base tree (the gate), the PR's tree (base has
# none yet), or nowhere (the built-in workload).
ConfigOrigin = Literal["given", "base", "head", "built-in"]


class StepCost(Strict):
    """One step of a review's plan: what it was expected to cost when it was planned, and what it
    cost (None: not run)."""

    step: str = Field(max_length=300, description="e.g. 'base · classifier · compile'")
    expected_s: float | None = Field(default=None, ge=0, description="the estimate it was planned with")
    spent_s: float | None = Field(default=None, ge=0)
    note: str | None = Field(default=None, max_length=1000, description="what it was cut to, and why")
    parts_s: dict[str, float] = Field(
        default={},
        max_length=20,
        description="where a step of several parts spent its time, e.g. the timing step's "
        "'caches', 'set-up', 'pairs', 'compile latency' and 'ending'",
    )
    reused: bool = Field(default=False, description="not run: a recorded result of base stands for it")


class ReviewCosts(Strict):
    """Where a review's time went, against ``review.time_budget_s``, and what was cut to fit."""

    budget_s: float = Field(gt=0)
    spent_s: float = Field(ge=0, description="the probes' wall time, start to end")
    steps: list[StepCost] = Field(default=[], max_length=2000)
    cuts: list[str] = Field(default=[], max_length=200, description="what was skipped or cheapened, and why")


# An option of the review's command line as its verify commands repeat it (a path, a device): one
# line of printable text, no backquote (it is shown inside a Markdown code span).
RerunArg = Annotated[str, StringConstraints(max_length=1024, pattern=r"^[^\x00-\x1f\x7f`]*$")]
# How perfcheck was run, as the review's commands run it again.
Program = Annotated[
    str, StringConstraints(max_length=300, pattern=r"^(python3? -m perfcheck|[\w./-]*perfcheck)$")
]
RERUN_DESCRIPTION = (
    "the review's options besides --base, --head, --workloads, --probes and --out (its --config, "
    "--device, --base-python, --head-python), which its verify commands repeat"
)
# The variables of the review's environment that decide what its probes import (the probes inherit
# the review's environment): its verify commands set them as the review had them, or the workload
# (a tree's `src/` layout on PYTHONPATH, say) would not import.
RerunEnvName = Literal["PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONNOUSERSITE"]
RERUN_ENV_NAMES: tuple[str, ...] = get_args(RerunEnvName)
RERUN_ENV_DESCRIPTION = (
    "the variables of the review's environment that decide what its probes import (PYTHONPATH, "
    "...), which its verify commands set as the review had them"
)


MAX_FINDINGS: Final = 5000


class CauseGroup(Strict):
    """Findings one change explains (perfcheck/core/causes.py): a cause met in one or more workloads
    heading the effects it likely explains, or one finding with no cause in the review. Findings
    are named by their index in the review's ``findings``."""

    title: str = Field(max_length=2000, description="the cause's phrase, or the lone finding's title")
    caused: bool = Field(description="headed by a cause (a structural change), not a finding alone")
    leads: list[Annotated[int, Field(ge=0)]] = Field(
        min_length=1, max_length=MAX_FINDINGS, description="the cause, once per workload it was met in"
    )
    effects: list[Annotated[int, Field(ge=0)]] = Field(
        default=[], max_length=MAX_FINDINGS, description="what it likely explains"
    )


class Review(Strict):
    schema_version: Literal[4] = SCHEMA_VERSION
    tool_version: str
    verdict: Verdict
    summary: str
    config_origin: ConfigOrigin | None = Field(
        default=None, description="where the settings came from; the comment says so when not from base"
    )
    base: SideInfo
    head: SideInfo
    out_dir: str | None = Field(
        default=None, max_length=4096, description="the folder the review wrote; its commands name it"
    )
    program: Program = Field(default="perfcheck", description="how perfcheck was run; its commands run it so")
    rerun: list[RerunArg] = Field(default=[], max_length=12, description=RERUN_DESCRIPTION)
    rerun_env: dict[RerunEnvName, RerunArg] = Field(default={}, description=RERUN_ENV_DESCRIPTION)
    workloads: list[WorkloadReview]
    findings: list[Finding] = Field(max_length=MAX_FINDINGS)
    causes: list[CauseGroup] | None = Field(
        default=None,
        max_length=MAX_FINDINGS,
        description="the findings grouped by what caused them, each finding in one group; none in a "
        "document of version 3 or earlier",
    )
    inconclusive: list[str] = Field(default=[], description="why the verdict could not be pass or fail")
    expired_acks: list[ExpiredAck] = Field(
        default=[], description="acknowledgements of an earlier commit, which no longer cover the head"
    )
    stale_acks: list[StaleAck] = Field(
        default=[],
        max_length=1000,
        description="perfcheck.yml acks with a `break:` that matched no graph break of the head in "
        "this review (entries that may be removed)",
    )
    bisect: BisectDoc | None = Field(
        default=None, description="where each finding came from, when the probe job bisected the PR"
    )
    costs: list[ReviewCosts] = Field(
        default=[], max_length=64, description="per shard: where the probes' time went, and what was cut"
    )

    @model_validator(mode="after")
    def _each_finding_in_one_group(self) -> Review:
        if self.causes is None:
            return self
        named = [i for g in self.causes for i in (*g.leads, *g.effects)]
        if sorted(named) != list(range(len(self.findings))):
            raise ValueError(
                f"causes: each of the {len(self.findings)} findings is to be in exactly one group, by its "
                "index in findings"
            )
        return self


class Shard(Strict):
    index: int = Field(ge=1, description="1-based")
    count: int = Field(ge=1)

    @model_validator(mode="after")
    def _within(self) -> Shard:
        if self.index > self.count:
            raise ValueError(f"shard {self.index}/{self.count}: index beyond count")
        return self

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class ProbeRun(Strict):
    """What `perfcheck probe` writes: one shard's raw measurements, before any comparison."""

    schema_version: Literal[4] = SCHEMA_VERSION
    kind: Literal["probe-run"] = "probe-run"
    tool_version: str
    shard: Shard
    workload_set: list[str] = Field(description="every workload of the whole run, all shards, in order")
    base: SideInfo
    head: SideInfo
    workloads: list[WorkloadReview]
    config_origin: ConfigOrigin | None = None
    program: Program = "perfcheck"
    rerun: list[RerunArg] = Field(default=[], max_length=12, description=RERUN_DESCRIPTION)
    rerun_env: dict[RerunEnvName, RerunArg] = Field(
        default={},
        description="not read: the report side sets a rerun's environment from its own (a shard "
        "comes from the job that ran PR code); kept so that older shards validate",
    )
    head_config: str | None = Field(
        default=None,
        max_length=256 * 1024,
        description="the PR's perfcheck.yml, when base had none and the probes followed it: the "
        "report job, on base's checkout, has no other copy",
    )
    bisect: BisectDoc | None = Field(
        default=None, description="this shard's findings bisected along the PR's commits (probe --bisect)"
    )
    costs: ReviewCosts | None = None
    stopped: Literal["Ctrl-C", "SIGTERM"] | None = Field(
        default=None,
        description="the run was stopped before its end: its workloads hold what finished before",
    )
    stopped_after_s: float | None = Field(default=None, ge=0, description="when, after its start")


# A result document larger than this is refused before it is parsed.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024


class ContractError(ValueError):
    """A result document that does not satisfy the contract; carries a readable explanation."""


def _explain(err: ValidationError, source: str) -> str:
    lines = [f"{source}: not a valid perfcheck document ({err.error_count()} problem(s))"]
    for e in err.errors()[:20]:
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def load_model(model: type[M], text: str | bytes, source: str) -> M:
    """Validate untrusted JSON into ``model`` completely, or raise ContractError; never half-read."""
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        raise ContractError(_explain(err, source)) from None


def _load_versioned(model: type[M], path: Path) -> M:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as err:
        raise ContractError(f"{path}: cannot read it ({err.strerror})") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ContractError(f"{path}: larger than {MAX_DOCUMENT_BYTES >> 20} MB; not read")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        cut = not raw.rstrip().endswith((b"}", b"]"))
        hint = " (the file ends early: cut off while it was written or copied?)" if cut else ""
        raise ContractError(
            f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}{hint}"
        ) from None
    except (ValueError, RecursionError):
        raise ContractError(f"{path}: not JSON text (or nested too deep)") from None
    if not isinstance(data, dict):
        raise ContractError(f"{path}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version == 2:
        # Written before version 3 (a history's earlier artifacts, a probe job of an older
        # perfcheck): read as version 4 says the same, through the one validation path.
        raw = json.dumps(upgraded_v2(data, str(path))).encode()
    elif version == 3:
        # Version 4 only added the groups by cause, which a version 3 document is read without.
        raw = json.dumps({**data, "schema_version": SCHEMA_VERSION}).encode()
    elif version != SCHEMA_VERSION:
        raise ContractError(
            f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION}, 3 or 2)"
        )
    return load_model(model, raw, str(path))


# Version 2's fields of a probe result, one per built-in probe that had its metrics there: the
# profile probe's were `trace`. Version 3 keeps every probe's under `metrics`.
_V2_METRICS = ("compile", "export", "timing", "ddp", "amp", "custom_ops", "trace")


def upgraded_v2(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A version 2 result.json or probe-run document as version 3 holds it: each probe result's
    metrics moved from its probe's field to `metrics`. Anything else is left for the validation
    to judge; a result holding two probes' metrics (never written) is refused, naming it."""
    workloads = data.get("workloads")
    out = {**data, "schema_version": SCHEMA_VERSION}
    if not isinstance(workloads, list):
        return out
    moved = []
    for i, wl in enumerate(workloads):
        if not isinstance(wl, dict):
            moved.append(wl)
            continue
        wl = dict(wl)
        for side in ("base", "head"):
            results = wl.get(side)
            if isinstance(results, list):
                wl[side] = [
                    _upgraded_result(r, f"{source}: workloads.{i}.{side}.{j}") if isinstance(r, dict) else r
                    for j, r in enumerate(results)
                ]
        moved.append(wl)
    out["workloads"] = moved
    return out


def _upgraded_result(result: dict[str, Any], where: str) -> dict[str, Any]:
    named = {k: result[k] for k in _V2_METRICS if result.get(k) is not None}
    out = {k: v for k, v in result.items() if k not in _V2_METRICS}
    if len(named) + bool(result.get("metrics")) > 1:
        raise ContractError(f"{where}: metrics of several probes ({', '.join(named)}); version 2 wrote one")
    if named:
        out["metrics"] = next(iter(named.values()))
    return out


def load_review(path: Path) -> Review:
    return _load_versioned(Review, path)


def load_probe_run(path: Path) -> ProbeRun:
    return _load_versioned(ProbeRun, path)


DOCUMENTS: dict[str, type[BaseModel]] = {
    "result": Review,
    "probe-run": ProbeRun,
    "trace-summary": TraceSummaryDoc,
    "trace-diff": TraceDiffDoc,
    "bisect": BisectDoc,
}


def json_schema(document: str = "result") -> dict[str, Any]:
    """A document's JSON Schema (``DOCUMENTS``); a finding's category is the vocabulary known now
    (plugins' too)."""
    schema = DOCUMENTS[document].model_json_schema()
    defs = schema.get("$defs", {})
    finding = defs.get("Finding")
    if finding is not None:
        finding["properties"]["category"]["enum"] = list(categories())
    result = defs.get("ProbeResult")
    if result is not None:
        result["allOf"] = _metrics_by_probe(defs)
    return schema


def _metrics_by_probe(defs: dict[str, Any]) -> list[dict[str, Any]]:
    """For each registered probe with a metrics model: a result of that probe holds its metrics in
    that model. Their definitions are added to ``defs``; one named like another definition of the
    document, and not the same, takes the probe's name in front."""
    out = []
    for probe, model in metrics_models().items():
        top = model.model_json_schema(ref_template="#/$defs/{model}")
        own = {**top.pop("$defs", {}), model.__name__: top}
        names = {n: n if defs.get(n, d) == d else f"{probe}.{n}" for n, d in own.items()}
        text = json.dumps(own)
        for old, new in names.items():
            if old != new:
                text = text.replace(f'"#/$defs/{old}"', f'"#/$defs/{new}"')
        for name, definition in json.loads(text).items():
            defs[names[name]] = definition
        out.append(
            {
                "if": {"properties": {"probe": {"const": probe}}, "required": ["probe"]},
                "then": {"properties": {"metrics": {"$ref": f"#/$defs/{names[model.__name__]}"}}},
            }
        )
    return out
