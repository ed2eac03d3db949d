"""The bot against a local GitHub: PyGithub over real HTTP, every request checked against GitHub's OpenAPI.

Payloads are GitHub's own examples (tests/data/webhooks); where a test needs a different commenter
or a command as the comment body, it edits a copy and says so.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakegithub import FakeGitHub
from fakegithub.state import PullCommit

from perfcheck.bisect_schema import BisectDoc, Commit, Located
from perfcheck.bot.events import parse_event
from perfcheck.bot.gateway import GitHubError, GitHubGateway
from perfcheck.bot.plan import decide
from perfcheck.bot.publish import parse_state, publish_review
from perfcheck.bot.respond import lookup_context, respond
from perfcheck.bot.retry import RetryPolicy
from perfcheck.config import Config
from perfcheck.core.bisect import KnownCommit, targets
from perfcheck.measures import SourceLocation
from perfcheck.schema import Finding, Review, load_review, upgraded_v2
from perfcheck.settings import GitHubConfig

DATA = Path(__file__).parent / "data"
REPO_ROOT = Path(__file__).resolve().parent.parent
REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
BASE = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"
TOKEN = "ghs_perfchecktesttoken"


def example(event: str, index: int = 0) -> dict[str, Any]:
    return copy.deepcopy(json.loads((DATA / "webhooks" / f"{event}.json").read_text())[index])


def demo_result_at(sha: str) -> str:
    """The recorded demo review as if its head tree had been a checkout of ``sha`` (publish checks)."""
    review = json.loads((DATA / "demo-result.json").read_text())
    review["head"]["revision"] = sha
    return json.dumps(review)


def command_event(
    github: FakeGitHub, body: str, login: str = "Codertocat", user_type: str = "User", number: int = 2
) -> dict[str, Any]:
    """GitHub's `issue_comment` `created` example, edited to be the comment just posted on PR ``number``:
    its issue made that PR, body, author and comment id replaced by the comment seeded here."""
    ev = example("issue_comment", 0)
    assert ev["action"] == "created"
    posted = github.add_comment(REPO, number, body, user=login, user_type=user_type)
    ev["issue"]["number"] = number
    ev["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{number}"}
    ev["comment"].update(id=posted["id"], body=body, created_at=posted["created_at"])
    ev["comment"]["user"].update(login=login, type=user_type)
    return ev


@pytest.fixture
def github(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(REPO, default_branch="master")
    fake_github.add_token(TOKEN, login="github-actions[bot]", kind="app")
    fake_github.add_pull(REPO, 2, head_sha=HEAD, base_sha=BASE, files=["model.py", "README.md"])
    fake_github.set_permission(REPO, "Codertocat", "admin")
    fake_github.set_permission(REPO, "outsider", "read")
    return fake_github


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def port(github: FakeGitHub, sleeps: Sleeps) -> GitHubGateway:
    from github import Auth, Github

    client = Github(
        auth=Auth.Token(TOKEN),
        base_url=github.url,
        retry=None,
        lazy=True,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )
    return GitHubGateway(client, REPO, policy=RetryPolicy(attempts=4), sleep=sleeps)


@pytest.fixture
def demo() -> Review:
    return load_review(DATA / "demo-result.json")


def target(pr: int | None = 2) -> Any:
    from perfcheck.bot.publish import Target

    return Target(REPO, HEAD, pr, f"https://github.com/{REPO}/actions/runs/7")


# -- lookups ------------------------------------------------------------------------------------


def test_lookups_through_the_api(github: FakeGitHub, port: GitHubGateway) -> None:
    pull = port.pull(2)
    assert (pull.head.sha, pull.base.sha, pull.from_fork) == (HEAD, BASE, False)
    assert port.changed_files(2) == (("model.py", "README.md"), True)
    assert port.permission("Codertocat") == "admin"
    assert port.permission("outsider") == "read"
    assert port.pulls_for_commit(HEAD) == [2]


def test_many_files_are_paged_and_a_capped_list_is_partial(github: FakeGitHub, port: GitHubGateway) -> None:
    github.add_pull(REPO, 3, head_sha="a" * 40, base_sha=BASE, files=[f"pkg/m{i}.py" for i in range(250)])
    files, complete = port.changed_files(3)
    assert len(files) == 250 and complete
    github.add_pull(
        REPO,
        4,
        head_sha="b" * 40,
        base_sha=BASE,
        files=[f"f{i}.txt" for i in range(3500)],
        changed_files=3500,
    )
    files, complete = port.changed_files(4)
    assert len(files) == 3000 and not complete


# -- publishing ---------------------------------------------------------------------------------


def test_publish_posts_one_comment_and_a_completed_check(
    github: FakeGitHub, port: GitHubGateway, demo: Review
) -> None:
    outcome = publish_review(port, demo, target(), GitHubConfig())
    comments = github.comments(REPO, 2)
    assert len(comments) == 1
    assert parse_state(comments[0]["body"]).verdict == "fail"  # type: ignore[union-attr]
    assert "New graph break" in comments[0]["body"]
    (run,) = github.check_runs(REPO, HEAD)
    assert (run["status"], run["conclusion"], run["name"]) == ("completed", "failure", "perfcheck")
    # by cause: the break (its slower steps under it) and the IR change
    assert run["output"]["title"] == "perfcheck: 2 regressions"
    assert run["details_url"] == f"https://github.com/{REPO}/actions/runs/7"
    assert outcome.annotations == 1 and run["output"]["annotations_count"] == 1


def test_republishing_updates_instead_of_duplicating(
    github: FakeGitHub, port: GitHubGateway, demo: Review
) -> None:
    publish_review(port, demo, target(), GitHubConfig())
    first = github.comments(REPO, 2)[0]["id"]
    changed = demo.model_copy(update={"summary": demo.summary + " (re-run)"})
    publish_review(port, changed, target(), GitHubConfig())
    comments = github.comments(REPO, 2)
    assert [c["id"] for c in comments] == [first]  # same verdict: edited in place
    runs = github.check_runs(REPO, HEAD)
    # A completed run is superseded by a new one rather than reopened (annotations would pile up).
    assert [r["status"] for r in runs] == ["completed", "completed"]


def test_a_flipped_verdict_gets_a_new_comment(github: FakeGitHub, port: GitHubGateway, demo: Review) -> None:
    publish_review(port, demo, target(), GitHubConfig())
    passed = demo.model_copy(update={"verdict": "pass", "findings": []})
    publish_review(port, passed, target(), GitHubConfig())
    verdicts = [parse_state(c["body"]).verdict for c in github.comments(REPO, 2)]  # type: ignore[union-attr]
    assert verdicts == ["fail", "pass"]
    publish_review(port, passed, target(), GitHubConfig())
    assert len(github.comments(REPO, 2)) == 2  # unchanged: left as is


def _located_findings(n: int) -> list[Finding]:
    return [
        Finding(
            category="graph_break_added",
            severity="error",
            workload="mlp",
            probe="compile",
            message=f"break {i}",
            location=SourceLocation(path="model.py", line=i + 1),
        )
        for i in range(n)
    ]


def test_annotations_go_fifty_per_request(github: FakeGitHub, port: GitHubGateway, demo: Review) -> None:
    many = demo.model_copy(update={"findings": _located_findings(120)})
    publish_review(port, many, target(), GitHubConfig())
    (run,) = github.check_runs(REPO, HEAD)
    assert run["output"]["annotations_count"] == 120
    patches = [r for r in github.requests if r.method == "PATCH" and "/check-runs/" in r.path]
    sizes = [len((r.body or {}).get("output", {}).get("annotations", [])) for r in patches]
    assert sizes == [50, 50, 20]
    assert patches[-1].body["status"] == "completed"  # the conclusion comes with the last batch


def test_comment_on_a_pr_that_is_not_found_is_refused_clearly(port: GitHubGateway, demo: Review) -> None:
    with pytest.raises(GitHubError, match="404"):
        publish_review(port, demo, target(pr=99), GitHubConfig())


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["502", "drop"])
def test_a_lost_answer_to_a_new_comment_never_posts_twice(
    github: FakeGitHub, port: GitHubGateway, demo: Review, kind: str
) -> None:
    github.inject("POST", r"/issues/2/comments$", kind, after_effect=True)
    publish_review(port, demo, target(), GitHubConfig())
    assert len(github.comments(REPO, 2)) == 1


def test_a_lost_answer_to_a_new_check_run_never_creates_two(
    github: FakeGitHub, port: GitHubGateway, demo: Review
) -> None:
    github.inject("POST", r"/check-runs$", "drop", after_effect=True)
    publish_review(port, demo, target(), GitHubConfig())
    (run,) = github.check_runs(REPO, HEAD)
    assert run["conclusion"] == "failure"


def test_a_lost_answer_to_an_annotation_batch_never_repeats_it(
    github: FakeGitHub, port: GitHubGateway, demo: Review
) -> None:
    many = demo.model_copy(update={"findings": _located_findings(120)})
    github.inject("PATCH", r"/check-runs/\d+$", "drop", after_effect=True, times=2)
    publish_review(port, many, target(), GitHubConfig())
    (run,) = github.check_runs(REPO, HEAD)
    assert run["output"]["annotations_count"] == 120
    assert run["conclusion"] == "failure"


def test_rate_limits_wait_as_github_says(
    github: FakeGitHub, port: GitHubGateway, demo: Review, sleeps: Sleeps
) -> None:
    github.inject("POST", r"/issues/2/comments$", "rate_limit", retry_after=3)
    github.inject("GET", r"/commits/[0-9a-f]+/check-runs", "429", retry_after=2)
    github.inject("PATCH", r"/check-runs/\d+$", "502", times=2)
    publish_review(port, demo, target(), GitHubConfig())
    assert sleeps == [3, 2, 1, 2]
    assert len(github.comments(REPO, 2)) == 1
    assert github.check_runs(REPO, HEAD)[0]["conclusion"] == "failure"


def test_gives_up_after_the_last_attempt(github: FakeGitHub, port: GitHubGateway, demo: Review) -> None:
    github.inject("POST", r"/issues/2/comments$", "502", times=10)
    with pytest.raises(GitHubError, match="comment on #2: HTTP 502"):
        publish_review(port, demo, target(), GitHubConfig())
    assert github.comments(REPO, 2) == []


# -- commands and fork safety -----------------------------------------------------------------------


def _plan_and_respond(port: GitHubGateway, event: str, payload: dict[str, Any], config: Config) -> Any:
    ev = parse_event(event, payload)
    decided = decide(event, ev, lookup_context(ev, config, port))
    respond(port, decided, config)
    return decided


def test_a_writers_command_is_accepted_and_pinned(github: FakeGitHub, port: GitHubGateway) -> None:
    ev = command_event(github, "/perfcheck run --workloads mlp")
    decided = _plan_and_respond(port, "issue_comment", ev, Config())
    assert decided.run and decided.head_sha == HEAD and decided.workloads == ["mlp"]
    assert [r["content"] for r in github.reactions(REPO, ev["comment"]["id"])] == ["eyes"]
    (run,) = github.check_runs(REPO, HEAD)
    assert run["status"] == "queued" and HEAD[:7] in run["output"]["summary"]


def test_an_outsiders_command_is_refused_through_the_api(github: FakeGitHub, port: GitHubGateway) -> None:
    # The payload claims OWNER; the permission endpoint says read. The API wins.
    ev = command_event(github, "/perfcheck", login="outsider")
    ev["comment"]["author_association"] = "OWNER"
    decided = _plan_and_respond(port, "issue_comment", ev, Config())
    assert not decided.run
    assert [r["content"] for r in github.reactions(REPO, ev["comment"]["id"])] == ["confused"]
    assert len(github.comments(REPO, 2)) == 1  # a reaction, and no reply to an outsider
    assert github.check_runs(REPO, HEAD) == []


@pytest.mark.parametrize(
    "body", ["/perfcheck [Re-run](https://evil.example)", "/perfcheck @org/team", "/perfcheck help"]
)
def test_the_bot_repeats_nothing_an_outsider_wrote(
    github: FakeGitHub, port: GitHubGateway, body: str
) -> None:
    ev = command_event(github, body, login="outsider")
    _plan_and_respond(port, "issue_comment", ev, Config())
    assert len(github.comments(REPO, 2)) == 1
    assert [r["content"] for r in github.reactions(REPO, ev["comment"]["id"])] == ["confused"]


def test_a_writers_malformed_command_is_quoted_back_as_inert_code(
    github: FakeGitHub, port: GitHubGateway
) -> None:
    ev = command_event(github, "/perfcheck [Re-run](https://evil.example) @org/team")
    _plan_and_respond(port, "issue_comment", ev, Config())
    reply = github.comments(REPO, 2)[-1]["body"]
    echoed = reply.split("```")
    # what is repeated of the writer's text is inside the one fenced block, nowhere else
    assert "evil.example" in echoed[1]
    outside = echoed[0] + "".join(echoed[2:])
    assert "evil.example" not in outside and "@org" not in outside


def test_a_malformed_command_gets_the_usage(github: FakeGitHub, port: GitHubGateway) -> None:
    ev = command_event(github, "/perfcheck run --probes nonsense")
    _plan_and_respond(port, "issue_comment", ev, Config())
    _, reply = github.comments(REPO, 2)
    assert "unknown probe" in reply["body"] and "/perfcheck help" in reply["body"]


def test_a_bots_command_is_ignored(github: FakeGitHub, port: GitHubGateway) -> None:
    ev = command_event(github, "/perfcheck", login="dependabot[bot]", user_type="Bot")
    decided = _plan_and_respond(port, "issue_comment", ev, Config())
    assert not decided.run and github.reactions(REPO, ev["comment"]["id"]) == []
    assert [r for r in github.requests if r.method != "GET"] == []


FORK_HEAD = "c" * 40


def _fork_pr_waiting(github: FakeGitHub, port: GitHubGateway) -> None:
    """Pull request #7 from a fork at FORK_HEAD, planned on its `pull_request` event: waiting."""
    github.add_pull(
        REPO, 7, head_sha=FORK_HEAD, base_sha=BASE, head_repo="mallory/Hello-World", files=["x.py"]
    )
    ev = example("pull_request", 0)
    ev["number"] = ev["pull_request"]["number"] = 7
    ev["pull_request"]["head"]["sha"] = FORK_HEAD
    ev["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    decided = _plan_and_respond(port, "pull_request", ev, Config())
    assert not decided.run and decided.awaiting_approval
    (waiting,) = github.check_runs(REPO, FORK_HEAD)
    assert waiting["status"] == "queued" and waiting["output"]["title"] == "Waiting for approval"
    github.backdate(10)  # the writer reads the PR, then comments


def test_fork_pr_waits_for_approval_then_a_writer_approves_that_commit(
    github: FakeGitHub, port: GitHubGateway
) -> None:
    _fork_pr_waiting(github, port)
    approve = command_event(github, "/perfcheck", number=7)
    decided = _plan_and_respond(port, "issue_comment", approve, Config())
    assert decided.run and decided.head_sha == FORK_HEAD
    (queued,) = github.check_runs(REPO, FORK_HEAD)  # the same check, now approved, not a second one
    assert queued["output"]["title"] == "Queued"


def test_a_push_after_the_writers_comment_is_not_approved_by_it(
    github: FakeGitHub, port: GitHubGateway
) -> None:
    # The attack: a writer approves commit C; before the plan job runs, the fork pushes D.
    _fork_pr_waiting(github, port)
    approve = command_event(github, "/perfcheck", number=7)
    github.backdate(10)
    evil = "d" * 40
    github.push(REPO, 7, evil)
    push = example("pull_request", 0)
    push["action"] = "synchronize"
    push["number"] = push["pull_request"]["number"] = 7
    push["pull_request"]["head"]["sha"] = evil
    push["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    _plan_and_respond(port, "pull_request", push, Config())  # D waits, stamped after the comment
    decided = _plan_and_respond(port, "issue_comment", approve, Config())
    assert not decided.run and decided.head_sha is None
    (waiting,) = github.check_runs(REPO, evil)
    assert waiting["output"]["title"] == "Waiting for approval"  # still waiting: nothing approved D
    reply = github.comments(REPO, 7)[-1]["body"]
    assert "Nothing was approved" in reply and f"/perfcheck run --sha {evil[:7]}" in reply
    # Naming the commit approves exactly it; naming another one approves nothing.
    stale = command_event(github, f"/perfcheck run --sha {FORK_HEAD[:7]}", number=7)
    assert not _plan_and_respond(port, "issue_comment", stale, Config()).run
    named = command_event(github, f"/perfcheck run --sha {evil[:7]}", number=7)
    decided = _plan_and_respond(port, "issue_comment", named, Config())
    assert decided.run and decided.head_sha == evil


def test_a_command_on_a_head_perfcheck_never_saw_is_refused(github: FakeGitHub, port: GitHubGateway) -> None:
    # No `pull_request` event was planned for this head (a push whose workflow has not run yet).
    github.add_pull(REPO, 9, head_sha=FORK_HEAD, base_sha=BASE, head_repo="mallory/x", files=["x.py"])
    decided = _plan_and_respond(
        port, "issue_comment", command_event(github, "/perfcheck", number=9), Config()
    )
    assert not decided.run and github.check_runs(REPO, FORK_HEAD) == []


def test_a_command_on_a_closed_pull_request_runs_nothing(github: FakeGitHub, port: GitHubGateway) -> None:
    github.add_pull(REPO, 11, head_sha="e" * 40, base_sha=BASE, files=["x.py"], state="closed")
    decided = _plan_and_respond(
        port, "issue_comment", command_event(github, "/perfcheck", number=11), Config()
    )
    assert not decided.run and "closed" in github.comments(REPO, 11)[-1]["body"]


# -- the command line, end to end -----------------------------------------------------------------


def _cli(args: list[str], github: FakeGitHub, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PERFCHECK_"))} | {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "4242",
        "PERFCHECK_GITHUB_WRITE_PACE": "0",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "perfcheck", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_plan_then_publish_from_a_real_payload(github: FakeGitHub, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(example("pull_request", 0)))  # `opened`, PR #2, unchanged
    planned = _cli(
        ["plan", "--event-name", "pull_request", "--event-path", str(event), "--respond"], github, tmp_path
    )
    assert planned.returncode == 0, planned.stderr
    decided = json.loads(planned.stdout)
    assert (decided["run"], decided["head_sha"], decided["pr_number"]) == (True, HEAD, 2)
    outputs = (tmp_path / "output").read_text()
    assert "run<<" in outputs and "\ntrue\n" in outputs
    assert github.check_runs(REPO, HEAD)[0]["status"] == "queued"

    report = tmp_path / "report"
    report.mkdir()
    (report / "result.json").write_text(demo_result_at(HEAD))
    forged = _cli(
        ["publish", "--report", str(report), "--sha", HEAD, "--planned-by", "999"], github, tmp_path
    )
    assert forged.returncode == 2 and "not planned by run 999" in forged.stderr
    assert github.comments(REPO, 2) == []
    publish = ["publish", "--report", str(report), "--sha", decided["head_sha"], "--planned-by", "4242"]
    published = _cli(publish, github, tmp_path)
    assert published.returncode == 0, published.stderr
    (comment,) = github.comments(REPO, 2)  # the PR was found from the SHA
    assert "New graph break" in comment["body"]
    (run,) = github.check_runs(REPO, HEAD)  # the queued check, completed
    assert run["conclusion"] == "failure"
    assert run["details_url"] == f"https://github.com/{REPO}/actions/runs/4242"
    assert "New graph break" in (tmp_path / "summary.md").read_text()


@pytest.mark.e2e
@pytest.mark.parametrize("revision", ["d" * 40, "", "e", None, "not-a-sha"])
def test_publish_refuses_a_result_for_another_commit(
    github: FakeGitHub, tmp_path: Path, revision: str | None
) -> None:
    # What the job that ran PR code could write: another commit, or none at all, to match anything.
    review = json.loads((DATA / "demo-result.json").read_text())
    review["head"]["revision"] = revision
    (tmp_path / "result.json").write_text(json.dumps(review))
    done = _cli(["publish", "--report", str(tmp_path), "--sha", HEAD], github, tmp_path)
    assert done.returncode == 2 and "refusing to publish" in done.stderr
    assert github.check_runs(REPO, HEAD) == [] and github.comments(REPO, 2) == []


@pytest.mark.e2e
def test_publish_keeps_the_review_when_github_is_down(github: FakeGitHub, tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(demo_result_at(HEAD))
    github.inject("GET", r".*", "502", times=100)
    done = _cli(
        ["publish", "--report", str(tmp_path), "--sha", HEAD, "--pr", "2"],
        github,
        tmp_path,
        PERFCHECK_GITHUB_RETRIES="1",
    )
    assert done.returncode == 1, done.stderr
    assert "New graph break" in done.stdout and "New graph break" in (tmp_path / "summary.md").read_text()


@pytest.mark.e2e
def test_publish_checks_a_claimed_pr_against_the_api(github: FakeGitHub, tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(demo_result_at(HEAD))
    github.add_pull(REPO, 5, head_sha="e" * 40, base_sha=BASE, files=["x.py"])
    done = _cli(["publish", "--report", str(tmp_path), "--sha", HEAD, "--pr", "5"], github, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "#5 is not at ec26c3e" in done.stderr
    assert github.comments(REPO, 5) == [] and github.check_runs(REPO, HEAD)[0]["conclusion"] == "failure"


def test_a_huge_malformed_command_gets_a_short_reply(github: FakeGitHub, port: GitHubGateway) -> None:
    # 70,000 characters: echoed whole, the reply would pass GitHub's 65,536 and plan would fail on 422.
    ev = command_event(github, "/perfcheck " + "x" * 70_000)
    decided = _plan_and_respond(port, "issue_comment", ev, Config())
    assert not decided.run
    reply = github.comments(REPO, 2)[-1]["body"]
    assert len(reply) < 5_000 and "unknown command" in reply


# -- the bisect section, checked against the PR's commits as the API lists them -------------------

FIRST = "c" * 40  # the PR's first commit, the one the bisect blames
PR_COMMITS = [
    PullCommit(FIRST, "Move the classifier to gelu\n\nWith a graph break.", "Ada Lovelace", (BASE,)),
    PullCommit(HEAD, "Tidy", "Ada Lovelace", (FIRST,)),
]


def _bisected_result(span_middle: Commit) -> str:
    """The demo review at HEAD with a bisect section, as a probe job writes it, that blames
    ``span_middle`` for the review's graph break."""
    # the recorded demo is a version 2 document: read as publish reads it, through the v2 reader
    review = Review.model_validate(upgraded_v2(json.loads(demo_result_at(HEAD)), "demo-result.json"))
    [found] = [f for f in review.findings if f.category == "graph_break_added"]
    [target] = targets(found)
    good = Commit(sha=BASE, subject="Base", author="Grace Hopper")
    bad = Commit(sha=HEAD, subject="Tidy", author="Ada Lovelace")
    entry = Located(
        key=target.key, label=target.label, category=target.category, workload=target.workload,
        probe=target.probe, outcome="found", first_bad=span_middle, last_good=good,
    )  # fmt: skip
    doc = BisectDoc(
        good=good, bad=bad, commits=2, span=[good, span_middle, bad], probes=["compile"], findings=[entry],
        probe_runs=1,
    )  # fmt: skip
    return review.model_copy(update={"bisect": doc}).model_dump_json()


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("blamed", "shown"),
    [
        (Commit(sha=FIRST, subject="Move the classifier to gelu", author="Ada Lovelace"), True),
        # A base-branch commit, real but not the PR's; the PR's own under another author; one made up.
        (Commit(sha=BASE[:-1] + "0", subject="Move the classifier to gelu", author="Ada Lovelace"), False),
        (Commit(sha=FIRST, subject="Move the classifier to gelu", author="Mallory"), False),
        (Commit(sha="d" * 40, subject="Move the classifier to gelu", author="Ada Lovelace"), False),
    ],
)
def test_publish_shows_a_bisect_section_only_over_the_prs_own_commits(
    github: FakeGitHub, tmp_path: Path, blamed: Commit, shown: bool
) -> None:
    github.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, files=["model.py"], commits=PR_COMMITS)
    (tmp_path / "result.json").write_text(_bisected_result(blamed))
    done = _cli(["publish", "--report", str(tmp_path), "--sha", HEAD, "--pr", "7"], github, tmp_path)
    assert done.returncode == 0, done.stderr
    (comment,) = github.comments(REPO, 7)
    assert ("Where each finding came from" in comment["body"]) is shown
    assert ("bisect section left out" in done.stderr) is not shown
    if shown:
        assert "Move the classifier to gelu" in comment["body"] and FIRST[:10] in comment["body"]
        # Found where the PR's code ran and re-run by nobody since: said, with the command that checks it.
        assert "**Unverified:**" in comment["body"]
        assert f"perfcheck bisect --good {BASE} --bad {FIRST} --workloads" in comment["body"]
    else:
        assert "New graph break" in comment["body"]  # the review itself is posted


def test_the_prs_commits_are_read_as_git_shows_them(github: FakeGitHub, port: GitHubGateway) -> None:
    github.add_pull(REPO, 7, head_sha=HEAD, base_sha=BASE, files=["model.py"], commits=PR_COMMITS)
    commits, complete = port.pull_commits(7)
    assert complete and list(commits) == [FIRST, HEAD]
    assert commits[FIRST] == KnownCommit("Move the classifier to gelu", "Ada Lovelace", BASE)
    assert commits[HEAD].first_parent == FIRST
