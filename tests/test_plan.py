"""Events to plans: GitHub's own example payloads, and the security rules on top of them.

tests/data/webhooks/*.json are the api.github.com examples of @octokit/webhooks-examples 7.6.1
(MIT), one file per event, unchanged; tests derive variants from them (a fork, a PR comment).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfcheck.bot.command import CommandError, has_permission, parse_command
from perfcheck.bot.events import PayloadError, PullRequest, parse_event
from perfcheck.bot.plan import Context, matching_files, plan
from perfcheck.config import parse_config

WEBHOOKS = Path(__file__).parent / "data" / "webhooks"
EVENTS = sorted(p.stem for p in WEBHOOKS.glob("*.json"))


def examples(event: str) -> list[dict[str, Any]]:
    return json.loads((WEBHOOKS / f"{event}.json").read_text())


def example(event: str, action: str | None) -> dict[str, Any]:
    return copy.deepcopy(next(e for e in examples(event) if e.get("action") == action))


ALL = [(event, i) for event in EVENTS for i in range(len(examples(event)))]


@pytest.mark.parametrize(("event", "index"), ALL, ids=[f"{e}-{i}" for e, i in ALL])
def test_every_example_payload_gets_a_plan(event: str, index: int) -> None:
    result = plan(event, examples(event)[index], Context())
    assert result.event == event and result.reason
    if result.run:
        assert result.head_sha or event in ("workflow_dispatch", "repository_dispatch")


def test_all_handled_events_have_examples() -> None:
    assert set(EVENTS) == {
        "pull_request",
        "issue_comment",
        "check_run",
        "workflow_dispatch",
        "repository_dispatch",
        "workflow_run",
        "merge_group",
    }


def test_opened_pr_runs_on_its_head_and_base() -> None:
    payload = example("pull_request", "opened")
    result = plan("pull_request", payload, Context())
    assert result.run and result.pr_number == payload["number"]
    assert result.head_sha == payload["pull_request"]["head"]["sha"]
    assert result.base_sha == payload["pull_request"]["base"]["sha"]


def fork_of(payload: dict[str, Any]) -> dict[str, Any]:
    payload["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    return payload


def test_fork_prs_wait_for_approval() -> None:
    result = plan("pull_request", fork_of(example("pull_request", "opened")), Context())
    assert not result.run and result.awaiting_approval
    assert "write permission" in result.reason


def test_drafts_and_unrelated_actions_are_skipped() -> None:
    draft = example("pull_request", "opened")
    draft["pull_request"]["draft"] = True
    assert not plan("pull_request", draft, Context()).run
    assert not plan("pull_request", example("pull_request", "assigned"), Context()).run


def test_only_the_rerun_label_triggers() -> None:
    labeled = example("pull_request", "labeled")
    labeled["pull_request"]["state"] = "open"
    labeled["label"]["name"] = "bug"
    assert not plan("pull_request", labeled, Context()).run
    labeled["label"]["name"] = "perfcheck"
    assert plan("pull_request", labeled, Context()).run


def test_paths_filter_with_complete_and_truncated_file_lists() -> None:
    config = parse_config("paths: ['torch/_inductor/**', 'models/**/*.py']", "perfcheck.yml")
    payload = example("pull_request", "opened")
    docs_only = Context(config=config, changed_files=("README.md", "docs/x.md"))
    assert not plan("pull_request", payload, docs_only).run
    compiler = Context(config=config, changed_files=("README.md", "torch/_inductor/lowering.py"))
    assert plan("pull_request", payload, compiler).run
    truncated = Context(config=config, changed_files=("README.md",), files_complete=False)
    assert plan("pull_request", payload, truncated).run  # more files than the API lists: reviewed


FILES = (
    "conftest.py",
    "models/a.py",
    "models/deep/b.py",
    "models/readme.md",
    "modelsx/c.py",
    "src/models/d.py",
    "torch/_dynamo/eval_frame.py",
    "torch/_inductor/lowering.py",
    "torch/_inductor/test_lowering.py",
    "torch/utils/conftest.py",
)


PY = [f for f in FILES if f.endswith(".py")]


@pytest.mark.parametrize(
    ("globs", "matched"),
    [
        # ** is any number of folders, none included; * stays within one
        ("models/**/*.py", ["models/a.py", "models/deep/b.py"]),
        ("models/*.py", ["models/a.py"]),
        ("**/*.md", ["models/readme.md"]),
        # a name without a slash matches at any depth; a leading / anchors it at the root
        ("conftest.py", ["conftest.py", "torch/utils/conftest.py"]),
        ("*.md", ["models/readme.md"]),
        ("/conftest.py", ["conftest.py"]),
        # dir/ is every file under a folder of that name (anchored where a slash comes before the last)
        ("models/", ["models/a.py", "models/deep/b.py", "models/readme.md", "src/models/d.py"]),
        ("torch/_inductor/", ["torch/_inductor/lowering.py", "torch/_inductor/test_lowering.py"]),
        # character classes, one of them negated
        ("torch/_[di]*/*.py", [f for f in PY if f.startswith(("torch/_dynamo/", "torch/_inductor/"))]),
        ("[!mt]*/**/*.py", ["src/models/d.py"]),
        # ! leaves out what an earlier pattern named: the last one that matches a file decides
        ("*.py !**/test_*.py", [f for f in PY if "test_" not in f]),
        ("*.py !models/** models/deep/**", [f for f in PY if f != "models/a.py"]),
        # each file is judged by its path: a ! takes a file back from under a folder named before
        # it (git, which never looks inside an ignored folder, would not), and a folder pattern
        # after a ! that named the files themselves does not take them back (dir/** does, above)
        ("torch/ !**/test_*.py", [f for f in PY if f.startswith("torch/") and "test_" not in f]),
        ("*.py !models/** models/deep/", [f for f in PY if not f.startswith("models/")]),
        # !dir/ names the folder, not the files in it that a file pattern named, as in git
        ("*.py !models/", PY),
    ],
)
def test_paths_are_gitignore_patterns(globs: str, matched: list[str]) -> None:
    assert matching_files(FILES, globs.split()) == matched


def test_a_pattern_without_a_slash_matches_at_depth_where_the_old_matcher_did_not() -> None:
    """The hand-written matcher read `*.py` as top-level files only; gitignore, like `**/*.py`."""
    assert matching_files(FILES, ["*.py"]) == matching_files(FILES, ["**/*.py"])
    assert "torch/_inductor/lowering.py" in matching_files(FILES, ["*.py"])


@pytest.mark.e2e
def test_pathspec_is_imported_by_the_match_not_by_the_modules() -> None:
    """perfcheck.config and the planner load without pathspec; a config that sets `paths` imports
    it to check them (so every side that reads such a config needs it installed, as it is)."""
    probe = (
        "import sys, perfcheck.bot.plan; from perfcheck.config import parse_config; "
        "parse_config('workloads: [{name: a, entry: m.py:f}]', 'f.yml'); print('pathspec' in sys.modules); "
        "parse_config('paths: [a/]', 'f.yml'); print('pathspec' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_a_negated_pattern_makes_a_pr_of_tests_only_skipped() -> None:
    config = parse_config("paths: [torch/_inductor/, '!**/test_*.py']", "perfcheck.yml")
    payload = example("pull_request", "opened")
    tests_only = Context(config=config, changed_files=("torch/_inductor/test_lowering.py",))
    assert not plan("pull_request", payload, tests_only).run
    with_code = Context(config=config, changed_files=("torch/_inductor/lowering.py",))
    assert plan("pull_request", payload, with_code).run


def pr_comment(
    body: str, login: str = "octocat", user_type: str = "User", action: str = "created"
) -> dict[str, Any]:
    payload = example("issue_comment", action)
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/o/r/pulls/1"}
    payload["comment"]["body"] = body
    payload["comment"]["user"]["login"] = login
    payload["comment"]["user"]["type"] = user_type
    return payload


def the_pull(sha: str = "a" * 40) -> PullRequest:
    pr = example("pull_request", "opened")["pull_request"]
    pr["head"]["sha"] = sha
    return PullRequest.model_validate(pr)


def test_a_writers_command_runs_pinned_to_the_head_at_that_moment() -> None:
    ctx = Context(commenter_permission="write", pull=the_pull("b" * 40))
    result = plan("issue_comment", pr_comment("/perfcheck run --workloads mlp,resnet --device cuda"), ctx)
    assert result.run and result.head_sha == "b" * 40 and result.reaction == "eyes"
    assert result.workloads == ["mlp", "resnet"] and result.device == "cuda"


def fork_pull(sha: str) -> PullRequest:
    pr = fork_of(example("pull_request", "opened"))["pull_request"]
    pr["head"]["sha"] = sha
    return PullRequest.model_validate(pr)


def test_bisect_is_automatic_only_where_writers_pushed_every_commit() -> None:
    """The probe job may search a PR's earlier commits only where no one without write access
    could have pushed them; for a fork's, a writer asks with `/perfcheck bisect`, which approves
    the PR's commits up to the head it pins."""
    assert plan("pull_request", example("pull_request", "opened"), Context()).bisect == "auto"
    writer = Context(commenter_permission="write", pull=the_pull("b" * 40))
    assert plan("issue_comment", pr_comment("/perfcheck"), writer).bisect == "auto"
    fork = Context(commenter_permission="write", pull=fork_pull("c" * 40))
    approved = plan("issue_comment", pr_comment(f"/perfcheck run --sha {'c' * 7}"), fork)
    assert approved.run and approved.bisect == "never"
    asked = plan("issue_comment", pr_comment(f"/perfcheck bisect --probes compile --sha {'c' * 7}"), fork)
    assert asked.run and asked.bisect == "always" and asked.probes == ["compile"]
    assert asked.reason.startswith("/perfcheck bisect by")
    outsider = Context(commenter_permission="read", pull=the_pull())
    assert not plan("issue_comment", pr_comment("/perfcheck bisect"), outsider).run
    for event, action in (("merge_group", "checks_requested"), ("check_run", "rerequested")):
        assert plan(event, example(event, action), Context()).bisect == "never"
    dispatch = example("workflow_dispatch", None)
    assert plan("workflow_dispatch", dispatch, Context()).bisect == "never"  # unsaid: not allowed
    dispatch["inputs"] = {**(dispatch.get("inputs") or {}), "bisect": "always", "base_sha": "d" * 40}
    dispatched = plan("workflow_dispatch", dispatch, Context())
    assert (dispatched.bisect, dispatched.base_sha) == ("always", "d" * 40)
    dispatch["inputs"]["bisect"] = "yes please"
    assert plan("workflow_dispatch", dispatch, Context()).bisect == "never"


