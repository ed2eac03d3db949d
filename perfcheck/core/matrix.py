"""The root-cause matrix: data (perfcheck/core/matrix.yml, validated at load), the project's own entries
from config on top, and one pure function that picks a finding's symptom, cause and commands.

A category raised by several probes (``collective_drift`` by ddp and fsdp) can mean different
things from each: an entry's ``probes`` holds what it means as one probe raises it, from the
matrix data or from the probe's descriptor (``ProbeKind.entries``); resolve() takes the entry of
the finding's own probe.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from jinja2 import ChainableUndefined, Template, TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from perfcheck.measures import Severity
from perfcheck.schema import RERUN_ENV_NAMES, Finding, Review
from perfcheck.settings import MatrixEntry, whole_phrases
from perfcheck.vocabulary import SHARED_CATEGORIES, categories

# Labels and phrases of matrix entries: perfcheck's own or a project's templates over a finding's
# evidence, rendered as plain text (every report escapes what it shows).
_LABELS = SandboxedEnvironment(undefined=ChainableUndefined, autoescape=False)


def _op_change(op_diff: Any) -> str:
    """An ``op_diff`` (op -> [base count, head count]) as "relu → gelu": the ops that went, then
    those that came, without ``aten.`` and ``.default``; "" where there are none of either or more
    than four in all."""
    if not isinstance(op_diff, dict):
        return ""
    gone, new = [], []
    for op, counts in op_diff.items():
        if not (isinstance(counts, (list, tuple)) and len(counts) == 2):
            return ""
        name = str(op).removeprefix("aten.").removesuffix(".default")
        if counts[1] < counts[0]:
            gone.append(name)
        elif counts[1] > counts[0]:
            new.append(name)
    return f"{', '.join(gone)} → {', '.join(new)}" if gone and new and len(gone) + len(new) <= 4 else ""


_LABELS.filters["op_change"] = _op_change


@cache
def _template(text: str) -> Template:
    """An entry's label or phrase, compiled once: the same few are rendered for every finding."""
    return _LABELS.from_string(text)


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# One cause or one command: a string with its brackets and backticks closed, so that a list YAML
# split at a comma inside parentheses is refused (config.split_phrase).
Phrase = Annotated[str, AfterValidator(lambda text: whole_phrases([text])[0])]


class Rule(_Data):
    when: dict[str, str] = Field(min_length=1, description="evidence key -> substring of its value")
    cause: Phrase
    verify: list[Phrase] = []


class DetailField(_Data):
    """An evidence field shown folded under a finding: its label is a Jinja expression over the
    finding's ``evidence`` (perfcheck's own data; every report escapes the label it renders)."""

    field: str
    label: str
    lang: str = ""


class ProbeEntry(_Data):
    """What a category means as one probe raises it: the fields given replace the category's own
    for that probe's findings."""

    symptom: Phrase | None = None
    causes: list[Phrase] | None = Field(default=None, min_length=1)
    verify: list[Phrase] | None = Field(default=None, min_length=1)
    docs: str | None = None
    rules: list[Rule] | None = None


class Identity(_Data):
    """How a search through commits (perfcheck/core/bisect.py) tells a finding of the category apart at other
    commits, where its evidence says more than the default (the first of ``op``,
    ``guard_expression``, ``parameter`` or ``code`` it has, else its message without numbers)."""

    by: list[str] | None = Field(
        default=None, description="evidence fields that, with the source text where it is, say what it is"
    )
    each: str | None = Field(
        default=None,
        description="an evidence mapping whose every key is one thing to look for (two commits can "
        "each change one)",
    )
    named: str = Field(default="key", description="what a key of `each` is, in the search's own keys")
    label: str | None = Field(
        default=None, description="for `each`: one key's label, a Jinja template over `key` and `value`"
    )

    @model_validator(mode="after")
    def _one_way(self) -> Identity:
        if (self.by is None) == (self.each is None):
            raise ValueError("an identity gives exactly one of `by` and `each`")
        if self.each is not None and self.label is None:
            raise ValueError("`each` needs a `label`")
        return self


