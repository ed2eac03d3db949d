"""The one module that talks to GitHub, over PyGithub.

Every call goes through ``_call``: a 5xx, a rate limit or a dropped connection is retried with
the waits ``retry.delay_for`` decides (``Retry-After`` honoured). A request that creates something
(a comment, a check run, a batch of annotations) is not idempotent, and a dropped connection does
not say whether GitHub acted on it; so before such a request is sent again, the gateway looks
whether the first one landed (``reconcile``), and never posts twice.

What the rest of the bot needs is the ``GitHubPort`` protocol; ``DryRunGitHub`` implements it by
printing the calls instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO, TypeVar

from perfcheck.bot.acks import PostedComment
from perfcheck.bot.command import PERMISSIONS
from perfcheck.bot.events import PullRequest
from perfcheck.bot.retry import Failure, RetryPolicy, delay_for
from perfcheck.core.bisect import KnownCommit, git_subject

T = TypeVar("T")


class GitHubError(RuntimeError):
    """A GitHub call failed for good (after retries, or with an answer that retrying cannot fix)."""

    def __init__(self, what: str, failure: Failure) -> None:
        status = f"HTTP {failure.status}" if failure.status else "no answer"
        super().__init__(f"{what}: {status}{': ' + failure.message if failure.message else ''}")
        self.failure = failure


@dataclass(frozen=True)
class ExistingComment:
    id: int
    body: str
    author: str


@dataclass(frozen=True)
class CheckRunRef:
    id: int
    status: str
    external_id: str | None
    started_at: str | None = None  # ISO 8601, as GitHub stamped it
    title: str | None = None


class GitHubPort(Protocol):
    """What the bot asks of GitHub; the gateway and the dry run implement it."""

    def pull(self, number: int) -> PullRequest: ...
    def changed_files(self, number: int) -> tuple[tuple[str, ...], bool]: ...
    def pull_commits(self, number: int) -> tuple[dict[str, KnownCommit], bool]: ...
    def permission(self, login: str) -> str: ...
    def pulls_for_commit(self, sha: str) -> list[int]: ...
    def react(self, number: int, comment_id: int, content: str) -> None: ...
    def comments_with(self, number: int, marker: str) -> list[ExistingComment]: ...
    def commands(self, number: int, prefix: str) -> list[PostedComment]: ...
    def create_comment(self, number: int, body: str, dedupe_key: str) -> int: ...
    def edit_comment(self, number: int, comment_id: int, body: str) -> None: ...
    def find_check_run(self, sha: str, name: str) -> CheckRunRef | None: ...
    def first_check_started(self, sha: str, name: str) -> str | None: ...
    def create_check_run(self, sha: str, name: str, external_id: str, fields: dict[str, Any]) -> int: ...
    def update_check_run(
        self, check_run_id: int, fields: dict[str, Any], annotations_after: int | None = None
    ) -> None: ...
    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None: ...


def _failure(err: BaseException) -> Failure | None:
    """The HTTP failure behind a PyGithub/requests exception; None for anything else (a bug: re-raise)."""
    import requests
    from github import GithubException

    if isinstance(err, GithubException):
        data = err.data if isinstance(err.data, dict) else {}
        return Failure(err.status, dict(err.headers or {}), str(data.get("message") or ""))
    if isinstance(err, requests.RequestException):
        return Failure(None, {}, type(err).__name__)
    return None


@dataclass
class GitHubGateway:
    """GitHubPort over a PyGithub client; ``sleep`` and ``clock`` are passed in so tests need not wait."""

    client: Any  # github.Github
    repository: str
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time
    log: TextIO = field(default_factory=lambda: sys.stderr)
    _repo: Any = None

    @property
    def repo(self) -> Any:
        if self._repo is None:
            self._repo = self._call("look up the repository", lambda: self.client.get_repo(self.repository))
        return self._repo

    def _call(self, what: str, fn: Callable[[], T], reconcile: Callable[[], T | None] | None = None) -> T:
        attempt, uncertain = 1, False
        while True:
            if uncertain and reconcile is not None:
                landed = reconcile()
                if landed is not None:
                    print(f"perfcheck: {what}: the earlier attempt had landed; not sent again", file=self.log)
                    return landed
            try:
                return fn()
            except Exception as err:
                failure = _failure(err)
                if failure is None:
                    raise
                wait = delay_for(failure, attempt, self.policy, self.clock())
                if wait is None:
                    raise GitHubError(what, failure) from err
                # No answer, or a 5xx: GitHub may have acted on the request anyway.
                uncertain = failure.status is None or failure.status >= 500
                print(
                    f"perfcheck: {what}: {failure.status or 'no answer'}; retry {attempt} in {wait:.0f} s",
                    file=self.log,
                )
                self.sleep(wait)
                attempt += 1

    # -- reads ---------------------------------------------------------------------------------

    def pull(self, number: int) -> PullRequest:
        raw = self._call(f"read pull request #{number}", lambda: self.repo.get_pull(number).raw_data)
        return PullRequest.model_validate(raw)

    def pull_commits(self, number: int) -> tuple[dict[str, KnownCommit], bool]:
        """The PR's commits as the API lists them, by SHA, and whether that list is the whole PR."""

        def fetch() -> tuple[dict[str, KnownCommit], bool]:
            pull = self.repo.get_pull(number)
            commits = {
                c.sha: KnownCommit(
                    subject=git_subject(c.commit.message or ""),
                    author=c.commit.author.name if c.commit.author is not None else "",
                    first_parent=c.parents[0].sha if c.parents else None,
                )
                for c in pull.get_commits()
            }
            # The endpoint lists at most 250 commits: a longer PR's list is partial.
            return commits, len(commits) >= pull.commits

        return self._call(f"list the commits of pull request #{number}", fetch)

    def changed_files(self, number: int) -> tuple[tuple[str, ...], bool]:
        """The PR's files as the API lists them, and whether that list is the whole PR."""

        def fetch() -> tuple[tuple[str, ...], bool]:
            pull = self.repo.get_pull(number)
            names = tuple(f.filename for f in pull.get_files())
            # The files endpoint lists at most 3000 files: a longer PR's list is partial, never "no match".
            return names, len(names) >= pull.changed_files

        return self._call(f"list the files of #{number}", fetch)

    def permission(self, login: str) -> str:
        """The fine-grained role (admin, maintain, write, triage, read) or ``none``."""

        def fetch() -> str:
            role = self.repo.get_collaborator_role_name(login)
            # An organisation's custom role has its own name; its base permission is the legacy field.
            return role if role in PERMISSIONS else self.repo.get_collaborator_permission(login)

        try:
            return self._call(f"read {login}'s permission", fetch)
        except GitHubError as err:
            if err.failure.status == 404:  # not a collaborator, or not a user at all
                return "none"
            raise

    def pulls_for_commit(self, sha: str) -> list[int]:
        def fetch() -> list[int]:
            return [p.number for p in self.repo.get_commit(sha).get_pulls() if p.state == "open"]

        return self._call(f"find the pull requests of {sha[:7]}", fetch)

    def comments_with(self, number: int, marker: str) -> list[ExistingComment]:
        def fetch() -> list[ExistingComment]:
            return [
                ExistingComment(c.id, c.body, c.user.login)
                for c in self.repo.get_issue(number).get_comments()
                if marker in (c.body or "") and c.user.type == "Bot"
            ]

        return self._call(f"read the comments of #{number}", fetch)

    def commands(self, number: int, prefix: str) -> list[PostedComment]:
        """People's comments whose first line starts with ``prefix`` (e.g. `/perfcheck ack`), oldest first."""

        def fetch() -> list[PostedComment]:
            return [
                PostedComment(c.user.login, c.created_at.isoformat() if c.created_at else None, c.body or "")
                for c in self.repo.get_issue(number).get_comments()
                if (c.body or "").lstrip().startswith(prefix) and c.user.type != "Bot"
            ]

        return self._call(f"read the commands on #{number}", fetch)

    def find_check_run(self, sha: str, name: str) -> CheckRunRef | None:
        def fetch() -> CheckRunRef | None:
            runs = list(self.repo.get_commit(sha).get_check_runs(check_name=name))
            latest = max(runs, key=lambda r: r.id, default=None)
            if latest is None:
                return None
            started = latest.started_at.isoformat() if latest.started_at else None
            title = latest.output.title if latest.output is not None else None
            return CheckRunRef(latest.id, latest.status, latest.external_id, started, title)

        return self._call(f"find check run {name!r} on {sha[:7]}", fetch)

    def first_check_started(self, sha: str, name: str) -> str | None:
        """When the first check run of this name on this commit started: when perfcheck first saw it."""

        def fetch() -> str | None:
            starts = [r.started_at for r in self.repo.get_commit(sha).get_check_runs(check_name=name)]
            known = [s for s in starts if s is not None]
            return min(known).isoformat() if known else None

        return self._call(f"read when {sha[:7]} was first checked", fetch)

    # -- writes --------------------------------------------------------------------------------

    def react(self, number: int, comment_id: int, content: str) -> None:
        # Reacting twice with the same content is harmless: GitHub answers 200 with the first one.
        self._call(
            f"react {content} to comment {comment_id}",
            lambda: self.repo.get_issue(number).get_comment(comment_id).create_reaction(content),
        )

    def create_comment(self, number: int, body: str, dedupe_key: str) -> int:
        def landed() -> int | None:
            found = [c for c in self.comments_with(number, dedupe_key)]
            return found[-1].id if found else None

        return self._call(
            f"comment on #{number}",
            lambda: self.repo.get_issue(number).create_comment(body).id,
            reconcile=landed,
        )

    def edit_comment(self, number: int, comment_id: int, body: str) -> None:
        self._call(
            f"edit comment {comment_id}",
            lambda: self.repo.get_issue(number).get_comment(comment_id).edit(body),
        )

    def create_check_run(self, sha: str, name: str, external_id: str, fields: dict[str, Any]) -> int:
        def landed() -> int | None:
            ref = self.find_check_run(sha, name)
            return ref.id if ref and ref.external_id == external_id else None

        return self._call(
            f"create check run {name!r}",
            lambda: (
                self.repo.create_check_run(
                    name=name, head_sha=sha, external_id=external_id, **_pygithub_fields(fields)
                ).id
            ),
            reconcile=landed,
        )

    def update_check_run(
        self, check_run_id: int, fields: dict[str, Any], annotations_after: int | None = None
    ) -> None:
        """PATCH a check run; ``annotations_after``: how many it has once this batch is in."""

        def landed() -> bool | None:
            if annotations_after is None:
                return None  # no annotations in this request: sending it again is harmless
            have = self._call(
                "count annotations",
                lambda: self.repo.get_check_run(check_run_id).get_annotations().totalCount,
            )
            return True if have >= annotations_after else None

        self._call(
            f"update check run {check_run_id}",
            lambda: self.repo.get_check_run(check_run_id).edit(**_pygithub_fields(fields)) or True,
            reconcile=landed,
        )

    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        self._call(
            f"dispatch {workflow}",
            lambda: self.repo.get_workflow(workflow).create_dispatch(ref, inputs, throw=True),
        )


