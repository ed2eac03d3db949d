"""The root-cause matrix: data (core/matrix.yml, validated at load), the project's own entries
from config on top, and one pure function that picks a finding's symptom, cause and commands.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import ChainableUndefined
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfcheck.config import MatrixEntry
from perfcheck.schema import BUILTIN_CATEGORIES, Finding, Review, categories


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rule(_Data):
    when: dict[str, str] = Field(min_length=1, description="evidence key -> substring of its value")
    cause: str
    verify: list[str] = []


class DetailField(_Data):
    """An evidence field shown folded under a finding: its label is a Jinja expression over the
    finding's ``evidence`` (perfcheck's own data; every report escapes the label it renders)."""

    field: str
    label: str
    lang: str = ""


class Entry(_Data):
    title: str = Field(min_length=1, description="the finding's heading in every report")
    symptom: str
    causes: list[str] = Field(min_length=1)
    verify: list[str] = Field(min_length=1)
    docs: str | None = None
    rules: list[Rule] = []
    details: list[DetailField] = []


class MatrixError(ValueError):
    """The matrix data is not valid; the message names the category and field."""


def parse_matrix(text: str, source: str) -> dict[str, Entry]:
    raw = yaml.safe_load(text) or {}
    if not isinstance(raw, dict):
        raise MatrixError(f"{source}: expected a mapping of categories")
    unknown = sorted(set(raw) - set(categories()))
    if unknown:
        raise MatrixError(f"{source}: unknown categories {', '.join(unknown)}")
    out: dict[str, Entry] = {}
    for category, body in raw.items():
        try:
            out[category] = Entry.model_validate(body)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise MatrixError(f"{source}: {category}.{where}: {first['msg']}") from None
    return out


@cache
def builtin() -> dict[str, Entry]:
    """perfcheck's own matrix: an entry, a title and its details for every finding category."""
    path = Path(__file__).with_name("matrix.yml")
    entries = parse_matrix(path.read_text(encoding="utf-8"), str(path))
    missing = sorted(set(BUILTIN_CATEGORIES) - set(entries))
    if missing:
        raise MatrixError(f"{path}: no entry for {', '.join(missing)}: every category needs one")
    return entries


_PLUGIN_ENTRIES: dict[str, Entry] = {}


def register_entries(entries: dict[str, Any], source: str) -> None:
    """A plugin probe's entries for its own categories, validated like the built-in ones."""
    valid: dict[str, Entry] = {}
    for category, body in entries.items():
        try:
            valid[category] = Entry.model_validate(body)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise MatrixError(f"{source}: {category}.{where}: {first['msg']}") from None
    _PLUGIN_ENTRIES.update(valid)


def known() -> dict[str, Entry]:
    """The built-in matrix and every registered plugin's entries."""
    return {**builtin(), **_PLUGIN_ENTRIES}


def merged(overrides: dict[str, MatrixEntry]) -> dict[str, Entry]:
    """The known matrix with a project's entries on top: given fields replace, causes go first."""
    out = known()
    for category, own in overrides.items():
        base = out.get(category)
        causes = [*own.causes, *(base.causes if base else [])]
        verify = own.verify or (base.verify if base else [])
        symptom = own.symptom or (base.symptom if base else category.replace("_", " "))
        if not causes or not verify:
            raise MatrixError(f"matrix.{category}: a new category entry needs causes and verify")
        out[category] = Entry(
            title=base.title if base else category.replace("_", " "),
            details=base.details if base else [],
            symptom=symptom,
            causes=causes,
            verify=verify,
            docs=own.docs or (base.docs if base else None),
            # The project's own causes come first, so they win over the built-in refinements.
            rules=[] if own.causes else (base.rules if base else []),
        )
    return out


@dataclass(frozen=True)
class Resolved:
    symptom: str
    cause: str
    others: list[str]
    verify: list[str]
    docs: str | None


def _matches(rule: Rule, evidence: dict[str, Any]) -> bool:
    return all(needle.lower() in str(evidence.get(key, "")).lower() for key, needle in rule.when.items())


@dataclass(frozen=True)
class Where:
    """What a review's commands are filled with, so that they run as printed: the trees it
    compared, its output folder, and per workload the profile traces it wrote (base, head; both
    relative to the output folder)."""

    base: str = "BASE"
    head: str = "HEAD"
    out: str = "perfcheck-out"
    traces: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def _fill(command: str, finding: Finding, where: Where) -> str | None:
    """The command with the finding's and the review's values, each quoted for the shell (they
    come from result.json); None when it names a trace the review did not write."""
    traces = where.traces.get(finding.workload)
    if ("{base_trace}" in command or "{head_trace}" in command) and traces is None:
        return None
    values = {
        "workload": finding.workload,
        "probe": finding.probe,
        "path": finding.location.path if finding.location else "",
        "line": str(finding.location.line) if finding.location else "",
        "side": str(finding.evidence.get("side", "head")),
        "base": where.base,
        "head": where.head,
        "out": where.out,
        "base_trace": f"{where.out}/{traces[0]}" if traces else "",
        "head_trace": f"{where.out}/{traces[1]}" if traces else "",
    }
    for key, value in values.items():
        command = command.replace("{" + key + "}", shlex.quote(value) if value else value)
    return command


def where_of(review: Review) -> Where:
    """The review's own trees, output folder and written traces."""
    traces = {}
    for wl in review.workloads:
        b = next((r.trace for r in wl.base if r.probe == "profile" and r.trace), None)
        h = next((r.trace for r in wl.head if r.probe == "profile" and r.trace), None)
        if b is not None and h is not None and b.trace_file and h.trace_file:
            traces[wl.name] = (b.trace_file, h.trace_file)
    return Where(review.base.tree, review.head.tree, review.out_dir or "perfcheck-out", traces)


def resolve(
    finding: Finding, matrix: dict[str, Entry] | None = None, where: Where | None = None
) -> Resolved | None:
    entry = (matrix if matrix is not None else known()).get(finding.category)
    if entry is None:
        return None
    rule = next((r for r in entry.rules if _matches(r, finding.evidence)), None)
    cause = rule.cause if rule else entry.causes[0]
    others = [c for c in entry.causes if c != cause][: 3 if rule else 2]
    filled = [_fill(c, finding, where or Where()) for c in [*(rule.verify if rule else []), *entry.verify]]
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


_LABELS = SandboxedEnvironment(undefined=ChainableUndefined, autoescape=False)


def title(category: str, matrix: dict[str, Entry] | None = None) -> str:
    entry = (matrix if matrix is not None else known()).get(category)
    return entry.title if entry is not None else category.replace("_", " ")


def details(finding: Finding, matrix: dict[str, Entry] | None = None) -> list[Detail]:
    """The finding's detail fields that hold text, in the matrix's order, with their labels."""
    entry = (matrix if matrix is not None else known()).get(finding.category)
    out = []
    for d in entry.details if entry is not None else []:
        value = finding.evidence.get(d.field)
        if isinstance(value, str) and value.strip():
            label = _LABELS.from_string(d.label).render(evidence=finding.evidence)
            out.append(Detail(label, value, d.lang))
    return out
