"""The root-cause matrix: data (core/matrix.yml, validated at load), the project's own entries
from config on top, and one pure function that picks a finding's symptom, cause and commands.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import ChainableUndefined
from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfcheck.config import MatrixEntry
from perfcheck.schema import BUILTIN_CATEGORIES, Finding, categories


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


def _fill(command: str, finding: Finding) -> str:
    values = {
        "workload": finding.workload,
        "probe": finding.probe,
        "path": finding.location.path if finding.location else "",
        "line": str(finding.location.line) if finding.location else "",
    }
    for key, value in values.items():
        command = command.replace("{" + key + "}", value)
    return command


def resolve(finding: Finding, matrix: dict[str, Entry] | None = None) -> Resolved | None:
    entry = (matrix if matrix is not None else known()).get(finding.category)
    if entry is None:
        return None
    rule = next((r for r in entry.rules if _matches(r, finding.evidence)), None)
    cause = rule.cause if rule else entry.causes[0]
    others = [c for c in entry.causes if c != cause][: 3 if rule else 2]
    verify = [_fill(c, finding) for c in [*(rule.verify if rule else []), *entry.verify]]
    return Resolved(entry.symptom, cause, others, list(dict.fromkeys(verify)), entry.docs)


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
