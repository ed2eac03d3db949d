"""The fake GitHub is faithful: PyGithub works against it over real HTTP, and its answers match GitHub's API.

Every test runs under the `fake_github` fixture, which fails the test if any request or answer broke the
OpenAPI description; tests that break it on purpose clear `violations` once they have checked them.
"""

from __future__ import annotations

import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fakegithub import FakeGitHub, SpecMissingError
from fakegithub.fetch_spec import _check_integrity
from fakegithub.fixtures import fake_github  # noqa: F401
from fakegithub.server import ROUTES
from fakegithub.spec import load
from github import Auth, Github, GithubException, GithubIntegration, RateLimitExceededException

REPO = "pytorch/pytorch"
TOKEN = "ghs_test"
HEAD, BASE = "a" * 40, "b" * 40
ANNOTATION = {
    "path": "model.py",
    "start_line": 3,
    "end_line": 3,
    "annotation_level": "warning",
    "message": "slow",
}


def client(fake: FakeGitHub, token: str = TOKEN, per_page: int = 30) -> Github:
    return Github(
        auth=Auth.Token(token),
        base_url=fake.url,
        retry=None,
        seconds_between_requests=0,
        seconds_between_writes=0,
        per_page=per_page,
    )


def raw(
    fake: FakeGitHub, method: str, path: str, token: str | None = TOKEN, **kwargs: Any
) -> requests.Response:
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.request(method, fake.url + path, headers=headers, timeout=10, **kwargs)


@pytest.fixture
def fake(fake_github: FakeGitHub) -> FakeGitHub:  # noqa: F811 (the fixture imported above)
    """A repository with one open pull request and an app token, the usual starting point."""
    fake_github.add_repo(REPO)
    fake_github.add_token(TOKEN)
    fake_github.add_pull(REPO, 5, head_sha=HEAD, base_sha=BASE, files=["model.py", "README.md"])
    return fake_github


def make_annotations(count: int) -> list[dict[str, Any]]:
    return [{**ANNOTATION, "start_line": line, "end_line": line} for line in range(1, count + 1)]


def output(batch: list[dict[str, Any]] | None = None, **extra: str) -> dict[str, Any]:
    return {"title": "perfcheck", "summary": "done", **({"annotations": batch} if batch else {}), **extra}


# -- reads ----------------------------------------------------------------------------------------


def test_repository_pull_and_issue_read_like_github(fake: FakeGitHub) -> None:
    fake.add_pull(
        REPO, 6, head_sha="c" * 40, base_sha=BASE, head_repo="alice/pytorch", user="alice", draft=True
    )
    repo = client(fake).get_repo(REPO)
    assert (repo.full_name, repo.default_branch, repo.private) == (REPO, "main", False)
    pull = repo.get_pull(5)
    assert (pull.number, pull.head.sha, pull.base.sha, pull.changed_files) == (5, HEAD, BASE, 2)
    assert pull.url == f"{fake.url}/repos/{REPO}/pulls/5"
    fork = repo.get_pull(6)
    assert (fork.head.repo.full_name, fork.head.repo.fork, fork.base.repo.full_name) == (
        "alice/pytorch",
        True,
        REPO,
    )
    assert (fork.user.login, fork.draft) == ("alice", True)
    # A pull request is an issue too, one that says so.
    issue = repo.get_issue(5)
    assert issue.pull_request is not None and issue.pull_request.html_url.endswith(f"{REPO}/pull/5")


def test_files_paginate_with_github_link_headers(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, files=[f"src/f{i}.py" for i in range(250)])
    names = [f.filename for f in client(fake, per_page=100).get_repo(REPO).get_pull(7).get_files()]
    assert names == [f"src/f{i}.py" for i in range(250)]
    pages = [r for r in fake.requests if r.path.endswith("/pulls/7/files")]
    assert [r.query.get("page", "1") for r in pages] == ["1", "2", "3"]

    def links(page: int) -> dict[str, str]:
        response = raw(fake, "GET", f"/repos/{REPO}/pulls/7/files", params={"per_page": 100, "page": page})
        assert len(response.json()) == (100 if page < 3 else 50)
        return {
            rel: urllib.parse.parse_qs(urllib.parse.urlsplit(link["url"]).query)["page"][0]
            for rel, link in response.links.items()
        }

    assert links(1) == {"next": "2", "last": "3"}
    assert links(2) == {"prev": "1", "next": "3", "last": "3", "first": "1"}
    assert links(3) == {"prev": "2", "first": "1"}


