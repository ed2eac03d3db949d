"""What the check run says: conclusion, title, summary and annotations. Pure; torch-free.

Annotations are plain text on GitHub (no Markdown), but they still come from PR code: control
characters are dropped and every field is cut to GitHub's size limits.
"""

# No `from __future__ import annotations`: it would bind the name `annotations`, which this module
# defines as a function. Every annotation here is valid at runtime on Python 3.10+.
import re
from typing import Any, Literal

from perfcheck.core import matrix
from perfcheck.core.causes import grouped
from perfcheck.core.render import COMMENT_LIMIT, headline
from perfcheck.measures import Verdict
from perfcheck.schema import Finding, Review
from perfcheck.settings import GitHubConfig

SUMMARY_LIMIT = 65535  # output.summary and output.text
ANNOTATIONS_PER_REQUEST = 50
_MESSAGE_LIMIT = 64 * 1024 - 1
_TITLE_LIMIT = 255
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LEVELS: dict[str, Literal["failure", "warning", "notice"]] = {
    "error": "failure",
    "warning": "warning",
    "info": "notice",
}

assert SUMMARY_LIMIT < COMMENT_LIMIT


def conclusion(verdict: Verdict, cfg: GitHubConfig) -> str:
    if verdict == "pass":
        return "success"
    if verdict == "fail":
        return "failure"
    return cfg.inconclusive_conclusion


def title(review: Review) -> str:
    return _plain(f"perfcheck: {headline(review)}", _TITLE_LIMIT)


def _plain(value: object, limit: int) -> str:
    s = _CONTROL.sub("", str(value))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _repo_path(path: str) -> str | None:
    """A path GitHub can place in the PR's diff: relative, inside the repository."""
    if not path or path.startswith(("/", "<")) or ":" in path.split("/")[0]:
        return None
    parts = path.split("/")
    return None if ".." in parts else path


def annotation(finding: Finding) -> dict[str, Any] | None:
    loc = finding.location
    # A file outside the repository (a dependency's) has no line in the PR to annotate.
    path = _repo_path(loc.path) if loc and loc.in_tree else None
    if loc is None or path is None or loc.line < 1:
        return None
    out: dict[str, Any] = {
        "path": path,
        "start_line": loc.line,
        "end_line": loc.line,
        "annotation_level": _LEVELS[finding.severity],
        "title": _plain(f"{matrix.title(finding.category)} · {finding.workload}", _TITLE_LIMIT),
        "message": _plain(finding.message, _MESSAGE_LIMIT),
    }
    reason = finding.evidence.get("reason")
    if isinstance(reason, str) and reason:
        out["raw_details"] = _plain(reason, _MESSAGE_LIMIT)
    return out


def annotations(review: Review) -> list[dict[str, Any]]:
    """One per cause, at its line (the first of the workloads it was met in that has one in the
    repository), its effects said in the message; a finding with no cause, at its own line."""
    out = []
    for g in grouped(review):
        placed = next((a for a in map(annotation, g.leads) if a is not None), None)
        if placed is None:
            continue
        # The group's worst open finding; an acknowledged one fails nothing, so it is a notice.
        placed["annotation_level"] = _LEVELS.get(g.state, "notice")
        if len(g.workloads) > 1:
            placed["title"] = _plain(
                f"{matrix.title(g.leads[0].category)} · {', '.join(g.workloads)}", _TITLE_LIMIT
            )
        if g.effects:
            effects = "; ".join(
                f"{matrix.title(e.category)}"
                + (f" ({said})" if (said := matrix.figure(e)) else "")
                + f" in {e.workload}"
                for e in g.effects
            )
            placed["message"] = _plain(
                f"{placed['message']}\nWhat it likely caused: {effects}", _MESSAGE_LIMIT
            )
        out.append(placed)
    return out
