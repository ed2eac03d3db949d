"""Post a review to GitHub: the sticky comment, the check run and its annotations.

The decisions (which comment to edit, when to start a new one, how to split annotations) are
pure functions; ``publish_review`` and ``mark_check`` only carry them out through a GitHubPort,
passed in. Re-running a publish for the same commit updates what is there instead of adding to it.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from perfcheck.bot.checks import ANNOTATIONS_PER_REQUEST, SUMMARY_LIMIT, conclusion, title
from perfcheck.bot.checks import annotations as check_annotations
from perfcheck.bot.gateway import ExistingComment, GitHubPort, batched
from perfcheck.core import markdown
from perfcheck.core.matrix import Entry
from perfcheck.core.render import COMMENT_LIMIT, render_comment
from perfcheck.core.reports import render_check_summary
from perfcheck.measures import Verdict
from perfcheck.schema import Review
from perfcheck.settings import GitHubConfig

STATE_PREFIX = "<!-- perfcheck:state"
_STATE = re.compile(
    r"<!-- perfcheck:state verdict=(pass|fail|inconclusive) sha=([0-9a-f]{7,40}) run=([0-9a-f]{16}) -->"
)


@dataclass(frozen=True)
class Target:
    """Where a review goes; values from the trusted side (settings, API), never from the result file."""

    repository: str
    head_sha: str
    pr_number: int | None = None
    details_url: str | None = None  # the workflow run, where the full report is an artifact
    # The Actions run that planned this review. The trusted plan job stamps it on the queued check
    # as external_id; publish then requires that stamp, so an artifact from the run that executed PR
    # code cannot steer the review onto another commit.
    run_id: str | None = None


class PublishRefused(ValueError):
    """The claimed commit was never planned by the given run; nothing is posted."""


@dataclass(frozen=True)
class CommentState:
    verdict: Verdict
    sha: str
    run: str

    def line(self) -> str:
        return f"{STATE_PREFIX} verdict={self.verdict} sha={self.sha} run={self.run} -->"


def parse_state(body: str) -> CommentState | None:
    m = _STATE.search(body)
    return CommentState(m.group(1), m.group(2), m.group(3)) if m else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class CommentAction:
    kind: Literal["create", "edit", "none"]
    comment_id: int | None = None
    why: str = ""


def decide_comment(existing: list[ExistingComment], verdict: Verdict, body: str) -> CommentAction:
    """Edit the latest review comment in place, unless the verdict flipped: then a new one notifies."""
    latest = max(existing, key=lambda c: c.id, default=None)
    state = parse_state(latest.body) if latest else None
    if latest is None or state is None:
        return CommentAction("create", why="first review on this pull request")
    if state.verdict != verdict:
        return CommentAction("create", why=f"verdict changed from {state.verdict} to {verdict}")
    if _without_state(latest.body) == _without_state(body):
        return CommentAction("none", latest.id, "the review is unchanged")
    return CommentAction("edit", latest.id, f"same verdict ({verdict}): updated in place")


def _without_state(body: str) -> str:
    return _STATE.sub("", body)


def comment_body(
    review: Review,
    target: Target,
    run: str,
    template_dir: Path | None = None,
    matrix: dict[str, Entry] | None = None,
    noise: Sequence[str] = (),
) -> str:
    """``noise``: the footer's lines on the gate's A/A rates on this runner (render_comment)."""
    state = CommentState(review.verdict, target.head_sha, run).line()
    pointer = "The comment was cut to fit GitHub's limit; the full review is `result.json`" + (
        f" in the [workflow run's artifacts]({markdown.url(target.details_url)})."
        if target.details_url
        else "."
    )
    limit = COMMENT_LIMIT - len(state) - 1
    body = render_comment(review, template_dir, pointer, limit=limit, matrix=matrix, noise=noise)
    return f"{state}\n{body}"


def check_output(
    review: Review, template_dir: Path | None = None, matrix: dict[str, Entry] | None = None
) -> dict[str, Any]:
    summary = render_check_summary(review, template_dir, SUMMARY_LIMIT, matrix)
    return {"title": title(review), "summary": summary}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Outcome:
    comment: str
    comment_id: int | None
    check_run_id: int
    conclusion: str
    annotations: int


def _check_run(port: GitHubPort, target: Target, cfg: GitHubConfig, fields: dict[str, Any]) -> int:
    """This commit's open check run, updated; a new one when there is none or it already completed.

    A completed run is not reopened: GitHub appends annotations on every update, so a re-run would
    pile its annotations onto the old ones. A new run of the same name supersedes the old one, which
    is how a required check and the PR page treat re-runs.
    """
    existing = port.find_check_run(target.head_sha, cfg.check_name)
    if existing is not None and existing.status != "completed":
        # A later run takes the check over (e.g. a writer's approval of a fork's waiting check).
        stamp = (
            {"external_id": target.run_id} if target.run_id and target.run_id != existing.external_id else {}
        )
        port.update_check_run(existing.id, {**fields, **stamp})
        return existing.id
    return port.create_check_run(
        target.head_sha, cfg.check_name, target.run_id or secrets.token_hex(8), fields
    )


def verify_planned(port: GitHubPort, target: Target, cfg: GitHubConfig, expect_run: str) -> None:
    """Raise PublishRefused unless run ``expect_run`` queued this commit's check (see Target.run_id)."""
    existing = port.find_check_run(target.head_sha, cfg.check_name)
    if existing is None or existing.external_id != expect_run:
        found = f"its check comes from run {existing.external_id}" if existing else "it has no check"
        raise PublishRefused(
            f"{target.head_sha[:12]} was not planned by run {expect_run} ({found}); refusing to publish"
        )