@pytest.mark.parametrize("permission", ["read", "triage", "none", None])
def test_an_outsiders_command_is_refused(permission: str | None) -> None:
    ctx = Context(commenter_permission=permission, pull=the_pull())
    result = plan("issue_comment", pr_comment("/perfcheck"), ctx)
    assert not result.run and result.reaction == "confused"
    assert result.reply is None and "commands need write" in result.reason


def test_association_in_the_payload_grants_nothing() -> None:
    payload = pr_comment("/perfcheck")
    payload["comment"]["author_association"] = "OWNER"
    assert not plan("issue_comment", payload, Context(commenter_permission="read", pull=the_pull())).run


def test_bots_edits_and_plain_comments_are_ignored() -> None:
    ctx = Context(commenter_permission="admin", pull=the_pull())
    assert not plan("issue_comment", pr_comment("/perfcheck", "ci[bot]", "Bot"), ctx).run
    assert not plan("issue_comment", pr_comment("/perfcheck", action="edited"), ctx).run
    quiet = plan("issue_comment", pr_comment("LGTM, but /perfcheck later?"), ctx)
    assert not quiet.run and quiet.reaction is None


def test_comments_on_issues_are_ignored() -> None:
    payload = example("issue_comment", "created")
    payload["comment"]["body"] = "/perfcheck"
    result = plan("issue_comment", payload, Context(commenter_permission="admin"))
    assert not result.run and "not a pull request" in result.reason


