"""The parts of GitHub webhook payloads perfcheck uses, validated before any decision reads them.

GitHub adds fields over time, so unknown ones are ignored; the fields read here must be present
and well-typed, or the payload is refused with a clear error. Torch-free.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class User(_Payload):
    login: str
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot" or self.login.endswith("[bot]")


class Repository(_Payload):
    full_name: str
    fork: bool = False
    default_branch: str | None = None


class Label(_Payload):
    name: str


class Ref(_Payload):
    sha: str
    ref: str
    repo: Repository | None = None  # null when a fork's repository was deleted


class PullRequest(_Payload):
    number: int
    draft: bool = False
    state: str = "open"
    head: Ref
    base: Ref
    labels: list[Label] = []
    user: User

    @property
    def from_fork(self) -> bool:
        head = self.head.repo.full_name if self.head.repo else None
        return head != (self.base.repo.full_name if self.base.repo else None)


class PullRequestEvent(_Payload):
    action: str
    number: int
    pull_request: PullRequest
    repository: Repository
    sender: User
    label: Label | None = None


class Issue(_Payload):
    number: int
    pull_request: dict[str, Any] | None = Field(default=None, description="present only on pull requests")


class Comment(_Payload):
    id: int
    body: str
    user: User
    created_at: str | None = None


class IssueCommentEvent(_Payload):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    sender: User


class ShortRef(_Payload):
    """A ref as check runs and workflow runs list it: its repo has an id and a name, no full_name."""

    sha: str
    ref: str


class PullRequestRef(_Payload):
    """A pull request as check runs and workflow runs list them: numbers and SHAs only."""

    number: int
    head: ShortRef
    base: ShortRef


class CheckRun(_Payload):
    id: int
    name: str
    head_sha: str
    pull_requests: list[PullRequestRef] = []


class CheckRunEvent(_Payload):
    action: str
    check_run: CheckRun
    repository: Repository
    sender: User


class WorkflowDispatchEvent(_Payload):
    ref: str
    inputs: dict[str, Any] | None = None
    repository: Repository
    sender: User


class RepositoryDispatchEvent(_Payload):
    action: str
    branch: str | None = None
    client_payload: dict[str, Any] | None = None
    repository: Repository
    sender: User


class WorkflowRun(_Payload):
    id: int
    name: str | None = None
    event: str
    head_sha: str
    head_branch: str | None = None
    conclusion: str | None = None
    pull_requests: list[PullRequestRef] = []


class WorkflowRunEvent(_Payload):
    action: str
    workflow_run: WorkflowRun
    repository: Repository
    sender: User


class MergeGroup(_Payload):
    head_sha: str
    head_ref: str
    base_sha: str
    base_ref: str


class MergeGroupEvent(_Payload):
    action: str
    merge_group: MergeGroup
    repository: Repository
    sender: User


# Any event perfcheck handles, as parse_event returns it.
Event = (
    PullRequestEvent
    | IssueCommentEvent
    | CheckRunEvent
    | WorkflowDispatchEvent
    | RepositoryDispatchEvent
    | WorkflowRunEvent
    | MergeGroupEvent
)

EVENT_MODELS: dict[str, type[Event]] = {
    "pull_request": PullRequestEvent,
    "pull_request_target": PullRequestEvent,
    "issue_comment": IssueCommentEvent,
    "check_run": CheckRunEvent,
    "workflow_dispatch": WorkflowDispatchEvent,
    "repository_dispatch": RepositoryDispatchEvent,
    "workflow_run": WorkflowRunEvent,
    "merge_group": MergeGroupEvent,
}


class PayloadError(ValueError):
    """A payload perfcheck cannot use; the message says which field and why."""


def parse_event(name: str, raw: str | bytes | dict[str, Any]) -> Event:
    model = EVENT_MODELS.get(name)
    if model is None:
        raise PayloadError(f"event {name!r} is not handled; handled: {', '.join(sorted(EVENT_MODELS))}")
    try:
        data = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError as err:
        raise PayloadError(f"{name} payload is not JSON: {err}") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in err.errors()[:10]
        )
        raise PayloadError(f"{name} payload is missing what perfcheck needs: {problems}") from None