def test_files_stop_at_3000_like_github(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, 8, head_sha=HEAD, base_sha=BASE, files=[f"f{i}.py" for i in range(3500)])
    pull = client(fake, per_page=100).get_repo(REPO).get_pull(8)
    assert pull.changed_files == 3500
    assert len(list(pull.get_files())) == 3000


def test_commit_and_its_pull_requests(fake: FakeGitHub) -> None:
    fake.add_pull(REPO, 9, head_sha="d" * 40, base_sha=BASE)
    repo = client(fake).get_repo(REPO)
    commit = repo.get_commit(HEAD)
    assert commit.sha == HEAD
    assert [pull.number for pull in commit.get_pulls()] == [5]
    with pytest.raises(GithubException) as unknown:
        repo.get_commit("e" * 40)
    assert unknown.value.status == 422


def test_collaborator_permission_legacy_and_role(fake: FakeGitHub) -> None:
    fake.set_permission(REPO, "maria", "maintain")
    fake.set_permission(REPO, "tom", "triage")
    fake.add_user("stranger")
    repo = client(fake).get_repo(REPO)
    assert (repo.get_collaborator_permission("maria"), repo.get_collaborator_role_name("maria")) == (
        "write",
        "maintain",
    )
    assert (repo.get_collaborator_permission("tom"), repo.get_collaborator_role_name("tom")) == (
        "read",
        "triage",
    )
    assert repo.get_collaborator_permission("pytorch") == "admin"  # the owner
    # GitHub answers "read" for anyone on a public repository, collaborator or not.
    assert repo.get_collaborator_permission("stranger") == "read"
    with pytest.raises(GithubException) as missing:
        repo.get_collaborator_permission("nobody-ever")
    assert missing.value.status == 404


# -- comments and reactions -----------------------------------------------------------------------


def test_comments_create_edit_list_delete(fake: FakeGitHub) -> None:
    seeded = fake.add_comment(REPO, 5, "/perfcheck run", user="maria")
    issue = client(fake).get_repo(REPO).get_issue(5)
    created = issue.create_comment("perfcheck: running")
    created.edit("perfcheck: done")
    listed = list(issue.get_comments())
    assert [(c.id, c.body, c.user.login, c.user.type) for c in listed] == [
        (seeded["id"], "/perfcheck run", "maria", "User"),
        (created.id, "perfcheck: done", "perfcheck-bot", "Bot"),
    ]
    created_request = next(r for r in fake.requests if r.method == "POST")
    assert created_request.status == 201 and created_request.body == {"body": "perfcheck: running"}
    assert [c["body"] for c in fake.comments(REPO, 5)] == ["/perfcheck run", "perfcheck: done"]
    client(fake).get_repo(REPO).get_issue(5).get_comment(seeded["id"]).delete()
    assert [c["id"] for c in fake.comments(REPO, 5)] == [created.id]


def test_concurrent_writes_are_all_kept(fake: FakeGitHub) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(
            pool.map(
                lambda i: (
                    raw(fake, "POST", f"/repos/{REPO}/issues/5/comments", json={"body": f"c{i}"}).status_code
                ),
                range(16),
            )
        )
    assert statuses == [201] * 16
    comments = fake.comments(REPO, 5)
    assert sorted(c["body"] for c in comments) == sorted(f"c{i}" for i in range(16))
    assert len({c["id"] for c in comments}) == 16


def test_comment_since_filters_by_update_time(fake: FakeGitHub) -> None:
    fake.add_comment(REPO, 5, "old")
    later = raw(fake, "GET", f"/repos/{REPO}/issues/5/comments", params={"since": "2999-01-01T00:00:00Z"})
    earlier = raw(fake, "GET", f"/repos/{REPO}/issues/5/comments", params={"since": "2000-01-01T00:00:00Z"})
    assert (later.json(), [c["body"] for c in earlier.json()]) == ([], ["old"])


