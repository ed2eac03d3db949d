"""`perfcheck publish`, as one function: settings built once at the edge from the flags and the
environment, the GitHub port passed in, every refusal a message and an exit code.

The result file and the plan file come from artifacts that a job running PR code could have
written, so they are read as untrusted: the commit they name must be the one the trusted side
(--sha, the plan job's check, the API) says, and the PR must still be at it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from perfcheck.bot import acks
from perfcheck.bot.gateway import GitHubError, GitHubPort
from perfcheck.bot.plan import Plan
from perfcheck.bot.publish import (
    PublishRefused,
    Target,
    comment_body,
    mark_check,
    publish_review,
    verify_planned,
)
from perfcheck.bot.settings import GitHubSettings
from perfcheck.config import Config, ConfigError, load_config
from perfcheck.core.bisect import outside_pull
from perfcheck.core.matrix import merged
from perfcheck.core.render import headline
from perfcheck.core.reports import render_job_summary
from perfcheck.schema import ContractError, Review, load_model, load_review

EXIT_PUBLISHED, EXIT_GITHUB, EXIT_BAD_INPUT = 0, 1, 2
_SHA = re.compile(r"[0-9a-f]{7,40}")

Status = Literal["queued", "in_progress", "completed"]
Log = Callable[[str], None]


class PublishInputError(ValueError):
    """A publish that cannot start; the message is meant for the user as it stands."""


@dataclass(frozen=True)
class PublishFlags:
    """The command line, as given."""

    report: Path
    sha: str | None = None
    plan_file: Path | None = None
    pr: int | None = None
    repo: str | None = None
    config: Path | None = None
    templates: Path | None = None
    status: Status = "completed"
    summary: str | None = None
    planned_by: str | None = None
    no_comment: bool = False
    dry_run: bool = False


@dataclass(frozen=True)
class PublishSettings:
    """Everything one publish needs, checked: the commit, where it goes, the review (None while
    the check is only queued or in progress) and the trusted config."""

    repository: str
    sha: str
    pr_number: int | None
    status: Status
    review: Review | None
    config: Config
    templates: Path | None
    summary: str | None
    planned_by: str | None
    no_comment: bool
    dry_run: bool
    run_url: str | None
    step_summary: Path | None


def _planned(path: Path) -> Plan:
    try:
        return load_model(Plan, path.read_bytes(), str(path))
    except OSError as err:
        raise PublishInputError(f"{path}: cannot read it ({err.strerror})") from None
    except ContractError as err:
        raise PublishInputError(str(err)) from None


def revision_refusal(review: Review, sha: str) -> str | None:
    """Why the result file may not be published for ``sha``, or None. It comes from the job that ran
    PR code: it may not pick the commit it reports on, nor leave the commit out (an empty or
    one-digit revision would "match" anything)."""
    rev = (review.head.revision or "").lower()
    if _SHA.fullmatch(rev) and (rev.startswith(sha) or sha.startswith(rev)):
        return None
    if _SHA.fullmatch(rev):
        return f"it reviews {rev[:12]}, not --sha {sha[:12]}"
    if rev:
        return "its head revision is not a commit SHA"
    return "it names no head commit (was the head a git checkout?)"


def settings_from(flags: PublishFlags, env: GitHubSettings, cwd: Path) -> PublishSettings:
    """Check the flags against each other and the environment, read the config and the result;
    raises PublishInputError saying what is wrong."""
    sha, pr = flags.sha, flags.pr
    if flags.plan_file is not None:
        # Carried through artifacts, which any job of the run can write: only for what
        # --planned-by and the PR check then verify.
        planned = _planned(flags.plan_file)
        sha, pr = sha or planned.head_sha, pr or planned.pr_number
    if not sha:
        raise PublishInputError("publish needs --sha (or --plan-file with a head_sha)")
    repository = flags.repo or env.repository
    if not repository or repository.count("/") != 1:
        raise PublishInputError("publish needs --repo OWNER/NAME (or GITHUB_REPOSITORY)")
    if not flags.dry_run and not env.token:
        raise PublishInputError("publish needs a token: set GITHUB_TOKEN (or use --dry-run)")
    try:
        config = load_config(flags.config, cwd)
        review = load_review(flags.report / "result.json") if flags.status == "completed" else None
    except (ConfigError, ContractError) as err:
        raise PublishInputError(str(err)) from None
    if not _SHA.fullmatch(sha.lower()):
        raise PublishInputError(f"--sha: expected 7 to 40 hex digits, got {sha!r}")
    refusal = revision_refusal(review, sha.lower()) if review is not None else None
    if refusal is not None:
        raise PublishInputError(f"{flags.report / 'result.json'}: {refusal}; refusing to publish it")
    return PublishSettings(
        repository=repository,
        sha=sha.lower(),
        pr_number=pr,
        status=flags.status,
        review=review,
        config=config,
        templates=flags.templates,
        summary=flags.summary,
        planned_by=flags.planned_by,
        no_comment=flags.no_comment,
        dry_run=flags.dry_run,
        run_url=env.run_url(repository),
        step_summary=env.step_summary,
    )


def _where(port: GitHubPort, s: PublishSettings, log: Log) -> Target:
    """The target, with the PR the API says is at the commit (a PR number from an artifact is a
    claim; the check run is posted either way)."""
    target = Target(s.repository, s.sha, s.pr_number, s.run_url, s.planned_by)
    if s.planned_by and not s.dry_run:
        verify_planned(port, target, s.config.github, s.planned_by)
    if s.no_comment:
        return replace(target, pr_number=None)
    if target.pr_number is not None and not s.dry_run and port.pull(target.pr_number).head.sha != s.sha:
        log(f"#{target.pr_number} is not at {s.sha[:7]} (any more): no comment")
        return replace(target, pr_number=None)
    if target.pr_number is None:
        found = port.pulls_for_commit(s.sha)
        return replace(target, pr_number=found[0] if found else None)
    return target


def _acknowledged(port: GitHubPort, review: Review, target: Target, config: Config) -> Review:
    """The review with its acks applied: perfcheck.yml's, and `/perfcheck ack` from people with the
    command permission, given for this head commit."""
    found = acks.from_config(config.acks)
    if target.pr_number is not None:
        found += acks.from_comments(
            port.commands(target.pr_number, "/perfcheck ack"),
            port.permission,
            config.github.command_permission,
            target.head_sha,
            port.first_check_started(target.head_sha, config.github.check_name),
        )
    review = acks.apply(review, found)
    return review.model_copy(update={"summary": headline(review)})


def _bisect_checked(port: GitHubPort, review: Review, target: Target, log: Log) -> Review:
    """The review, its bisect section left out (and the log saying why) unless the range it
    searched is the PR's own history as the API lists it: the section was written by the job
    that ran the PR's code, which could otherwise blame a base-branch commit, or one it made up.
    (report checked it against its own range already.)"""
    doc = review.bisect
    if doc is None:
        return review
    if target.pr_number is None:
        why = ["no pull request to check its commits against"]
    else:
        commits, complete = port.pull_commits(target.pr_number)
        why = outside_pull(doc, commits, complete)
        if not why:
            return review
    more = f" and {len(why) - 3} more" if len(why) > 3 else ""
    log(f"bisect section left out: {'; '.join(why[:3])}{more}")
    return review.model_copy(update={"bisect": None})


def _noise(config: Config, review: Review, log: Log) -> list[str]:
    """The comment's lines on the gate's A/A rates on the review's runner class, as `report` gives
    them: from the history store where history is enabled and the job has one (the A/A workflow's,
    restored read-only); none otherwise."""
    if not config.history.enabled:
        return []
    from perfcheck.core.history import noise_footer

    return noise_footer(Path(config.history.path), review, lambda line: log(f"warning: {line}"))


def publish(s: PublishSettings, port: GitHubPort, log: Log, show: Log) -> int:
    """Post the check run (and the PR comment) for ``s``; ``log`` says what happened, ``show``
    prints a review GitHub would not take, so that it is not lost. Returns the exit code."""
    matrix = merged(s.config.matrix)
    if s.review is not None and s.step_summary is not None and not s.dry_run:
        # Written before any API call: the review reaches the run's page even if GitHub refuses it.
        with s.step_summary.open("a", encoding="utf-8") as f:
            f.write(render_job_summary(s.review, s.templates, matrix=matrix) + "\n")
    target = Target(s.repository, s.sha, s.pr_number, s.run_url, s.planned_by)
    review = s.review
    noise: list[str] = []
    try:
        target = _where(port, s, log)
        if review is None:  # --status queued or in_progress: no result yet
            status: Literal["queued", "in_progress"] = (
                "in_progress" if s.status == "in_progress" else "queued"
            )
            heading = "In progress" if status == "in_progress" else "Queued"
            mark_check(port, target, s.config.github, status, heading, s.summary or heading)
            log(f"check {s.config.github.check_name!r} on {s.sha[:7]}: {status}")
            return EXIT_PUBLISHED
        review = _acknowledged(port, _bisect_checked(port, review, target, log), target, s.config)
        noise = _noise(s.config, review, log)
        outcome = publish_review(port, review, target, s.config.github, s.templates, matrix, noise)
    except PublishRefused as err:
        log(str(err))
        return EXIT_BAD_INPUT
    except GitHubError as err:
        log(f"GitHub: {err}")
        if review is not None:
            log("the review was not posted; here it is, so it is not lost:")
            show(comment_body(review, target, "0" * 16, s.templates, matrix, noise))
        return EXIT_GITHUB
    plural = "s" if outcome.annotations != 1 else ""
    log(
        f"comment {outcome.comment}; check run {outcome.check_run_id}: {outcome.conclusion}, "
        f"{outcome.annotations} annotation{plural}"
    )
    return EXIT_PUBLISHED
