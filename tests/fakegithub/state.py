"""What the fake GitHub knows: repositories, pulls, comments, check runs, apps and tokens, in memory.

Plain records and lookups only; the HTTP rules that act on them live in routes.py. Every mutation happens
under `State.lock`, which the server holds for the whole handling of one request.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
PERMISSIONS: tuple[str, ...] = ("admin", "maintain", "write", "triage", "read", "none")
# The legacy `permission` field only knows four levels; GitHub folds the fine-grained roles into them.
LEGACY_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
    "none": "none",
}
# GitHub's files endpoint stops listing a pull request's files after this many, whatever changed_files says.
MAX_LISTED_FILES = 3000
MAX_LISTED_COMMITS = 250  # GitHub lists at most this many of a pull request's commits


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, number: int) -> str:
    """GitHub's legacy global node id: base64 of `<len(kind):03d>:<kind><id>`."""
    return base64.b64encode(f"{len(kind):03d}:{kind}{number}".encode()).decode()


@dataclass
class User:
    login: str
    id: int
    type: str = "User"


@dataclass
class Repo:
    owner: User
    name: str
    id: int
    default_branch: str = "main"
    private: bool = False
    fork: bool = False
    created_at: datetime = field(default_factory=now)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"


@dataclass
class Issue:
    repo: Repo
    number: int
    id: int
    title: str
    user: User
    body: str | None = None
    state: str = "open"
    created_at: datetime = field(default_factory=now)


@dataclass
class Pull(Issue):
    # Defaults only because dataclass inheritance demands them after Issue's; add_pull always sets them.
    pull_id: int = 0
    head_sha: str = ""
    base_sha: str = ""
    head_repo: Repo | None = None
    head_ref: str = "topic"
    files: list[dict[str, Any]] = field(default_factory=list)
    changed_files: int = 0
    draft: bool = False
    # What GET .../pulls/{n}/commits lists, oldest first: the head's history since the base.
    commits: list[PullCommit] = field(default_factory=list)


@dataclass(frozen=True)
class PullCommit:
    sha: str
    message: str
    author: str
    parents: tuple[str, ...]


@dataclass
class Comment:
    id: int
    issue: Issue
    body: str
    user: User
    created_at: datetime = field(default_factory=now)
    updated_at: datetime = field(default_factory=now)


@dataclass
class Reaction:
    id: int
    comment_id: int
    user: User
    content: str
    created_at: datetime = field(default_factory=now)


@dataclass
class App:
    id: int
    slug: str
    public_key: Any
    owner: User


@dataclass
class Installation:
    id: int
    app: App
    account: User
    # Full names; empty means every repository of the account ("all" repository selection).
    repos: list[str]


@dataclass
class Token:
    token: str
    user: User
    kind: Literal["app", "user"]
    app: App | None = None
    # Full names the token may reach; None when it is not limited to some repositories.
    repos: frozenset[str] | None = None
    permissions: dict[str, str] = field(default_factory=dict)
    expires_at: datetime | None = None
    used: int = 0


@dataclass
class CheckRun:
    id: int
    repo: Repo
    name: str
    head_sha: str
    app: App
    suite_id: int
    status: str = "queued"
    conclusion: str | None = None
    started_at: datetime = field(default_factory=now)
    completed_at: datetime | None = None
    details_url: str | None = None
    external_id: str = ""
    output: dict[str, Any] = field(default_factory=dict)
    annotations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Workflow:
    id: int
    repo: Repo
    file_name: str
    name: str
    inputs: frozenset[str] | None
    created_at: datetime = field(default_factory=now)


@dataclass
class Dispatch:
    workflow: Workflow
    ref: str
    inputs: dict[str, Any]
    actor: str