def test_comment_body_over_65536_characters_is_refused(fake: FakeGitHub) -> None:
    issue = client(fake).get_repo(REPO).get_issue(5)
    with pytest.raises(GithubException) as refused:
        issue.create_comment("x" * 65537)
    assert refused.value.status == 422
    assert refused.value.data["errors"][0]["message"] == "Body is too long (maximum is 65536 characters)"
    kept = issue.create_comment("x" * 65536)
    with pytest.raises(GithubException) as edit_refused:
        kept.edit("y" * 65537)
    assert edit_refused.value.status == 422
    assert [len(c["body"]) for c in fake.comments(REPO, 5)] == [65536]


def test_reaction_twice_answers_200_with_the_first(fake: FakeGitHub) -> None:
    comment = fake.add_comment(REPO, 5, "/perfcheck run")
    path = f"/repos/{REPO}/issues/comments/{comment['id']}/reactions"
    first = raw(fake, "POST", path, json={"content": "eyes"})
    again = raw(fake, "POST", path, json={"content": "eyes"})
    assert (first.status_code, again.status_code, again.json()["id"]) == (201, 200, first.json()["id"])
    assert (
        client(fake).get_repo(REPO).get_issue(5).get_comment(comment["id"]).create_reaction("rocket").content
        == "rocket"
    )
    assert [r["content"] for r in fake.reactions(REPO, comment["id"])] == ["eyes", "rocket"]
    assert [r["content"] for r in raw(fake, "GET", path).json()] == ["eyes", "rocket"]


# -- check runs -----------------------------------------------------------------------------------


def test_check_run_takes_120_annotations_in_batches_of_50(fake: FakeGitHub) -> None:
    repo = client(fake).get_repo(REPO)
    batch = make_annotations(120)
    run = repo.create_check_run(
        name="perfcheck", head_sha=HEAD, status="in_progress", output=output(batch[:50])
    )
    run.edit(output=output(batch[50:100]))
    run.edit(conclusion="failure", output=output(batch[100:]))
    assert (run.status, run.conclusion, run.output.annotations_count) == ("completed", "failure", 120)
    assert run.completed_at is not None
    again = repo.get_check_run(run.id)
    assert [a.start_line for a in again.get_annotations()] == list(range(1, 121))
    assert again.get_annotations().totalCount == 120
    assert len(fake.annotations(REPO, run.id)) == 120
    writes = [r for r in fake.requests if r.method in ("POST", "PATCH")]
    assert [len(r.body["output"]["annotations"]) for r in writes] == [50, 50, 20]


def test_check_run_51_annotations_in_one_request_is_refused(fake: FakeGitHub) -> None:
    run = client(fake).get_repo(REPO).create_check_run(name="perfcheck", head_sha=HEAD)
    with pytest.raises(GithubException) as refused:
        run.edit(output=output(make_annotations(51)))
    assert refused.value.status == 422
    assert fake.annotations(REPO, run.id) == []
    assert len(fake.violations) == 1 and "maxItems" in fake.violations[0]
    fake.violations.clear()


def test_check_run_completion_rules(fake: FakeGitHub) -> None:
    path = f"/repos/{REPO}/check-runs"
    no_conclusion = raw(
        fake, "POST", path, json={"name": "perfcheck", "head_sha": HEAD, "status": "completed"}
    )
    assert no_conclusion.status_code == 422
    implied = raw(
        fake, "POST", path, json={"name": "perfcheck", "head_sha": HEAD, "conclusion": "success"}
    ).json()
    assert (implied["status"], implied["conclusion"]) == ("completed", "success")
    assert implied["completed_at"] is not None
    no_title = raw(fake, "PATCH", f"{path}/{implied['id']}", json={"output": {"summary": "s"}})
    assert no_title.status_code == 422
    too_long = raw(fake, "PATCH", f"{path}/{implied['id']}", json={"output": output(summary="s" * 65536)})
    assert too_long.status_code == 422
    assert len(fake.violations) == 1 and "summary" in fake.violations[0]
    fake.violations.clear()