class Folds(_Data):
    """Failures that follow from a finding of the category (perfcheck/core/explain.py): where one of them is
    an error beside it, it is shown under this finding and not counted again."""

    categories: list[str] = Field(min_length=1, description="the categories of what follows from it")
    when: list[dict[str, str]] | None = Field(
        default=None,
        min_length=1,
        description="what makes a finding of it the root cause: any one of these (evidence key -> "
        "case-insensitive substring of its value); left out, every error of it is one",
    )
    at: Literal["anywhere", "its_line"] = Field(
        default="anywhere",
        description="where what follows from it is: anywhere in the workload, or only at its own "
        "line (the same construct, which another tool fails on there)",
    )


# The charts of the reports (perfcheck/core/charts.py) that a category's findings feed: the kernel time
# changes (its evidence's kernels) and the graph-break heatmap (its evidence's break type).
Chart = Literal["kernel_deltas", "break_heatmap"]


# What a finding of a category is to a search through commits (perfcheck/core/bisect.py): structural, exact
# at any commit (one probe run says present or absent); measured, a figure the gate's statistics
# decide (searched only on request, with paired runs); process, a probe's process that broke (its
# log says why; never searched).
Nature = Literal["structural", "measured", "process"]
# What it is to the other findings of its workload (perfcheck/core/explain.py): an effect, a change
# that a structural finding of the same review may explain (a measured one, or one that follows from
# another: the collectives of an FSDP unit whose settings changed); a cause, a structural change
# that may explain one (``because`` says it in a phrase); or neither.
Role = Literal["effect", "cause", "neither"]


class Entry(_Data):
    title: str = Field(min_length=1, description="the finding's heading in every report")
    nature: Nature = Field(description="structural, measured or process: how bisect treats it")
    role: Role = Field(description="effect, cause or neither: how explain reads it beside the others")
    severity: Severity = Field(
        description="what a finding of it is when nothing in its situation softens it: error fails "
        "the check (a project may move it: `matrix.<category>.severity`)"
    )
    because: str | None = Field(
        default=None,
        description="for a cause: the phrase that names it in an effect's message, a Jinja template "
        "over the finding's `evidence` and `at` (' at path:line' where it has a location)",
    )
    figure: str | None = Field(
        default=None,
        description='for an effect: its change in a few words ("step +29.9 %"), a Jinja template over '
        "the finding's `evidence`, as a cause's group lists it in a headline",
    )
    identity: Identity | None = Field(
        default=None, description="how bisect tells one apart at other commits, where not by default"
    )
    folds: Folds | None = Field(default=None, description="the failures that follow from it, if any")
    chart: Chart | None = Field(default=None, description="the report chart its findings feed, if any")
    verify_compile_latency: bool = Field(
        default=False,
        description="its verify commands' reviews measure compile latency (others run with "
        "--no-compile-latency: minutes a check of something else does not need)",
    )
    symptom: Phrase
    causes: list[Phrase] = Field(min_length=1)
    verify: list[Phrase] = Field(min_length=1)
    docs: str | None = None
    rules: list[Rule] = []
    details: list[DetailField] = []
    probes: dict[str, ProbeEntry] = Field(
        default={}, description="probe name -> the entry as that probe raises the category"
    )

    @model_validator(mode="after")
    def _cause_says_why(self) -> Entry:
        if (self.role == "cause") != (self.because is not None):
            raise ValueError("`because` is given exactly where role is cause")
        label = self.identity.label if self.identity is not None else None
        for name, text in (("because", self.because), ("figure", self.figure), ("identity.label", label)):
            if text:
                try:  # a template that does not parse fails here, at load
                    _template(text)
                except TemplateSyntaxError as err:
                    raise ValueError(f"`{name}` is no template: {err.message}") from None
        return self

    def for_probe(self, probe: str) -> Entry:
        """The entry for a finding ``probe`` raised: its own fields where it has some."""
        own = self.probes.get(probe)
        if own is None:
            return self
        given = {k: v for k, v in own if v is not None}
        return self.model_copy(update={**given, "probes": {}})