def _file_entry(entry: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(entry, str):
        return {"filename": entry, "status": "modified"}
    if "filename" not in entry:
        raise ValueError(f"a file entry needs a filename: {entry!r}")
    return {"status": "modified", **entry}


class State:
    """The records, the id sequence, and seed helpers the test-facing FakeGitHub delegates to."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # One sequence for every kind of id: a client that passes a check run id where a comment id belongs
        # gets a 404 instead of silently hitting an unrelated object.
        self._ids = itertools.count(1_000_001)
        self.users: dict[str, User] = {}
        self.repos: dict[str, Repo] = {}
        self.issues: dict[tuple[str, int], Issue] = {}
        self.commits: dict[tuple[str, str], str] = {}
        self.comments: dict[int, Comment] = {}
        self.reactions: list[Reaction] = []
        self.permissions: dict[tuple[str, str], str] = {}
        self.apps: dict[int, App] = {}
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, Token] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.suites: dict[tuple[str, str, int], int] = {}
        self.workflows: dict[int, Workflow] = {}
        self.dispatches: list[Dispatch] = []
        # One rate-limit window for the server's life: tests never run for an hour.
        self.rate_reset = int(time.time()) + 3600

    def next_id(self) -> int:
        return next(self._ids)

    def user(self, login: str, user_type: str = "User") -> User:
        """The user with this login, created on first mention (GitHub logins are case-insensitive)."""
        with self.lock:
            key = login.lower()
            if key not in self.users:
                self.users[key] = User(login, self.next_id(), user_type)
            return self.users[key]

    def repo(self, full_name: str) -> Repo:
        with self.lock:
            try:
                return self.repos[full_name.lower()]
            except KeyError:
                raise KeyError(f"unknown repository {full_name!r}: seed it with add_repo") from None

    def add_repo(
        self, full_name: str, default_branch: str = "main", private: bool = False, fork: bool = False
    ) -> Repo:
        owner, _, name = full_name.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"a repository is named owner/name, not {full_name!r}")
        with self.lock:
            repo = Repo(self.user(owner), name, self.next_id(), default_branch, private, fork)
            self.repos[full_name.lower()] = repo
            return repo

    def add_commit(self, full_name: str, sha: str, message: str = "Commit") -> None:
        with self.lock:
            self.commits[(self.repo(full_name).full_name.lower(), sha)] = message

    def add_issue(
        self, full_name: str, number: int, *, title: str = "An issue", user: str = "octocat"
    ) -> Issue:
        with self.lock:
            issue = Issue(self.repo(full_name), number, self.next_id(), title, self.user(user))
            self.issues[(issue.repo.full_name.lower(), number)] = issue
            return issue

    def add_pull(
        self,
        full_name: str,
        number: int,
        *,
        head_sha: str,
        base_sha: str,
        head_repo: str | None = None,
        files: Sequence[str | dict[str, Any]] = (),
        user: str = "octocat",
        draft: bool = False,
        state: str = "open",
        changed_files: int | None = None,
        title: str | None = None,
        head_ref: str = "topic",
        commits: Sequence[PullCommit] = (),
    ) -> Pull:
        with self.lock:
            repo = self.repo(full_name)
            fork = None if head_repo is None or head_repo.lower() == repo.full_name.lower() else head_repo
            entries = [_file_entry(entry) for entry in files]
            pull = Pull(
                repo,
                number,
                self.next_id(),
                title or f"Pull request {number}",
                self.user(user),
                state=state,
                pull_id=self.next_id(),
                head_sha=head_sha,
                base_sha=base_sha,
                head_repo=self._fork(fork) if fork else None,
                head_ref=head_ref,
                files=entries,
                changed_files=len(entries) if changed_files is None else changed_files,
                draft=draft,
                commits=list(commits),
            )
            self.issues[(repo.full_name.lower(), number)] = pull
            for sha in (head_sha, base_sha):
                self.commits.setdefault((repo.full_name.lower(), sha), f"Commit {sha[:7]}")
            for commit in commits:
                self.commits[(repo.full_name.lower(), commit.sha)] = commit.message
            return pull

    def _fork(self, full_name: str) -> Repo:
        """A fork is a repository of its own; it is created on first mention."""
        try:
            return self.repo(full_name)
        except KeyError:
            return self.add_repo(full_name, fork=True)

    def issue(self, full_name: str, number: int) -> Issue | None:
        return self.issues.get((full_name.lower(), number))

    def set_permission(self, full_name: str, login: str, permission: str) -> None:
        if permission not in PERMISSIONS:
            raise ValueError(f"permission must be one of {PERMISSIONS}, not {permission!r}")
        with self.lock:
            self.permissions[(self.repo(full_name).full_name.lower(), self.user(login).login.lower())] = (
                permission
            )

    def permission_of(self, repo: Repo, user: User) -> str | None:
        """The explicit role; None for someone who is neither the owner nor a seeded collaborator."""
        if user.login.lower() == repo.owner.login.lower():
            return "admin"
        return self.permissions.get((repo.full_name.lower(), user.login.lower()))

    def add_token(
        self,
        token: str,
        login: str,
        kind: Literal["app", "user"],
        *,
        app: App | None = None,
        repos: frozenset[str] | None = None,
        permissions: dict[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> Token:
        if kind not in ("app", "user"):
            raise ValueError(f"token kind is 'app' or 'user', not {kind!r}")
        with self.lock:
            user = self.user(login, "Bot" if kind == "app" else "User")
            record = Token(token, user, kind, app, repos, dict(permissions or {}), expires_at)
            self.tokens[token] = record
            return record

    def add_comment(self, issue: Issue, body: str, user: User) -> Comment:
        with self.lock:
            comment = Comment(self.next_id(), issue, body, user)
            self.comments[comment.id] = comment
            return comment

    def comments_on(self, issue: Issue) -> list[Comment]:
        return [comment for comment in self.comments.values() if comment.issue is issue]

    def suite_id(self, repo: Repo, head_sha: str, app: App) -> int:
        """GitHub groups an app's check runs on one commit into a check suite."""
        key = (repo.full_name.lower(), head_sha, app.id)
        if key not in self.suites:
            self.suites[key] = self.next_id()
        return self.suites[key]

    def add_workflow(
        self, full_name: str, file_name: str, name: str | None = None, inputs: Sequence[str] | None = None
    ) -> Workflow:
        with self.lock:
            workflow = Workflow(
                self.next_id(),
                self.repo(full_name),
                file_name,
                name or file_name.rsplit(".", 1)[0],
                None if inputs is None else frozenset(inputs),
            )
            self.workflows[workflow.id] = workflow
            return workflow

    def workflow(self, repo: Repo, workflow_id: str) -> Workflow | None:
        """By numeric id or by file name, the two ways GitHub accepts."""
        for workflow in self.workflows.values():
            if workflow.repo is repo and workflow_id in (str(workflow.id), workflow.file_name):
                return workflow
        return None