def test_check_runs_list_by_ref_name_and_latest(fake: FakeGitHub) -> None:
    repo = client(fake).get_repo(REPO)
    first = repo.create_check_run(name="perfcheck", head_sha=HEAD)
    second = repo.create_check_run(name="perfcheck", head_sha=HEAD, external_id="retry")
    repo.create_check_run(name="other", head_sha=HEAD)
    latest = list(repo.get_commit(HEAD).get_check_runs(check_name="perfcheck"))
    assert [(r.id, r.external_id) for r in latest] == [(second.id, "retry")]
    every = repo.get_commit(HEAD).get_check_runs(check_name="perfcheck", filter="all")
    assert sorted(r.id for r in every) == [first.id, second.id]
    assert [r["name"] for r in fake.check_runs(REPO, HEAD)] == ["perfcheck", "perfcheck", "other"]
    # The check run lists the same-repository pull request whose head it ran on.
    assert [p.number for p in first.pull_requests] == [5]


def test_only_a_github_app_writes_check_runs(fake: FakeGitHub) -> None:
    fake.add_token("ghp_user", login="maria", kind="user")
    with pytest.raises(GithubException) as refused:
        client(fake, "ghp_user").get_repo(REPO).create_check_run(name="perfcheck", head_sha=HEAD)
    assert refused.value.status == 403


# -- workflows, rate limit, apps ------------------------------------------------------------------


def test_workflow_dispatch_by_file_name(fake: FakeGitHub) -> None:
    fake.add_workflow(REPO, "perfcheck.yml", inputs=["pr"])
    workflow = client(fake).get_repo(REPO).get_workflow("perfcheck.yml")
    assert workflow.path == ".github/workflows/perfcheck.yml"
    assert workflow.create_dispatch("main", {"pr": "5"}, throw=True) is True
    with pytest.raises(GithubException) as unexpected:
        workflow.create_dispatch("main", {"typo": "5"}, throw=True)
    assert unexpected.value.status == 422
    assert fake.dispatches(REPO) == [
        {
            "workflow": "perfcheck.yml",
            "workflow_id": workflow.id,
            "ref": "main",
            "inputs": {"pr": "5"},
            "actor": "perfcheck-bot",
        }
    ]


def test_rate_limit_endpoint_and_headers(fake: FakeGitHub) -> None:
    gh = client(fake)
    gh.get_repo(REPO)
    assert gh.get_rate_limit().resources.core.remaining == 4999
    headers = raw(fake, "GET", f"/repos/{REPO}").headers
    assert headers["X-RateLimit-Used"] == "2" and headers["X-RateLimit-Resource"] == "core"
    assert headers["Content-Type"] == "application/json; charset=utf-8" and headers["X-GitHub-Request-Id"]


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey) -> str:
    encoding, private = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(encoding, private, serialization.NoEncryption()).decode()


def test_github_app_installation_token_flow(fake: FakeGitHub) -> None:
    key = _rsa_key()
    fake.add_repo("pytorch/elsewhere")
    fake.add_app(4242, key.public_key(), slug="perfcheck")
    fake.add_installation(77, 4242, repos=[REPO])
    app_auth = Auth.AppAuth(4242, _pem(key))
    integration = GithubIntegration(auth=app_auth, base_url=fake.url, seconds_between_requests=0)
    assert integration.get_repo_installation("pytorch", "pytorch").id == 77
    installed = Github(
        auth=app_auth.get_installation_auth(77),
        base_url=fake.url,
        retry=None,
        seconds_between_requests=0,
        seconds_between_writes=0,
    )
    comment = installed.get_repo(REPO).get_issue(5).create_comment("hello from the app")
    assert (comment.user.login, comment.user.type) == ("perfcheck[bot]", "Bot")
    token_request = next(r for r in fake.requests if r.path == "/app/installations/77/access_tokens")
    assert token_request.status == 201
    # An installation token reaches only the installation's repositories; GitHub hides the others.
    with pytest.raises(GithubException) as hidden:
        installed.get_repo("pytorch/elsewhere")
    assert hidden.value.status == 404


def test_jwt_signed_by_another_key_is_refused(fake: FakeGitHub) -> None:
    fake.add_app(4242, _rsa_key().public_key())
    fake.add_installation(77, 4242, repos=[REPO])
    integration = GithubIntegration(auth=Auth.AppAuth(4242, _pem(_rsa_key())), base_url=fake.url)
    with pytest.raises(GithubException) as refused:
        integration.get_access_token(77)
    assert refused.value.status == 401


