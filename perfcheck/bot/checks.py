"""What the check run says: conclusion, title, summary and annotations. Pure; torch-free.

Annotations are plain text on GitHub (no Markdown), but they still come from PR code: control
characters are dropped and every field is cut to GitHub's size limits.
"""

# No `from __future__ import annotations`: it would bind the name `annotations`, which this module
# defines as a function. Every annotation here is valid at runtime on Python 3.10+.
import re
from typing import Any, Literal

from perfcheck.core import matrix
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
    return [a for a in (annotation(f) for f in review.findings) if a is not None]
