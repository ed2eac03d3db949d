"""Decide what a GitHub event asks of perfcheck: run or not, why, and on which commits.

Pure functions, one per event, behind one router. What needs the API (changed files, the
commenter's permission, the PR's head commit right now) is looked up at the edge and passed in
as a Context: a decision never trusts `author_association` or anything else the event claims
about permissions.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from perfcheck.bot.acks import Ack
from perfcheck.bot.command import Command, CommandError, has_permission, is_command, parse_command, usage
from perfcheck.bot.events import (
    CheckRunEvent,
    Event,
    IssueCommentEvent,
    MergeGroupEvent,
    PullRequest,
    PullRequestEvent,
    RepositoryDispatchEvent,
    WorkflowDispatchEvent,
    WorkflowRunEvent,
    parse_event,
)
from perfcheck.bot.timestamps import instant
from perfcheck.config import Config
from perfcheck.core import markdown

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

# Collaborator permissions, weakest first; the API's `role_name` adds triage and maintain.
PR_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review", "labeled")
BisectMode = Literal["auto", "always", "never"]
BISECT_MODES: tuple[BisectMode, ...] = ("auto", "always", "never")


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run: bool
    reason: str
    event: str
    action: str | None = None
    mode: Literal["probe", "publish"] = "probe"
    repository: str
    pr_number: int | None = None
    comment_id: int | None = None  # the command's comment, for the reaction
    head_sha: str | None = None
    base_sha: str | None = None
    workloads: list[str] = []
    probes: list[str] = []
    device: str | None = None
    awaiting_approval: bool = False
    # Whether the probe job may bisect a failing review along the PR's commits (probe --bisect):
    # auto only where every commit was pushed by someone with write access (not a fork), always
    # when a writer asked with `/perfcheck bisect` (which approves the PR's commits to the head).
    bisect: BisectMode = "never"
    ack: Ack | None = None
    reply: str | None = None
    reaction: Literal["eyes", "confused"] | None = None


class _PullCommits(TypedDict):
    """The pull request and the commits a plan for it names."""

    pr_number: int
    head_sha: str
    base_sha: str


@dataclass(frozen=True)
class Context:
    """What the edge looked up through the API before deciding."""

    config: Config = field(default_factory=Config)
    changed_files: tuple[str, ...] | None = None  # None: not looked up
    files_complete: bool = True  # False when the PR has more files than the API lists
    commenter_permission: str | None = None  # from the collaborator-permission endpoint
    pull: PullRequest | None = None  # the PR as the API shows it now (comments carry no SHAs)
    # A fork's head: when perfcheck's own "waiting for approval" check on it started (GitHub's
    # clock), which says whether that commit existed before a command was posted.
    head_waiting_since: str | None = None

    @property
    def required_permission(self) -> str:
        return self.config.github.command_permission

    @property
    def rerun_label(self) -> str:
        return self.config.github.rerun_label


@cache
def _spec(globs: tuple[str, ...]) -> GitIgnoreSpec:
    """The config's `paths` as one gitignore spec (pathspec's GitIgnoreSpec): each changed file is
    judged by the last pattern that matches it, so a `!` pattern leaves out what an earlier one
    named. pathspec is imported here, by the one decision that matches files."""
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(globs)


def matching_files(files: tuple[str, ...], globs: list[str]) -> list[str]:
    """The changed files (paths from the repository root) that `paths` names, judged one path at a
    time (README, "Configuration", says where that differs from git's walk of a tree)."""
    spec = _spec(tuple(globs))
    return [f for f in files if spec.match_file(f)]


def _skip(event: str, action: str | None, repo: str, reason: str, **extra: Any) -> Plan:
    return Plan(run=False, reason=reason, event=event, action=action, repository=repo, **extra)


def plan_pull_request(ev: PullRequestEvent, ctx: Context) -> Plan:
    pr, repo = ev.pull_request, ev.repository.full_name
    where: _PullCommits = {"pr_number": pr.number, "head_sha": pr.head.sha, "base_sha": pr.base.sha}
    if ev.action not in PR_ACTIONS:
        return _skip("pull_request", ev.action, repo, f"`{ev.action}` does not change what would be reviewed")
    if ev.action == "labeled" and (ev.label is None or ev.label.name != ctx.rerun_label):
        return _skip("pull_request", ev.action, repo, f"only the `{ctx.rerun_label}` label asks for a review")
    if pr.state != "open":
        return _skip("pull_request", ev.action, repo, "the pull request is not open", **where)
    if pr.draft:
        return _skip("pull_request", ev.action, repo, "draft: reviewed once marked ready for review", **where)
    if pr.from_fork:
        return _skip(
            "pull_request",
            ev.action,
            repo,
            "from a fork: its code runs on self-hosted runners only after someone with write permission "
            f"comments `/perfcheck`, which approves that commit ({pr.head.sha[:7]}) alone",
            awaiting_approval=True,
            **where,
        )
    # A PR with more files than the API lists is reviewed, never skipped on a partial list.
    if (
        ctx.changed_files is not None
        and ctx.files_complete
        and not matching_files(ctx.changed_files, ctx.config.paths)
    ):
        return _skip(
            "pull_request",
            ev.action,
            repo,
            f"none of the {len(ctx.changed_files)} changed files matches `paths`",
            **where,
        )
    return Plan(
        run=True,
        reason=f"pull request {ev.action}",
        event="pull_request",
        action=ev.action,
        repository=repo,
        bisect="auto",
        **where,
    )


def _refuse(ev: IssueCommentEvent, reason: str, reply: str) -> Plan:
    return _skip(
        "issue_comment",
        ev.action,
        ev.repository.full_name,
        reason,
        pr_number=ev.issue.number,
        comment_id=ev.comment.id,
        reply=reply,
        reaction="confused",
    )


def _accepted(ev: IssueCommentEvent, cmd: Command, ctx: Context) -> Plan:
    repo, who = ev.repository.full_name, ev.comment.user.login
    pull = ctx.pull
    sha = pull.head.sha if pull else None
    common: dict[str, Any] = {
        "event": "issue_comment",
        "action": ev.action,
        "repository": repo,
        "pr_number": ev.issue.number,
        "comment_id": ev.comment.id,
        "reaction": "eyes",
    }
    if cmd.verb == "help":
        return Plan(run=False, reason="help", reply=usage(), **common)
    if cmd.verb == "ack":
        ack = Ack(
            category=cmd.category or "",
            workload=cmd.workload,
            reason=cmd.reason or "",
            by=who,
            sha=sha,
            at=ev.comment.created_at,
        )
        return Plan(run=False, reason=f"{who} acknowledged {cmd.category}", ack=ack, **common)
    if pull is None:
        return Plan(
            run=False, reason="the pull request was not looked up, so there is no commit to pin", **common
        )
    if pull.state != "open":
        return Plan(run=False, reason="the pull request is not open", reply=CLOSED_REPLY, **common)
    refused = _unseen_head(pull, cmd, ev.comment.created_at, ctx.head_waiting_since)
    if refused is not None:
        return Plan(run=False, reason=refused[0], reply=refused[1], **{**common, "reaction": "confused"})
    asked = "/perfcheck bisect" if cmd.verb == "bisect" else "/perfcheck"
    return Plan(
        run=True,
        reason=f"{asked} by {who}, pinned to {pull.head.sha[:7]}",
        head_sha=pull.head.sha,
        base_sha=pull.base.sha,
        workloads=list(cmd.workloads),
        probes=list(cmd.probes),
        device=cmd.device,
        bisect="always" if cmd.verb == "bisect" else "never" if pull.from_fork else "auto",
        **common,
    )


# A malformed command's error, quoted back to a writer: at most this much of it.
MAX_ECHO = 500
CLOSED_REPLY = "This pull request is closed, so there is nothing to review; reopen it first."


def _unseen_head(
    pull: PullRequest, cmd: Command, posted_at: str | None, waiting_since: str | None
) -> tuple[str, str] | None:
    """Why a fork's current head cannot be approved by this command, or None when it can.

    A writer approves the commit they saw. That is the one named with ``--sha``, or, for a bare
    `/perfcheck`, the head if it existed before the comment was posted: perfcheck's own waiting
    check on it started earlier, by GitHub's clock. A commit pushed after the comment (or one
    perfcheck has not seen yet) is never approved by it.
    """
    head = pull.head.sha
    if cmd.sha is not None:
        if head.startswith(cmd.sha.lower()):
            return None
        return (
            f"--sha {cmd.sha} is not the head ({head[:7]})",
            f"`--sha {cmd.sha}` is not this pull request's head commit, which is now `{head[:7]}`. "
            f"Nothing was approved; to approve the head, comment `/perfcheck run --sha {head[:7]}`.",
        )
    if not pull.from_fork:
        return None
    posted, since = instant(posted_at), instant(waiting_since)
    if posted is not None and since is not None and since < posted:
        return None
    return (
        f"the fork's head {head[:7]} was not there before the command was posted",
        f"This pull request's head is now `{head[:7]}`, which perfcheck had not seen before your "
        "comment (it was pushed since, or is still being planned). Nothing was approved: to approve "
        f"this commit, comment `/perfcheck run --sha {head[:7]}`.",
    )


def plan_issue_comment(ev: IssueCommentEvent, ctx: Context) -> Plan:
    repo = ev.repository.full_name
    if ev.action != "created":
        return _skip(
            "issue_comment", ev.action, repo, "only new comments are commands (edits could rewrite history)"
        )
    if ev.issue.pull_request is None:
        return _skip("issue_comment", ev.action, repo, "a comment on an issue, not a pull request")
    if ev.comment.user.is_bot:
        return _skip("issue_comment", ev.action, repo, "comments by bots are not commands")
    if not is_command(ev.comment.body):
        return _skip("issue_comment", ev.action, repo, "not a /perfcheck command")
    # Permission first: someone who may not run commands gets a reaction and nothing that repeats
    # their text, however the command is written.
    if not has_permission(ctx.commenter_permission, ctx.required_permission):
        return _skip(
            "issue_comment",
            ev.action,
            repo,
            f"{ev.comment.user.login} has {ctx.commenter_permission or 'no known'} permission; "
            f"commands need {ctx.required_permission}",
            pr_number=ev.issue.number,
            comment_id=ev.comment.id,
            reaction="confused",
        )
    try:
        cmd = parse_command(ev.comment.body)
    except CommandError as err:
        return _refuse(ev, "malformed command", f"{markdown.block(str(err)[:MAX_ECHO])}\n\n{usage()}")
    assert cmd is not None
    return _accepted(ev, cmd, ctx)


def plan_check_run(ev: CheckRunEvent, ctx: Context) -> Plan:
    repo, run = ev.repository.full_name, ev.check_run
    if ev.action != "rerequested":
        return _skip("check_run", ev.action, repo, f"`{ev.action}` is not a request to re-run")
    pr = run.pull_requests[0] if run.pull_requests else None
    return Plan(
        run=True,
        reason=f"re-run requested by {ev.sender.login}",
        event="check_run",
        action=ev.action,
        repository=repo,
        pr_number=pr.number if pr else None,
        head_sha=run.head_sha,
        base_sha=pr.base.sha if pr else None,
    )


def _dispatch_plan(
    event: str, action: str | None, repo: str, sha: str | None, inputs: dict[str, Any]
) -> Plan:
    def words(key: str) -> list[str]:
        value = inputs.get(key) or ""
        return [w.strip() for w in str(value).split(",") if w.strip()]

    pr = str(inputs.get("pr") or inputs.get("pr_number") or "")
    base = str(inputs.get("base_sha") or "")
    # Whoever dispatches says whether the PR's commits may be bisected; unsaid, they may not.
    mode = inputs.get("bisect")
    return Plan(
        run=True,
        reason=f"{event} requested",
        event=event,
        action=action,
        repository=repo,
        head_sha=str(inputs.get("sha") or sha or "") or None,
        pr_number=int(pr) if pr.isdigit() else None,
        workloads=words("workloads"),
        probes=words("probes"),
        device=str(inputs["device"]) if inputs.get("device") in ("cpu", "cuda") else None,
        base_sha=base if re.fullmatch(r"[0-9a-f]{40}", base) else None,
        bisect=mode if mode in BISECT_MODES else "never",
    )


def plan_workflow_dispatch(ev: WorkflowDispatchEvent, ctx: Context) -> Plan:
    return _dispatch_plan("workflow_dispatch", None, ev.repository.full_name, None, ev.inputs or {})


def plan_repository_dispatch(ev: RepositoryDispatchEvent, ctx: Context) -> Plan:
    return _dispatch_plan(
        "repository_dispatch", ev.action, ev.repository.full_name, None, ev.client_payload or {}
    )


def plan_workflow_run(ev: WorkflowRunEvent, ctx: Context) -> Plan:
    repo, run = ev.repository.full_name, ev.workflow_run
    if ev.action != "completed":
        return _skip(
            "workflow_run", ev.action, repo, "results are published when the probe workflow completes"
        )
    pr = run.pull_requests[0] if run.pull_requests else None
    return Plan(
        run=True,
        mode="publish",
        reason=f"publish the results of workflow run {run.id} ({run.conclusion})",
        event="workflow_run",
        action=ev.action,
        repository=repo,
        head_sha=run.head_sha,
        pr_number=pr.number if pr else None,
        base_sha=pr.base.sha if pr else None,
    )


def plan_merge_group(ev: MergeGroupEvent, ctx: Context) -> Plan:
    repo, group = ev.repository.full_name, ev.merge_group
    if ev.action != "checks_requested":
        return _skip("merge_group", ev.action, repo, f"`{ev.action}` needs no check")
    # A required check must report on merge-queue commits too, or the queue stalls.
    return Plan(
        run=True,
        reason=f"merge queue checks for {group.head_ref}",
        event="merge_group",
        action=ev.action,
        repository=repo,
        head_sha=group.head_sha,
        base_sha=group.base_sha,
    )


ROUTER: dict[str, Callable[[Any, Context], Plan]] = {
    "pull_request": plan_pull_request,
    "pull_request_target": plan_pull_request,
    "issue_comment": plan_issue_comment,
    "check_run": plan_check_run,
    "workflow_dispatch": plan_workflow_dispatch,
    "repository_dispatch": plan_repository_dispatch,
    "workflow_run": plan_workflow_run,
    "merge_group": plan_merge_group,
}


def decide(event_name: str, ev: Event, ctx: Context) -> Plan:
    """The decision for an event already parsed (bot.events.parse_event), which is parsed once:
    the lookups the decision needs (respond.lookup_context) read the same object."""
    return ROUTER[event_name](ev, ctx)


def plan(event_name: str, payload: str | bytes | dict[str, Any], ctx: Context) -> Plan:
    """Validate the payload (raises PayloadError) and decide."""
    return decide(event_name, parse_event(event_name, payload), ctx)