def test_unauthenticated_and_unknown_tokens_get_401(fake: FakeGitHub) -> None:
    missing = raw(fake, "GET", f"/repos/{REPO}", token=None)
    unknown = raw(fake, "GET", f"/repos/{REPO}", token="ghs_nope")
    assert (missing.status_code, unknown.status_code) == (401, 401)
    assert unknown.json()["message"] == "Bad credentials"


# -- the description is enforced ------------------------------------------------------------------


def test_every_route_answers_within_the_description(fake: FakeGitHub) -> None:
    """One successful call per implemented operation; the fixture then checks every answer's schema."""
    key = _rsa_key()
    fake.add_app(4242, key.public_key())
    fake.add_installation(77, 4242, repos=[REPO])
    fake.add_workflow(REPO, "perfcheck.yml")
    comment = fake.add_comment(REPO, 5, "hi")["id"]
    gh = client(fake)
    repo = gh.get_repo(REPO)
    run = repo.create_check_run(name="perfcheck", head_sha=HEAD, output=output(make_annotations(1))).id
    for method, path, body in [
        ("GET", f"/repos/{REPO}/pulls/5", None),
        ("GET", f"/repos/{REPO}/pulls/5/files", None),
        ("GET", f"/repos/{REPO}/pulls/5/commits", None),
        ("GET", f"/repos/{REPO}/issues/5", None),
        ("GET", f"/repos/{REPO}/commits/{HEAD}", None),
        ("GET", f"/repos/{REPO}/commits/{HEAD}/pulls", None),
        ("GET", f"/repos/{REPO}/collaborators/octocat/permission", None),
        ("GET", f"/repos/{REPO}/issues/5/comments", None),
        ("POST", f"/repos/{REPO}/issues/5/comments", {"body": "again"}),
        ("GET", f"/repos/{REPO}/issues/comments/{comment}", None),
        ("PATCH", f"/repos/{REPO}/issues/comments/{comment}", {"body": "edited"}),
        ("POST", f"/repos/{REPO}/issues/comments/{comment}/reactions", {"content": "+1"}),
        ("GET", f"/repos/{REPO}/issues/comments/{comment}/reactions", None),
        ("GET", f"/repos/{REPO}/check-runs/{run}", None),
        ("PATCH", f"/repos/{REPO}/check-runs/{run}", {"status": "completed", "conclusion": "neutral"}),
        ("GET", f"/repos/{REPO}/commits/{HEAD}/check-runs", None),
        ("GET", f"/repos/{REPO}/check-runs/{run}/annotations", None),
        ("GET", f"/repos/{REPO}/actions/workflows/perfcheck.yml", None),
        ("POST", f"/repos/{REPO}/actions/workflows/perfcheck.yml/dispatches", {"ref": "main"}),
        ("GET", "/rate_limit", None),
        ("DELETE", f"/repos/{REPO}/issues/comments/{comment}", None),
    ]:
        assert raw(fake, method, path, json=body).ok, (method, path)
    integration = GithubIntegration(auth=Auth.AppAuth(4242, _pem(key)), base_url=fake.url)
    integration.get_repo_installation("pytorch", "pytorch")
    integration.get_access_token(77)
    answered = {r.operation_id for r in fake.requests if isinstance(r.status, int) and r.status < 300}
    assert answered == set(ROUTES)
    assert fake.violations == []


def test_request_body_against_the_description_is_refused_and_recorded(fake: FakeGitHub) -> None:
    response = raw(
        fake, "POST", f"/repos/{REPO}/check-runs", json={"name": "x", "head_sha": HEAD, "status": "bogus"}
    )
    assert response.status_code == 422 and response.json()["message"] == "Invalid request."
    assert fake.check_runs(REPO) == []
    assert len(fake.violations) == 1 and "'bogus' is not one of" in fake.violations[0]
    fake.violations.clear()


def test_unknown_route_is_a_violation(fake: FakeGitHub) -> None:
    assert raw(fake, "GET", f"/repos/{REPO}/pulls/5/nonsense").status_code == 404
    assert fake.violations == [f"GET /repos/{REPO}/pulls/5/nonsense: no such operation in GitHub's REST API"]
    fake.violations.clear()