def _pygithub_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """PyGithub wants datetimes for the time fields; the bot passes ISO-8601 strings."""
    from datetime import datetime

    out = dict(fields)
    for key in ("started_at", "completed_at"):
        if isinstance(out.get(key), str):
            out[key] = datetime.fromisoformat(out[key].replace("Z", "+00:00"))
    return out


@dataclass
class DryRunGitHub:
    """GitHubPort that prints the calls it would make and makes none (``publish --dry-run``).

    Reads answer as if GitHub had nothing yet: no earlier comment, no earlier check run.
    """

    repository: str
    out: TextIO = field(default_factory=lambda: sys.stdout)
    calls: list[str] = field(default_factory=list)
    _next_id: int = 1

    def _say(self, method: str, path: str, detail: str = "") -> None:
        line = f"{method} /repos/{self.repository}{path}" + (f"  {detail}" if detail else "")
        self.calls.append(line)
        print(line, file=self.out)

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def pull(self, number: int) -> PullRequest:
        raise GitHubError(f"read pull request #{number}", Failure(None, {}, "dry run: no API calls"))

    def changed_files(self, number: int) -> tuple[tuple[str, ...], bool]:
        return (), False

    def pull_commits(self, number: int) -> tuple[dict[str, KnownCommit], bool]:
        self._say("GET", f"/pulls/{number}/commits", "(dry run: assumed unknown)")
        return {}, False

    def permission(self, login: str) -> str:
        return "none"

    def pulls_for_commit(self, sha: str) -> list[int]:
        self._say("GET", f"/commits/{sha}/pulls", "(dry run: assumed none)")
        return []

    def react(self, number: int, comment_id: int, content: str) -> None:
        self._say("POST", f"/issues/comments/{comment_id}/reactions", f"content={content}")

    def comments_with(self, number: int, marker: str) -> list[ExistingComment]:
        self._say("GET", f"/issues/{number}/comments", "(dry run: assumed no earlier review comment)")
        return []

    def create_comment(self, number: int, body: str, dedupe_key: str) -> int:
        self._say("POST", f"/issues/{number}/comments", f"body: {len(body):,} characters")
        return self._id()

    def edit_comment(self, number: int, comment_id: int, body: str) -> None:
        self._say("PATCH", f"/issues/comments/{comment_id}", f"body: {len(body):,} characters")

    def commands(self, number: int, prefix: str) -> list[PostedComment]:
        self._say("GET", f"/issues/{number}/comments", f"(dry run: assumed no `{prefix}` commands)")
        return []

    def find_check_run(self, sha: str, name: str) -> CheckRunRef | None:
        self._say("GET", f"/commits/{sha}/check-runs?check_name={name}", "(dry run: assumed none)")
        return None

    def first_check_started(self, sha: str, name: str) -> str | None:
        self._say("GET", f"/commits/{sha}/check-runs?check_name={name}", "(dry run: assumed none)")
        return None

    def create_check_run(self, sha: str, name: str, external_id: str, fields: dict[str, Any]) -> int:
        self._say("POST", "/check-runs", _describe_check(fields, name=name, head_sha=sha))
        return self._id()

    def update_check_run(
        self, check_run_id: int, fields: dict[str, Any], annotations_after: int | None = None
    ) -> None:
        self._say("PATCH", f"/check-runs/{check_run_id}", _describe_check(fields))

    def dispatch_workflow(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        self._say("POST", f"/actions/workflows/{workflow}/dispatches", f"ref={ref} inputs={sorted(inputs)}")


def _describe_check(fields: dict[str, Any], **extra: str) -> str:
    parts = [f"{k}={v}" for k, v in extra.items()]
    parts += [f"{k}={fields[k]}" for k in ("status", "conclusion") if k in fields]
    output = fields.get("output")
    if output:
        parts.append(f"title={output.get('title')!r}")
        parts.append(f"summary: {len(output.get('summary', '')):,} characters")
        if output.get("annotations"):
            parts.append(f"annotations: {len(output['annotations'])}")
    return " ".join(parts)


def batched(items: Sequence[T], size: int) -> Iterable[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