class MatrixError(ValueError):
    """The matrix data is not valid; the message names the category and field."""


def _validated(model: type[_Data], category: str, body: Any, source: str) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise MatrixError(f"{source}: {category}{'.' + where if where else ''}: {msg}") from None


def parse_matrix(text: str, source: str) -> dict[str, Entry]:
    raw = yaml.safe_load(text) or {}
    if not isinstance(raw, dict):
        raise MatrixError(f"{source}: expected a mapping of categories")
    unknown = sorted(set(raw) - set(categories()))
    if unknown:
        raise MatrixError(f"{source}: unknown categories {', '.join(unknown)}")
    return {category: _validated(Entry, category, body, source) for category, body in raw.items()}


@cache
def builtin() -> dict[str, Entry]:
    """The shared categories' entries (perfcheck/core/matrix.yml): those several probes raise. Each probe's
    own come with its descriptor (``register_entries``)."""
    path = Path(__file__).with_name("matrix.yml")
    entries = parse_matrix(path.read_text(encoding="utf-8"), str(path))
    missing = sorted(set(SHARED_CATEGORIES) - set(entries))
    if missing:
        raise MatrixError(f"{path}: no entry for {', '.join(missing)}: every category needs one")
    return entries


_PROBES_OWN: dict[str, Entry] = {}
_PROBE_ENTRIES: dict[str, dict[str, ProbeEntry]] = {}  # category -> probe -> its entry
_PENDING: list[tuple[dict[str, Any], str]] = []  # perfcheck's own entries, not yet validated


def register_entries(entries: dict[str, Any], source: str, later: bool = False) -> None:
    """A probe's entries for its own categories (a built-in's or a plugin's), validated like the
    shared ones: now, so that a plugin's mistake is a config error where its config names it, or
    with ``later`` (perfcheck's own probes) when an entry is first asked for, so that a command
    that needs none (``--help``) does not pay for it (a test validates them all)."""
    if later:
        _PENDING.append((entries, source))
        return
    valid = {category: _validated(Entry, category, body, source) for category, body in entries.items()}
    _PROBES_OWN.update(valid)


def _settle() -> None:
    while _PENDING:
        register_entries(*_PENDING.pop(0))


def register_probe_entries(probe: str, entries: dict[str, Any], source: str) -> None:
    """A probe's own entries for shared categories it raises (``ProbeKind.entries``), validated
    like the matrix's: they apply to that probe's findings of the category."""
    valid = {c: _validated(ProbeEntry, c, body, source) for c, body in entries.items()}
    for category, entry in valid.items():
        _PROBE_ENTRIES.setdefault(category, {})[probe] = entry


def known() -> dict[str, Entry]:
    """The built-in matrix and every registered plugin's entries, with each probe's own entries
    for the shared categories it raises."""
    _settle()
    out = {**builtin(), **_PROBES_OWN}
    for category, own in _PROBE_ENTRIES.items():
        if category in out:
            out[category] = out[category].model_copy(update={"probes": {**out[category].probes, **own}})
    return out


def _on_top(category: str, base: Entry | None, own: MatrixEntry) -> Entry:
    """A project's entry (``matrix:`` in perfcheck.yml) over the known one: what the project gives
    replaces, its causes go first; everything else (title, nature, role, details, ...) is the
    known entry's, or a plain structural one's for a category of the project's own."""
    causes = [*own.causes, *(base.causes if base else [])]
    verify = own.verify or (base.verify if base else [])
    if base is not None and not own.causes and not own.verify and own.symptom is None and own.docs is None:
        return base  # only a severity (compare.py applies it): the entry is perfcheck's own
    if not causes or not verify:
        raise MatrixError(f"matrix.{category}: a new category entry needs causes and verify")
    if base is None:
        name = category.replace("_", " ")
        base = Entry(
            title=name,
            nature="structural",
            role="neither",
            severity=own.severity or "error",
            symptom=name,
            causes=causes,
            verify=verify,
        )
    return base.model_copy(
        update={
            "symptom": own.symptom or base.symptom,
            "causes": causes,
            "verify": verify,
            "docs": own.docs or base.docs,
            # The project's own causes come first, so they win over the built-in refinements.
            "rules": [] if own.causes else base.rules,
            "probes": {},
        }
    )