def test_a_wrongly_shaped_answer_is_a_violation(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    original = type(fake.shapes).comment

    def without_user(shapes: Any, comment: Any) -> dict[str, Any]:
        body = original(shapes, comment)
        body["user"] = "octocat"
        return body

    monkeypatch.setattr(type(fake.shapes), "comment", without_user)
    client(fake).get_repo(REPO).get_issue(5).create_comment("hello")
    assert any("response 201: at /user" in violation for violation in fake.violations)
    fake.violations.clear()


def test_missing_description_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(SpecMissingError, match="make test"):
        FakeGitHub(spec_path=tmp_path / "api.github.com.json")


def test_spec_prefers_literal_segments_and_rejects_a_tampered_tarball() -> None:
    spec = load()
    match = spec.find("GET", f"/repos/{REPO}/commits/{HEAD}/check-runs")
    assert match is not None and match.operation.operation_id == "checks/list-for-ref"
    ref = spec.find("GET", f"/repos/{REPO}/commits/heads/main")
    assert ref is not None and ref.params["ref"] == "heads/main"
    with pytest.raises(RuntimeError, match="integrity"):
        _check_integrity(b"not the tarball")


# -- faults ---------------------------------------------------------------------------------------


def test_fault_502_then_recovers(fake: FakeGitHub) -> None:
    fake.inject("GET", r"/pulls/5$", "502")
    assert raw(fake, "GET", f"/repos/{REPO}/pulls/5").status_code == 502
    assert raw(fake, "GET", f"/repos/{REPO}/pulls/5").status_code == 200
    assert [r.status for r in fake.requests] == [502, 200]


def test_fault_secondary_rate_limit(fake: FakeGitHub) -> None:
    fake.inject("POST", r"/comments$", "rate_limit", retry_after=7)
    response = raw(fake, "POST", f"/repos/{REPO}/issues/5/comments", json={"body": "hi"})
    assert response.status_code == 403 and response.headers["Retry-After"] == "7"
    assert response.json()["message"].startswith("You have exceeded a secondary rate limit")
    assert response.headers["X-RateLimit-Remaining"] != "0"
    assert fake.comments(REPO, 5) == []
    fake.inject("POST", r"/comments$", "rate_limit")
    with pytest.raises(RateLimitExceededException):
        client(fake).get_repo(REPO).get_issue(5).create_comment("hi")


def test_fault_429_fires_the_given_number_of_times(fake: FakeGitHub) -> None:
    fake.inject("*", r"^/repos/", "429", times=2, retry_after=3)
    statuses = [raw(fake, "GET", f"/repos/{REPO}").status_code for _ in range(3)]
    assert statuses == [429, 429, 200]
    assert fake.requests[0].status == 429


def test_fault_drop_closes_without_answer(fake: FakeGitHub) -> None:
    fake.inject("POST", r"/comments$", "drop")
    with pytest.raises(requests.ConnectionError):
        raw(fake, "POST", f"/repos/{REPO}/issues/5/comments", json={"body": "hi"})
    assert fake.comments(REPO, 5) == []
    assert fake.requests[-1].status == "dropped"


def test_fault_drop_after_effect_applies_the_request_first(fake: FakeGitHub) -> None:
    fake.inject("POST", r"/comments$", "drop", after_effect=True)
    with pytest.raises(requests.ConnectionError):
        raw(fake, "POST", f"/repos/{REPO}/issues/5/comments", json={"body": "hi"})
    # The comment exists although the client never heard so: a naive retry would post it twice.
    assert [c["body"] for c in fake.comments(REPO, 5)] == ["hi"]
    fake.inject("PATCH", r"/check-runs/", "502", after_effect=True)
    run = raw(fake, "POST", f"/repos/{REPO}/check-runs", json={"name": "perfcheck", "head_sha": HEAD}).json()
    patched = raw(
        fake, "PATCH", f"/repos/{REPO}/check-runs/{run['id']}", json={"output": output(make_annotations(2))}
    )
    assert patched.status_code == 502
    assert len(fake.annotations(REPO, run["id"])) == 2