def mark_check(
    port: GitHubPort,
    target: Target,
    cfg: GitHubConfig,
    status: Literal["queued", "in_progress"],
    heading: str,
    summary: str,
) -> int:
    """Set the check before results exist: queued (e.g. waiting for approval) or in progress."""
    fields: dict[str, Any] = {"status": status, "output": {"title": heading, "summary": summary}}
    if status == "in_progress":
        fields["started_at"] = _now()
    if target.details_url:
        fields["details_url"] = target.details_url
    return _check_run(port, target, cfg, fields)


def publish_review(
    port: GitHubPort,
    review: Review,
    target: Target,
    cfg: GitHubConfig,
    template_dir: Path | None = None,
    matrix: dict[str, Entry] | None = None,
    noise: Sequence[str] = (),
) -> Outcome:
    run = secrets.token_hex(8)
    comment, comment_id = "not posted: no open pull request for this commit", None
    if target.pr_number is not None:
        body = comment_body(review, target, run, template_dir, matrix, noise)
        action = decide_comment(port.comments_with(target.pr_number, STATE_PREFIX), review.verdict, body)
        if action.kind == "create":
            comment_id = port.create_comment(target.pr_number, body, dedupe_key=f"run={run}")
        elif action.kind == "edit":
            assert action.comment_id is not None
            port.edit_comment(target.pr_number, action.comment_id, body)
            comment_id = action.comment_id
        else:
            comment_id = action.comment_id
        comment = f"{action.kind if action.kind != 'none' else 'left as is'}: {action.why}"

    output = check_output(review, template_dir, matrix)
    notes = check_annotations(review)
    started: dict[str, Any] = {"status": "in_progress", "started_at": _now()}
    if target.details_url:
        started["details_url"] = target.details_url
    check_id = _check_run(port, target, cfg, started)
    # Annotations go in while the run is in progress; the conclusion comes last, with the final
    # batch, so a check never shows as complete while its annotations are still arriving.
    batches = list(batched(notes, ANNOTATIONS_PER_REQUEST)) or [[]]
    sent = 0
    for batch in batches[:-1]:
        sent += len(batch)
        port.update_check_run(
            check_id, {"output": {**output, "annotations": list(batch)}}, annotations_after=sent
        )
    final = list(batches[-1])
    done = conclusion(review.verdict, cfg)
    port.update_check_run(
        check_id,
        {
            "status": "completed",
            "conclusion": done,
            "completed_at": _now(),
            "output": {**output, "annotations": final},
        },
        annotations_after=sent + len(final) if final else None,
    )
    return Outcome(comment, comment_id, check_id, done, len(notes))