def merged(overrides: dict[str, MatrixEntry]) -> dict[str, Entry]:
    """The known matrix with a project's entries on top: given fields replace, causes go first
    (for every probe that raises the category)."""
    out = known()
    for category, own in overrides.items():
        base = out.get(category)
        probes = {}
        if base is not None:
            for probe in base.probes:
                mine = _on_top(category, base.for_probe(probe), own).model_dump(
                    include=set(ProbeEntry.model_fields)
                )
                probes[probe] = ProbeEntry.model_validate(mine)
        out[category] = _on_top(category, base, own).model_copy(update={"probes": probes})
    return out


@dataclass(frozen=True)
class Resolved:
    symptom: str
    cause: str
    others: list[str]
    verify: list[str]
    docs: str | None


def matches(when: Mapping[str, str], evidence: Mapping[str, Any]) -> bool:
    """Whether every evidence key of ``when`` holds its substring (case-insensitive)."""
    return all(needle.lower() in str(evidence.get(key, "")).lower() for key, needle in when.items())


@dataclass(frozen=True)
class Where:
    """What a review's commands are filled with, so that they run as printed: the trees it
    compared, its output folder, per workload the profile traces it wrote (base, head; both
    relative to the output folder), how perfcheck was run (``program``), the options the review
    ran with that a rerun repeats (``rerun``: its --config, --device, interpreters) and the
    variables of its environment that decide what its probes import (``env``: PYTHONPATH, ...),
    which a rerun sets as the review had them."""

    base: str = "BASE"
    head: str = "HEAD"
    out: str = "perfcheck-out"
    traces: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    program: str = "perfcheck"
    rerun: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # What the review ran with that its commands leave out (``printable``), said instead.
    withheld: tuple[str, ...] = ()

    @property
    def verify_out(self) -> str:
        """Where a verify command's review writes: beside the review's own results, not over them."""
        return f"{self.out}/verify"


# A verify command that reruns a review: perfcheck as the user ran it, with the review's own options
# and its own output folder. Commands other than perfcheck's (tlparse, less) are left as written.
_RERUN = re.compile(r"(?<![\w./-])(?:python3? -m )?perfcheck (review|trace) ")


def _as_run(command: str, where: Where, latency: bool) -> str:
    """``perfcheck review ...`` as this review's user runs it: in the review's import environment
    (its PYTHONPATH, say), the same program, the review's own options (--config, --device,
    interpreters), a folder of its own (``{verify_out}``), and, unless it verifies compile latency
    (``latency``: its entry's ``verify_compile_latency``), without the compile-latency samples
    (minutes the check does not need)."""

    def rerun(match: re.Match[str]) -> str:
        if match.group(1) == "trace":
            return f"{where.program} trace "
        # The review's own options and environment as placeholders too, filled (quoted) in the one
        # substitution pass: their text is never scanned for placeholders.
        extra = [*(["{rerun}"] if where.rerun else []), "--out", "{verify_out}"]
        if not latency:
            extra.append("--no-compile-latency")
        env = "{rerun_env} " if where.env else ""
        return f"{env}{where.program} review {' '.join(extra)} "

    command = _RERUN.sub(rerun, command)
    logged = re.match(r"TORCH_LOGS=\S+ ", command)
    probes = re.search(r"--probes (\{probe\}|\w+)", command)
    if logged and probes and f"{where.program} review " in command and ";" not in command:
        # TORCH_LOGS writes to the probe process's log, which the review does not print.
        command += f"; less {{verify_out}}/probes/{{side}}-{{workload}}-{probes.group(1)}.log"
    return command


