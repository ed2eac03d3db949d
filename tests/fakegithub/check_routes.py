"""Handlers for check runs, with the rules GitHub enforces on them beyond the request schema."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .exchange import Call, Problem, Reply, not_found, paginate
from .state import App, CheckRun, now

MAX_ANNOTATIONS_PER_REQUEST = 50
MAX_OUTPUT_TEXT = 65535


def _rule(field_name: str, message: str) -> Problem:
    error = {"resource": "CheckRun", "code": "invalid", "field": field_name, "message": message}
    return Problem(422, "Invalid request.", [error])


def _calling_app(call: Call) -> App:
    """Only a GitHub App may write check runs; a user's token is refused outright."""
    token = call.token
    assert token is not None
    if token.kind != "app":
        raise Problem(403, "You must authenticate via a GitHub App.")
    if token.app is None:
        # A token seeded by add_token, not minted through an installation: it stands for an app of its own.
        slug = token.user.login.removesuffix("[bot]")
        token.app = App(call.state.next_id(), slug, None, call.state.user(slug))
    return token.app


def _timestamp(body: dict[str, Any], key: str) -> datetime | None:
    raw = body.get(key)
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise _rule(key, f"{raw!r} is not an ISO 8601 timestamp") from None


def _check_output(output: dict[str, Any] | None) -> None:
    """The request schema says most of this too; a handler must not trust a body that failed it."""
    if output is None:
        return
    for key in ("title", "summary"):
        if not isinstance(output.get(key), str):
            raise _rule(f"output.{key}", f'"{key}" wasn\'t supplied.')
    for key in ("summary", "text"):
        if len(output.get(key) or "") > MAX_OUTPUT_TEXT:
            raise _rule(f"output.{key}", f"{key} is too long (maximum is {MAX_OUTPUT_TEXT} characters)")
    if len(output.get("annotations", [])) > MAX_ANNOTATIONS_PER_REQUEST:
        raise _rule("output.annotations", f"at most {MAX_ANNOTATIONS_PER_REQUEST} annotations per request")


def _check_completion(body: dict[str, Any], run: CheckRun | None) -> None:
    completing = body.get("status") == "completed" or body.get("completed_at") is not None
    known = body.get("conclusion") or (run.conclusion if run is not None else None)
    if completing and not known:
        raise _rule("conclusion", '"conclusion" wasn\'t supplied.')


def _apply_status(run: CheckRun, body: dict[str, Any]) -> None:
    started = _timestamp(body, "started_at")
    if started is not None:
        run.started_at = started
    completed = _timestamp(body, "completed_at")
    if body.get("conclusion"):
        # A conclusion implies completion, whatever `status` says.
        run.status, run.conclusion = "completed", body["conclusion"]
    elif "status" in body:
        run.status = body["status"]
        if run.status != "completed":
            run.conclusion, run.completed_at = None, None
    if run.status == "completed":
        run.completed_at = completed or run.completed_at or now()


def _apply(run: CheckRun, body: dict[str, Any]) -> None:
    _check_output(body.get("output"))
    _check_completion(body, run)
    for key in ("name", "details_url", "external_id"):
        if key in body:
            setattr(run, key, body[key])
    _apply_status(run, body)
    output = body.get("output")
    if output is not None:
        run.output.update({key: output[key] for key in ("title", "summary", "text") if key in output})
        # Annotations accumulate over requests: that is how a run gets more than 50 of them.
        run.annotations.extend(output.get("annotations", []))


def create_check_run(call: Call) -> Reply:
    repo, app, body = call.repo(), _calling_app(call), call.json_body()
    head_sha = body["head_sha"]
    if (repo.full_name.lower(), head_sha) not in call.state.commits:
        raise Problem(422, f"No commit found for SHA: {head_sha}")
    run = CheckRun(
        call.state.next_id(), repo, body["name"], head_sha, app, call.state.suite_id(repo, head_sha, app)
    )
    _apply(run, body)
    call.state.check_runs[run.id] = run
    shaped = call.shapes.check_run(run)
    return Reply(201, shaped, {"Location": shaped["url"]})


def _existing_run(call: Call) -> CheckRun:
    run = call.state.check_runs.get(call.int_param("check_run_id"))
    if run is None or run.repo is not call.repo():
        raise not_found()
    return run


def get_check_run(call: Call) -> Reply:
    return Reply(200, call.shapes.check_run(_existing_run(call)))


def update_check_run(call: Call) -> Reply:
    run = _existing_run(call)
    if _calling_app(call) is not run.app:
        raise Problem(
            403, f"Invalid app_id `{run.app.id}`: only the GitHub App that created a check run may edit it."
        )
    _apply(run, call.json_body())
    return Reply(200, call.shapes.check_run(run))


def _latest_per_name(runs: list[CheckRun]) -> list[CheckRun]:
    latest: dict[str, CheckRun] = {}
    for run in runs:
        if run.name not in latest or run.id > latest[run.name].id:
            latest[run.name] = run
    return list(latest.values())


def list_check_runs_for_ref(call: Call) -> Reply:
    repo, ref, query = call.repo(), call.params["ref"], call.query
    runs = [run for run in call.state.check_runs.values() if run.repo is repo and run.head_sha == ref]
    runs = [run for run in runs if query.get("check_name") in (None, run.name)]
    runs = [run for run in runs if query.get("status") in (None, run.status)]
    runs = [run for run in runs if query.get("app_id") in (None, str(run.app.id))]
    if query.get("filter", "latest") == "latest":
        runs = _latest_per_name(runs)
    runs.sort(key=lambda run: run.id, reverse=True)
    page, headers = paginate(call, runs)
    body = {"total_count": len(runs), "check_runs": [call.shapes.check_run(run) for run in page]}
    return Reply(200, body, headers)


def list_annotations(call: Call) -> Reply:
    run = _existing_run(call)
    page, headers = paginate(call, run.annotations)
    return Reply(200, [call.shapes.annotation(run, annotation) for annotation in page], headers)


ROUTES: dict[str, Callable[[Call], Reply]] = {
    "checks/create": create_check_run,
    "checks/get": get_check_run,
    "checks/update": update_check_run,
    "checks/list-for-ref": list_check_runs_for_ref,
    "checks/list-annotations": list_annotations,
}
