"""The edges of planning: look up what a decision needs through the API, then carry out its answer.

``lookup_context`` asks GitHub only what the event's decision will read (the changed files of a
same-repository PR; the commenter's permission and the PR's current head for a command).
``respond`` reacts, replies and sets the check: waiting for approval, or queued with the pinned SHA.
"""

from __future__ import annotations

import secrets

from perfcheck.bot.command import CommandError, has_permission, is_command, parse_command
from perfcheck.bot.events import Event, IssueCommentEvent, PullRequestEvent
from perfcheck.bot.gateway import GitHubPort
from perfcheck.bot.plan import PR_ACTIONS, Context, Plan
from perfcheck.bot.publish import Target, mark_check
from perfcheck.config import Config

WAITING_TITLE = "Waiting for approval"


def lookup_context(ev: Event, config: Config, port: GitHubPort) -> Context:
    if isinstance(ev, PullRequestEvent) and ev.action in PR_ACTIONS and not ev.pull_request.from_fork:
        files, complete = port.changed_files(ev.pull_request.number)
        return Context(config=config, changed_files=files, files_complete=complete)
    if isinstance(ev, IssueCommentEvent) and ev.action == "created" and ev.issue.pull_request is not None:
        if not is_command(ev.comment.body) or ev.comment.user.is_bot:
            return Context(config=config)
        permission = port.permission(ev.comment.user.login)
        try:
            command = parse_command(ev.comment.body)
        except CommandError:
            command = None  # refused with the usage; nothing more to look up
        if (
            command is None
            or command.verb == "help"
            or not has_permission(permission, config.github.command_permission)
        ):
            return Context(config=config, commenter_permission=permission)
        pull = port.pull(ev.issue.number)
        waiting = None
        if pull.from_fork:
            check = port.find_check_run(pull.head.sha, config.github.check_name)
            if check is not None and check.status == "queued" and check.title == WAITING_TITLE:
                waiting = check.started_at
        return Context(config=config, commenter_permission=permission, pull=pull, head_waiting_since=waiting)
    return Context(config=config)


def respond(
    port: GitHubPort,
    decided: Plan,
    config: Config,
    details_url: str | None = None,
    run_id: str | None = None,
) -> list[str]:
    """Carry out the plan's visible answer; returns what was done, for the log."""
    done: list[str] = []
    if decided.comment_id is not None and decided.reaction is not None and decided.pr_number is not None:
        port.react(decided.pr_number, decided.comment_id, decided.reaction)
        done.append(f"reacted {decided.reaction}")
    if decided.reply and decided.pr_number is not None:
        nonce = secrets.token_hex(8)
        port.create_comment(
            decided.pr_number, f"<!-- perfcheck:reply run={nonce} -->\n{decided.reply}", f"run={nonce}"
        )
        done.append("replied")
    if decided.head_sha:
        target = Target(decided.repository, decided.head_sha, decided.pr_number, details_url, run_id)
        if decided.awaiting_approval:
            mark_check(
                port,
                target,
                config.github,
                "queued",
                WAITING_TITLE,
                "This pull request comes from a fork, so its code does not run on the self-hosted "
                "runners until someone with write permission comments `/perfcheck`. That approves "
                f"this commit ({decided.head_sha[:7]}) only; a later push needs a new `/perfcheck`.",
            )
            done.append("check: waiting for approval")
        elif decided.run and decided.mode == "probe":
            mark_check(
                port,
                target,
                config.github,
                "queued",
                "Queued",
                f"Probes will run on base and head ({decided.head_sha[:7]}): {decided.reason}.",
            )
            done.append("check: queued")
    return done