def _fill(command: str, finding: Finding, where: Where, latency: bool = False) -> str | None:
    """The command with the finding's and the review's values, each quoted for the shell (they
    come from result.json); None when it names a trace the review did not write."""
    traces = where.traces.get(finding.workload)
    if ("{base_trace}" in command or "{head_trace}" in command) and traces is None:
        return None
    command = _as_run(command, where, latency)
    values = {
        "workload": finding.workload,
        "probe": finding.probe,
        "path": finding.location.path if finding.location else "",
        "line": str(finding.location.line) if finding.location else "",
        "side": str(finding.evidence.get("side", "head")),
        "base": where.base,
        "head": where.head,
        "out": where.out,
        "verify_out": where.verify_out,
        "base_trace": f"{where.out}/{traces[0]}" if traces else "",
        "head_trace": f"{where.out}/{traces[1]}" if traces else "",
    }
    # Where a verify review's probes wrote torch's structured trace, with TORCH_TRACE set: each
    # side's own files folder (perfcheck/runner/process/sides.py ``probe_env``), whatever TORCH_TRACE named.
    values["torch_trace"] = f"{where.verify_out}/probes/files/{values['side']}/torch_trace"
    quoted = {key: shlex.quote(value) if value else value for key, value in values.items()}
    quoted["rerun"] = " ".join(shlex.quote(a) for a in where.rerun)
    # NAME=value assignments: a name is never quoted (a quoted one is no assignment), so only a
    # variable's name as the schema allows it is ever written; its value is quoted like any other.
    quoted["rerun_env"] = " ".join(f"{k}={shlex.quote(v)}" for k, v in where.env if _ENV_NAME.fullmatch(k))
    # One pass over the command as written: each value is quoted once, on its own, and what a
    # value holds ("{head}" inside a forged config path, say) is never substituted again.
    return _PLACEHOLDER.sub(lambda m: quoted.get(m.group(1), m.group(0)), command)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def where_of(review: Review, traces: Mapping[str, tuple[str, str]]) -> Where:
    """The review's own trees, output folder and options, with ``traces``: per workload, the
    profile traces it wrote (base, head), which the caller reads from the profile probe's results
    (perfcheck/core/probes/profile.py ``trace_files``; the matrix reads no probe's metrics).
    Only what ``printable`` lets through reaches a command; the rest is said instead."""
    trees = (review.base.tree, review.head.tree)
    rerun, env, withheld = printable(review.rerun, review.rerun_env, trees)
    return Where(
        review.base.tree,
        review.head.tree,
        review.out_dir or "perfcheck-out",
        dict(traces),
        review.program,
        rerun,
        env,
        withheld,
    )


# The interpreter options a rerun repeats: a path a command runs outside any sandbox.
_INTERPRETERS = ("--base-python", "--head-python")


def _outside(path: str, trees: tuple[str, ...]) -> bool:
    """Whether ``path`` is absolute, names no parent (``..``) and lies in neither tree: a path in
    a tree, or one that depends on where the command is pasted, may be the pull request's own."""
    if not path.startswith("/") or ".." in Path(path).parts:
        return False
    here = Path(path)
    # A tree as the review named it, and a relative one as it lies from here (where the commands
    # are printed and, most likely, pasted).
    named = [Path(t) if t.startswith("/") else Path.cwd() / t for t in trees if t]
    return not any(here == t or t in here.parents for t in named)


def printable(
    rerun: list[str], env: Mapping[Any, str], trees: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...], tuple[str, ...]]:
    """What a printed command may carry of the options and environment a review ran with, and
    what it leaves out, each in words to say instead. Never PYTHONHOME or PYTHONUSERBASE (they
    choose the interpreter's own modules); a PYTHONPATH entry, an interpreter only as an absolute
    path in neither tree (``_outside``): a pasted command runs them outside any sandbox, and
    result.json may come from the job that ran the pull request's code."""
    withheld: list[str] = []
    kept: list[str] = []
    for flag, value in zip(rerun[::2], rerun[1::2], strict=False):
        if flag in _INTERPRETERS and not _outside(value, trees):
            withheld.append(f"{flag} (the review's was {value!r}: give your own interpreter)")
            continue
        kept += [flag, value]
    shown: list[tuple[str, str]] = []
    for name, value in env.items():
        if name not in RERUN_ENV_NAMES or name in ("PYTHONHOME", "PYTHONUSERBASE"):
            withheld.append(f"{name} (set it yourself where you trust it)")
        elif name == "PYTHONPATH":
            entries = [e for e in value.split(":") if e]
            safe = [e for e in entries if _outside(e, trees)]
            if len(safe) < len(entries):
                withheld.append("PYTHONPATH entries that are relative or inside a tree")
            if safe:
                shown.append((name, ":".join(safe)))
        elif value.isdigit():
            shown.append((name, value))
    return tuple(kept), tuple(shown), tuple(withheld)


