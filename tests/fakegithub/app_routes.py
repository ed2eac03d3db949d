"""Handlers for workflow dispatch, the rate limit, and a GitHub App's installations and tokens."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from .exchange import Call, Problem, Reply, not_found
from .shapes import INSTALLATION_PERMISSIONS
from .state import Dispatch, Installation, Repo, Workflow, now

TOKEN_LIFETIME = timedelta(hours=1)
ACCESS_LEVELS = ("read", "write", "admin")


# -- actions -------------------------------------------------------------------------------------


def _workflow(call: Call) -> Workflow:
    workflow = call.state.workflow(call.repo(), call.params["workflow_id"])
    if workflow is None:
        raise not_found()
    return workflow


def get_workflow(call: Call) -> Reply:
    return Reply(200, call.shapes.workflow(_workflow(call)))


def create_dispatch(call: Call) -> Reply:
    workflow, body = _workflow(call), call.json_body()
    inputs: dict[str, Any] = body.get("inputs") or {}
    unexpected = sorted(set(inputs) - workflow.inputs) if workflow.inputs is not None else []
    if unexpected:
        raise Problem(422, f"Unexpected inputs provided: {json.dumps(unexpected)}")
    assert call.token is not None
    call.state.dispatches.append(Dispatch(workflow, body["ref"], dict(inputs), call.token.user.login))
    if not body.get("return_run_details"):
        return Reply(204)
    run_id = call.state.next_id()
    api_run = f"{call.api}/repos/{workflow.repo.full_name}/actions/runs/{run_id}"
    html_run = f"https://github.com/{workflow.repo.full_name}/actions/runs/{run_id}"
    return Reply(200, {"workflow_run_id": run_id, "run_url": api_run, "html_url": html_run})


# -- rate limit ----------------------------------------------------------------------------------


def get_rate_limit(call: Call) -> Reply:
    assert call.token is not None
    return Reply(200, call.shapes.rate_limit(call.token, call.state.rate_reset))


# -- apps ----------------------------------------------------------------------------------------


def _covers(installation: Installation, repo: Repo) -> bool:
    if installation.repos:
        return repo.full_name.lower() in {name.lower() for name in installation.repos}
    return installation.account is repo.owner


def get_repo_installation(call: Call) -> Reply:
    full_name = f"{call.params['owner']}/{call.params['repo']}"
    repo = call.state.repos.get(full_name.lower())
    for installation in call.state.installations.values():
        if repo is not None and installation.app is call.app and _covers(installation, repo):
            return Reply(200, call.shapes.installation(installation))
    raise not_found()


def _token_repos(call: Call, installation: Installation) -> list[Repo] | None:
    """The repositories a new token is limited to: those requested, else the installation's."""
    body = call.json_body()
    reachable = [repo for repo in call.state.repos.values() if _covers(installation, repo)]
    names, ids = body.get("repositories"), body.get("repository_ids")
    if names is None and ids is None:
        return reachable if installation.repos else None
    wanted = [repo for repo in reachable if repo.name in (names or []) or repo.id in (ids or [])]
    if len(wanted) != len(names or []) + len(ids or []):
        raise Problem(
            422,
            "There is at least one repository that does not exist or is not accessible "
            "to the parent installation.",
        )
    return wanted


def _token_permissions(call: Call) -> dict[str, str]:
    requested: dict[str, str] | None = call.json_body().get("permissions")
    if requested is None:
        return dict(INSTALLATION_PERMISSIONS)
    for name, level in requested.items():
        granted = INSTALLATION_PERMISSIONS.get(name)
        if (
            granted is None
            or level not in ACCESS_LEVELS
            or ACCESS_LEVELS.index(level) > ACCESS_LEVELS.index(granted)
        ):
            raise Problem(422, "The permissions requested are not granted to this installation.")
    return dict(requested)


def create_access_token(call: Call) -> Reply:
    installation = call.state.installations.get(call.int_param("installation_id"))
    if installation is None or installation.app is not call.app:
        raise not_found()
    repos = _token_repos(call, installation)
    alphabet = string.ascii_letters + string.digits
    token = call.state.add_token(
        "ghs_" + "".join(secrets.choice(alphabet) for _ in range(36)),
        f"{installation.app.slug}[bot]",
        "app",
        app=installation.app,
        repos=None if repos is None else frozenset(repo.full_name.lower() for repo in repos),
        permissions=_token_permissions(call),
        expires_at=now() + TOKEN_LIFETIME,
    )
    return Reply(201, call.shapes.installation_token(token, repos or []))


ROUTES: dict[str, Callable[[Call], Reply]] = {
    "actions/get-workflow": get_workflow,
    "actions/create-workflow-dispatch": create_dispatch,
    "rate-limit/get": get_rate_limit,
    "apps/get-repo-installation": get_repo_installation,
    "apps/create-installation-access-token": create_access_token,
}