def test_a_malformed_command_gets_the_usage_back() -> None:
    result = plan(
        "issue_comment",
        pr_comment("/perfcheck run --device tpu"),
        Context(commenter_permission="write", pull=the_pull()),
    )
    assert not result.run and result.reaction == "confused"
    assert "/perfcheck ack CATEGORY" in (result.reply or "")


def test_ack_is_recorded_with_who_and_the_sha() -> None:
    ctx = Context(commenter_permission="maintain", pull=the_pull("c" * 40))
    result = plan("issue_comment", pr_comment("/perfcheck ack export_ir_changed mlp -- new fused op"), ctx)
    assert not result.run and result.ack is not None
    assert (result.ack.category, result.ack.workload, result.ack.reason) == (
        "export_ir_changed",
        "mlp",
        "new fused op",
    )
    assert (result.ack.by, result.ack.sha) == ("octocat", "c" * 40)
    assert result.ack.at is not None and result.ack.at.endswith("Z")  # when, from the comment


def test_merge_queue_and_rerun_and_publish() -> None:
    group = plan("merge_group", example("merge_group", "checks_requested"), Context())
    assert group.run and group.head_sha and group.base_sha
    rerun = plan("check_run", example("check_run", "rerequested"), Context())
    assert rerun.run and rerun.head_sha
    publish = plan("workflow_run", example("workflow_run", "completed"), Context())
    assert publish.run and publish.mode == "publish"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("/perfcheck fly", "unknown command"),
        ("/perfcheck ack made_up -- x", "unknown category"),
        ("/perfcheck ack recompile", "needs a reason"),
        ("/perfcheck run --probes speed", "unknown probe"),
        ("/perfcheck run 'unclosed", "cannot read"),
        ("/perfcheck bisect --probes speed", "unknown probe"),
        ("/perfcheck bisect --sha nothex", "SHA"),
    ],
)
def test_command_errors(body: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        parse_command(body)


def test_command_is_only_read_from_the_first_line() -> None:
    assert parse_command("please review\n/perfcheck") is None
    assert parse_command("/perfcheck\nsecond line is prose").verb == "run"  # type: ignore[union-attr]
    assert parse_command("/perfcheckers unite") is None


def test_permission_ranking() -> None:
    assert has_permission("admin", "write") and has_permission("write", "write")
    assert not has_permission("triage", "write") and not has_permission("bogus", "read")


def test_bad_payloads_are_refused_clearly() -> None:
    with pytest.raises(PayloadError, match=r"pull_request\.head"):
        broken = example("pull_request", "opened")
        del broken["pull_request"]["head"]
        parse_event("pull_request", broken)
    with pytest.raises(PayloadError, match="not handled"):
        parse_event("star", {})
    with pytest.raises(PayloadError, match="not JSON"):
        parse_event("pull_request", "{nope")