def resolve(
    finding: Finding, matrix: dict[str, Entry] | None = None, where: Where | None = None
) -> Resolved | None:
    entry = (matrix if matrix is not None else known()).get(finding.category)
    if entry is None:
        return None
    entry = entry.for_probe(finding.probe)
    rule = next((r for r in entry.rules if matches(r.when, finding.evidence)), None)
    cause = rule.cause if rule else entry.causes[0]
    others = [c for c in entry.causes if c != cause][: 3 if rule else 2]
    filled = [
        _fill(c, finding, where or Where(), entry.verify_compile_latency)
        for c in [*(rule.verify if rule else []), *entry.verify]
    ]
    verify = [c for c in filled if c is not None]
    return Resolved(entry.symptom, cause, others, list(dict.fromkeys(verify)), _page(finding) or entry.docs)


# Dynamo names each graph break's own page in its reason; the finding links that page instead of
# the general one. Only this exact shape is taken from result.json: it is untrusted text.
_GB_PAGE = re.compile(r"https://meta-pytorch\.github\.io/compile-graph-break-site/gb/gb\d{4}\.html")


def _page(finding: Finding) -> str | None:
    m = (
        _GB_PAGE.search(str(finding.evidence.get("reason", "")))
        if finding.category.startswith("graph_break")
        else None
    )
    return m.group(0) if m else None


@dataclass(frozen=True)
class Detail:
    """One folded evidence field of a finding, ready for a template to escape and show."""

    label: str
    text: str
    lang: str


def title(category: str, matrix: dict[str, Entry] | None = None) -> str:
    entry = (matrix if matrix is not None else known()).get(category)
    return entry.title if entry is not None else category.replace("_", " ")


def of_role(role: Role) -> frozenset[str]:
    """The categories known now (built-in and plugins') with this role."""
    return frozenset(c for c, e in known().items() if e.role == role)


def of_chart(chart: Chart) -> frozenset[str]:
    """The categories known now whose findings feed this chart."""
    return frozenset(c for c, e in known().items() if e.chart == chart)


def render(text: str, **values: Any) -> str:
    """An entry's label or phrase (a Jinja template) filled in, as plain text."""
    return _template(text).render(**values).strip()


def because(finding: Finding) -> str | None:
    """The phrase naming ``finding`` as the likely cause of a measured one, where its category is
    a cause."""
    entry = known().get(finding.category)
    if entry is None or entry.because is None:
        return None
    loc = finding.location
    at = f" at {loc.path}:{loc.line}" if loc is not None else ""
    return _template(entry.because).render(evidence=finding.evidence, at=at).strip()


def figure(finding: Finding) -> str | None:
    """``finding``'s change in a few words, where its category says how (``figure``) and its
    evidence has what that needs; None otherwise."""
    entry = known().get(finding.category)
    if entry is None or entry.figure is None:
        return None
    try:
        said = _template(entry.figure).render(evidence=finding.evidence).strip()
    except (TypeError, ValueError, ArithmeticError):  # evidence of another shape than the template's
        return None
    return said or None


def details(finding: Finding, matrix: dict[str, Entry] | None = None) -> list[Detail]:
    """The finding's detail fields that hold text, in the matrix's order, with their labels."""
    entry = (matrix if matrix is not None else known()).get(finding.category)
    out = []
    for d in entry.details if entry is not None else []:
        value = finding.evidence.get(d.field)
        if isinstance(value, str) and value.strip():
            label = _template(d.label).render(evidence=finding.evidence)
            out.append(Detail(label, value, d.lang))
    return out
