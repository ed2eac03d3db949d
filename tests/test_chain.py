"""The whole chain as the example workflows run it: plan → probe (two shards) → report → publish.

Each perfcheck step of examples/workflows/*.yml is run through the action's own step
(action/run.sh) with the environment action.yml gives it: the step's `with:` values, resolved
from the outputs of the steps before, over action.yml's input defaults. GitHub is the local one.

What the test changes, and why: `install: "false"` and `python` (the test's interpreter already has
perfcheck), `device: cpu` (CI has no GPU), and the base tree's perfcheck.yml uses `aot_eager` with
two workloads (so the two shards each get one, and nothing waits for Inductor on a CPU).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import git, git_commit
from fakegithub import FakeGitHub
from fakegithub.state import PullCommit

from perfcheck.runner.process.sides import SHARED_CACHE_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO = REPO_ROOT / "examples" / "demo"
WORKFLOWS = REPO_ROOT / "examples" / "workflows"
DATA = Path(__file__).parent / "data"
REPO = "Codertocat/Hello-World"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
BASE = "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"
TOKEN = "ghs_actions_token"
RUN_ID = "5001"
FAST_CONFIG = """\
workloads:
  - name: classifier
    entry: model.py:build
    train: true
  - name: tiny
    entry: mlp-tiny
compile:
  backend: aot_eager
  measure: 'off'
# The chain is what this file tests; the timing gate and compile latency have tests of their own
# (two eager pairs here, and no cache-cold compiles).
timing: {compiled: false, processes: 2, max_processes: 2}
budgets:
  max_new_graph_breaks: 0
"""
OVERRIDES = {"install": "false", "python": sys.executable, "device": "cpu"}
_EXPR = re.compile(r"\$\{\{\s*(.+?)\s*\}\}")


def parse_outputs(path: Path) -> dict[str, str]:
    """$GITHUB_OUTPUT as the runner reads it: `name<<DELIMITER` blocks and `name=value` lines."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        if "<<" in lines[i]:
            name, delimiter = lines[i].split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
        else:
            name, _, value = lines[i].partition("=")
            out[name] = value
            i += 1
    return out


def perfcheck_steps(workflow: str, job: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((WORKFLOWS / workflow).read_text())
    steps = doc["jobs"][job]["steps"]
    return [s for s in steps if str(s.get("uses", "")).startswith("perfcheck-dev/perfcheck@")]


def resolve(value: object, context: dict[str, str]) -> str:
    # Every expression a workflow hands the action must be one this test models: KeyError otherwise.
    # `X || 'default'` is X where X is not empty, as GitHub evaluates it.
    def one(expr: str) -> str:
        name, _, default = expr.partition(" || ")
        return context[name] or default.strip("'")

    return _EXPR.sub(lambda m: one(m.group(1)), str(value))


class Runner:
    """Runs the action's step like a GitHub runner would, in a workspace of the test's making."""

    def __init__(self, github: FakeGitHub, tmp_path: Path, overrides: dict[str, str] | None = None) -> None:
        self.github = github
        self.tmp = tmp_path
        self.action = yaml.safe_load((REPO_ROOT / "action.yml").read_text())
        self.count = 0
        self.overrides = OVERRIDES if overrides is None else overrides

    def env_for(self, with_: dict[str, str]) -> dict[str, str]:
        inputs = {k: str(v.get("default", "")) for k, v in self.action["inputs"].items()}
        unknown = set(with_) - set(inputs)
        assert not unknown, f"the workflow passes inputs action.yml does not have: {unknown}"
        inputs |= with_ | self.overrides
        (step,) = [s for s in self.action["runs"]["steps"] if s.get("id") == "perfcheck"]
        env = {}
        for name, expr in step["env"].items():
            m = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", expr)
            assert m, f"action.yml env {name} is not a plain input: {expr}"
            env[name] = inputs[m.group(1)]
        return env

    def step(
        self, with_: dict[str, str], workspace: Path, event: str, payload: dict[str, Any]
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
        self.count += 1
        event_path = self.tmp / f"event-{self.count}.json"
        event_path.write_text(json.dumps(payload))
        outputs = self.tmp / f"output-{self.count}"
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GITHUB_", "PERFCHECK_")) or k == SHARED_CACHE_ENV  # (conftest.py)
        }
        environ |= {
            "GITHUB_ACTION_PATH": str(REPO_ROOT),
            "GITHUB_EVENT_NAME": event,
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_STEP_SUMMARY": str(self.tmp / f"summary-{self.count}.md"),
            "GITHUB_API_URL": self.github.url,
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_RUN_ID": RUN_ID,
            "RUNNER_TEMP": str(self.tmp),
            "PERFCHECK_GITHUB_WRITE_PACE": "0",
        }
        environ |= self.env_for(with_)
        done = subprocess.run(
            ["bash", str(REPO_ROOT / "action" / "run.sh")],
            cwd=workspace,
            env=environ,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        return done, parse_outputs(outputs)


@pytest.fixture
def github(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.add_repo(REPO, default_branch="master")
    fake_github.add_token(TOKEN, login="github-actions[bot]", kind="app")
    fake_github.add_pull(REPO, 2, head_sha=HEAD, base_sha=BASE, files=["model.py"])
    fake_github.set_permission(REPO, "Codertocat", "admin")
    fake_github.set_permission(REPO, "outsider", "read")
    return fake_github


def checkout(dest: Path, tree: Path) -> Path:
    shutil.copytree(tree, dest)
    (dest / "perfcheck.yml").write_text(FAST_CONFIG)
    return dest


# The GPU flow's probe step asks for cuda, which CI has not: the test runs it on the CPU. The
# hosted-runner flow runs as written, the device its plan says (cpu), with CI's CPU torch in place
# of the one its `torch` input installs.
FLOWS = {
    "perfcheck.yml": OVERRIDES,
    "perfcheck-cpu.yml": {"install": "false", "python": sys.executable},
}


@pytest.mark.e2e
@pytest.mark.parametrize("workflow", FLOWS)
def test_the_example_workflows_review_and_publish_a_pull_request(
    github: FakeGitHub, tmp_path: Path, workflow: str
) -> None:
    runner = Runner(github, tmp_path, FLOWS[workflow])
    event = json.loads((DATA / "webhooks" / "pull_request.json").read_text())[0]  # `opened`, unchanged

    # The workflow's job `plan`: the base branch checked out, then the action in plan mode.
    plan_ws = checkout(tmp_path / "plan", DEMO / "base")
    (plan_step,) = perfcheck_steps(workflow, "plan")
    ctx = {"github.token": TOKEN}
    done, plan_out = runner.step(
        {k: resolve(v, ctx) for k, v in plan_step["with"].items()}, plan_ws, "pull_request_target", event
    )
    assert done.returncode == 0, done.stderr
    assert plan_out["run"] == "true" and plan_out["head_sha"] == HEAD
    (queued,) = github.check_runs(REPO, HEAD)
    assert queued["status"] == "queued" and queued["external_id"] == RUN_ID
    artifacts = tmp_path / "artifacts"
    (artifacts / "perfcheck-plan").mkdir(parents=True)
    shutil.copy(plan_ws / "perfcheck-out" / "plan.json", artifacts / "perfcheck-plan" / "plan.json")

    # Job `probe`, one runner per matrix shard: base and head checked out, the action in probe mode.
    (probe_step,) = perfcheck_steps(workflow, "probe")
    doc = yaml.safe_load((WORKFLOWS / workflow).read_text())
    shards = doc["jobs"]["probe"]["strategy"]["matrix"]["shard"]
    if workflow == "perfcheck-cpu.yml":  # a hosted runner: nothing to add but the action's own install
        assert "container" not in doc["jobs"]["probe"] and doc["jobs"]["probe"]["runs-on"] == "ubuntu-latest"
        assert probe_step["with"]["torch"] and "install" not in probe_step["with"]
    for index, shard in enumerate(shards):
        ws = tmp_path / f"gpu-{index}"
        checkout(ws / "base", DEMO / "base")
        checkout(ws / "head", DEMO / "head")
        ctx = {f"needs.plan.outputs.{k}": v for k, v in plan_out.items()} | {"matrix.shard": shard}
        with_ = {k: resolve(v, ctx) for k, v in probe_step["with"].items()}
        # the plan's device where /perfcheck asked for one, else the flow's own
        assert with_["device"] == ("cpu" if workflow == "perfcheck-cpu.yml" else "cuda")
        done, _ = runner.step(with_, ws, "pull_request_target", event)
        assert done.returncode == 0, done.stderr
        (artifacts / f"perfcheck-probes-{index}").mkdir()
        shutil.copy(ws / "perfcheck-out" / "probes.json", artifacts / f"perfcheck-probes-{index}")

    # perfcheck-publish.yml: the default branch checked out, the artifacts downloaded, report, publish.
    pub_ws = checkout(tmp_path / "publish", DEMO / "base")
    shutil.copytree(artifacts, pub_ws / "artifacts")
    run_event = copy.deepcopy(json.loads((DATA / "webhooks" / "workflow_run.json").read_text())[0])
    run_event["workflow_run"]["id"] = int(RUN_ID)
    report_step, publish_step = perfcheck_steps("perfcheck-publish.yml", "publish")
    ctx = {"github.token": TOKEN, "github.event.workflow_run.id": RUN_ID}
    done, report_out = runner.step(
        {k: resolve(v, ctx) for k, v in report_step["with"].items()}, pub_ws, "workflow_run", run_event
    )
    assert done.returncode == 0, done.stderr  # a `fail` verdict is the check's to show, not the step's
    assert report_out["verdict"] == "fail"
    result = json.loads((pub_ws / "perfcheck-out" / "result.json").read_text())
    assert [w["name"] for w in result["workloads"]] == ["classifier", "tiny"]  # both shards merged
    done, _ = runner.step(
        {k: resolve(v, ctx) for k, v in publish_step["with"].items()}, pub_ws, "workflow_run", run_event
    )
    assert done.returncode == 0, done.stderr

    (comment,) = github.comments(REPO, 2)
    assert "New graph break" in comment["body"] and "model.py:17" in comment["body"]
    (run,) = github.check_runs(REPO, HEAD)  # the check the plan job queued, now completed
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    assert run["details_url"] == f"https://github.com/{REPO}/actions/runs/{RUN_ID}"
    annotations = github.annotations(REPO, run["id"])
    assert any(a["path"] == "model.py" and a["start_line"] == 17 for a in annotations)


def _command(github: FakeGitHub, body: str, login: str, number: int) -> dict[str, Any]:
    """GitHub's issue_comment `created` example, edited: a comment just posted on PR ``number``."""
    ev = json.loads((DATA / "webhooks" / "issue_comment.json").read_text())[0]
    posted = github.add_comment(REPO, number, body, user=login)
    ev["issue"]["number"] = number
    ev["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{number}"}
    ev["comment"].update(id=posted["id"], body=body, created_at=posted["created_at"])
    ev["comment"]["user"]["login"] = login
    return ev


@pytest.mark.e2e
def test_a_fork_waits_refuses_an_outsider_and_runs_for_a_writer(github: FakeGitHub, tmp_path: Path) -> None:
    runner = Runner(github, tmp_path)
    fork_head = "f" * 40
    github.add_pull(
        REPO, 9, head_sha=fork_head, base_sha=BASE, head_repo="mallory/Hello-World", files=["m.py"]
    )
    ws = checkout(tmp_path / "plan", DEMO / "base")
    (plan_step,) = perfcheck_steps("perfcheck.yml", "plan")
    with_ = {k: resolve(v, {"github.token": TOKEN}) for k, v in plan_step["with"].items()}

    opened = json.loads((DATA / "webhooks" / "pull_request.json").read_text())[0]
    opened["number"] = opened["pull_request"]["number"] = 9
    opened["pull_request"]["head"]["sha"] = fork_head
    opened["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    done, out = runner.step(with_, ws, "pull_request_target", opened)
    assert done.returncode == 0, done.stderr
    assert (out["run"], out["awaiting_approval"]) == ("false", "true")
    assert github.check_runs(REPO, fork_head)[0]["output"]["title"] == "Waiting for approval"

    outsider = _command(github, "/perfcheck", "outsider", 9)
    done, out = runner.step(with_, ws, "issue_comment", outsider)
    assert done.returncode == 0 and out["run"] == "false"
    assert [r["content"] for r in github.reactions(REPO, outsider["comment"]["id"])] == ["confused"]

    github.backdate(10)  # the writer reads the PR before approving it
    writer = _command(github, "/perfcheck", "Codertocat", 9)
    done, out = runner.step(with_, ws, "issue_comment", writer)
    assert done.returncode == 0, done.stderr
    assert (out["run"], out["head_sha"]) == ("true", fork_head)
    assert [r["content"] for r in github.reactions(REPO, writer["comment"]["id"])] == ["eyes"]
    (check,) = github.check_runs(REPO, fork_head)
    assert check["output"]["title"] == "Queued" and check["external_id"] == RUN_ID


BISECT_CONFIG = """\
workloads:
  - name: classifier
    entry: model.py:build
    train: true
    probes: [compile]
compile:
  backend: aot_eager
budgets:
  max_new_graph_breaks: 0
"""


def _pull_request_history(repo: Path) -> list[str]:
    """The base commit (the demo's base), then a PR of three: a harmless change, the demo head's
    `.item()` (the graph break), a README."""
    repo.mkdir()
    git(repo, "init", "-q", "-b", "master")
    base_model = (DEMO / "base" / "model.py").read_text()
    steps = [
        ("a classifier", {"model.py": base_model, "perfcheck.yml": BISECT_CONFIG}),
        ("a note on the model", {"NOTES.md": "relu, two layers\n"}),
        ("log the activation scale", {"model.py": (DEMO / "head" / "model.py").read_text()}),
        ("readme", {"README.md": "python model.py\n"}),
    ]
    return [git_commit(repo, subject, files) for subject, files in steps]


def _pull_commits(repo: Path, base: str, head: str) -> list[PullCommit]:
    """The PR's commits as GitHub lists them (oldest first), from the repository's own history."""
    listed = git(repo, "log", "--reverse", "--format=%H%x00%P%x00%an%x00%B%x01", f"{base}..{head}")
    commits = []
    for record in filter(None, (r.strip("\n") for r in listed.split("\x01"))):
        sha, parents, author, message = record.split("\x00", 3)
        commits.append(PullCommit(sha, message, author, tuple(parents.split())))
    return commits


@pytest.mark.e2e
def test_a_failing_pull_request_of_several_commits_names_the_commit_in_the_comment(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    origin = tmp_path / "origin"
    base_sha, _, item_sha, head_sha = _pull_request_history(origin)
    fake_github.add_repo(REPO, default_branch="master")
    fake_github.add_token(TOKEN, login="github-actions[bot]", kind="app")
    fake_github.add_pull(
        REPO,
        3,
        head_sha=head_sha,
        base_sha=base_sha,
        files=["model.py", "README.md"],
        commits=_pull_commits(origin, base_sha, head_sha),  # what publish checks the bisect against
    )
    runner = Runner(fake_github, tmp_path)
    event = copy.deepcopy(json.loads((DATA / "webhooks" / "pull_request.json").read_text())[0])
    event["number"] = event["pull_request"]["number"] = 3
    event["pull_request"]["head"]["sha"], event["pull_request"]["base"]["sha"] = head_sha, base_sha

    def clone(dest: Path, sha: str) -> Path:  # actions/checkout, fetch-depth: 0
        subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
        git(dest, "checkout", "-q", "--detach", sha)
        return dest

    plan_ws = clone(tmp_path / "plan", base_sha)
    (plan_step,) = perfcheck_steps("perfcheck.yml", "plan")
    done, plan_out = runner.step(
        {k: resolve(v, {"github.token": TOKEN}) for k, v in plan_step["with"].items()},
        plan_ws,
        "pull_request_target",
        event,
    )
    assert done.returncode == 0, done.stderr
    assert (plan_out["run"], plan_out["bisect"]) == ("true", "auto")  # a same-repository PR
    artifacts = tmp_path / "artifacts"
    (artifacts / "perfcheck-plan").mkdir(parents=True)
    shutil.copy(plan_ws / "perfcheck-out" / "plan.json", artifacts / "perfcheck-plan" / "plan.json")

    (probe_step,) = perfcheck_steps("perfcheck.yml", "probe")
    doc = yaml.safe_load((WORKFLOWS / "perfcheck.yml").read_text())
    (head_checkout,) = [s for s in doc["jobs"]["probe"]["steps"] if s.get("with", {}).get("path") == "head"]
    assert head_checkout["with"]["fetch-depth"] == 0  # the history bisect searches
    logs = []
    for index, shard in enumerate(doc["jobs"]["probe"]["strategy"]["matrix"]["shard"]):
        ws = tmp_path / f"gpu-{index}"
        clone(ws / "base", base_sha)
        clone(ws / "head", head_sha)
        ctx = {f"needs.plan.outputs.{k}": v for k, v in plan_out.items()} | {"matrix.shard": shard}
        done, _ = runner.step(
            {k: resolve(v, ctx) for k, v in probe_step["with"].items()}, ws, "pull_request_target", event
        )
        assert done.returncode == 0, done.stderr
        logs.append(done.stderr)
        (artifacts / f"perfcheck-probes-{index}").mkdir()
        shutil.copy(ws / "perfcheck-out" / "probes.json", artifacts / f"perfcheck-probes-{index}")
    assert "perfcheck bisect: commit 1/3" in logs[0], logs[0][-3000:]

    pub_ws = clone(tmp_path / "publish", base_sha)
    shutil.copytree(artifacts, pub_ws / "artifacts")
    run_event = copy.deepcopy(json.loads((DATA / "webhooks" / "workflow_run.json").read_text())[0])
    run_event["workflow_run"]["id"] = int(RUN_ID)
    ctx = {"github.token": TOKEN, "github.event.workflow_run.id": RUN_ID}
    for step in perfcheck_steps("perfcheck-publish.yml", "publish"):
        done, _ = runner.step(
            {k: resolve(v, ctx) for k, v in step["with"].items()}, pub_ws, "workflow_run", run_event
        )
        assert done.returncode == 0, done.stderr
    result = json.loads((pub_ws / "perfcheck-out" / "result.json").read_text())
    [located] = [f for f in result["bisect"]["findings"] if f["category"] == "graph_break_added"]
    assert located["first_bad"]["sha"] == item_sha and located["probe_runs"] == 2

    (comment,) = fake_github.comments(REPO, 3)
    body = comment["body"]
    assert "New graph break" in body and "Where each finding came from" in body
    section = body[body.index("Where each finding came from") :]
    assert f"`{item_sha[:10]}` log the activation scale (Ada)" in section, section[:2000]


AA_CONFIG = """\
workloads:
  - name: classifier
    entry: model.py:build
compile:
  backend: aot_eager
timing: {compiled: false, processes: 2, max_processes: 2}
history:
  enabled: true
"""
AA_WORKFLOWS = ("perfcheck-aa-cpu.yml", "perfcheck-aa.yml")
STORE = ".perfcheck/history.sqlite"  # history.path's default, which the workflows cache


def _cache_steps(workflow: str) -> list[tuple[str, dict[str, Any]]]:
    """(job, step) of every actions/cache step of a workflow."""
    doc = yaml.safe_load((WORKFLOWS / workflow).read_text())
    return [
        (job, step)
        for job, body in doc["jobs"].items()
        for step in body["steps"]
        if str(step.get("uses", "")).startswith("actions/cache/")
    ]


def test_the_aa_workflows_keep_one_store_that_the_pull_request_workflows_only_read() -> None:
    from perfcheck.settings import HistoryConfig

    assert HistoryConfig().path == STORE
    for workflow in AA_WORKFLOWS:
        doc = yaml.safe_load((WORKFLOWS / workflow).read_text())
        triggers = doc[True]  # YAML 1.1 reads the key `on` as true
        assert set(triggers) >= {"schedule", "push"} and triggers["push"]["branches"]
        assert doc["concurrency"] == {"group": "perfcheck-aa", "cancel-in-progress": False}
        (probe_step,) = perfcheck_steps(workflow, "probe")
        assert probe_step["with"]["sha"] == "${{ github.sha }}"  # base and head: this one commit
        checkouts = [s for s in doc["jobs"]["probe"]["steps"] if "actions/checkout@" in s.get("uses", "")]
        assert [s["with"]["path"] for s in checkouts] == ["base", "head"]
        assert all("ref" not in s["with"] for s in checkouts)  # both the commit that triggered the run
        steps = [(job, s) for job, s in _cache_steps(workflow) if s["with"]["path"] == STORE]
        assert [(job, s["uses"].split("@")[0]) for job, s in steps] == [
            ("record", "actions/cache/restore"),
            ("record", "actions/cache/save"),
        ]
        restore, save = (s["with"] for _, s in steps)
        assert restore["path"] == save["path"] == STORE and restore["key"] == save["key"]
        assert (
            restore["key"].startswith(restore["restore-keys"])
            and doc["jobs"]["record"]["runs-on"] == "ubuntu-latest"
        )
    # Base's records: saved by each A/A run's probe job (the default branch's own code), restored
    # read-only by the PR's probe job of the same runners; no other workflow names them.
    records = {
        (workflow, job, s["uses"].split("@")[0]): s["with"]
        for workflow in sorted(p.name for p in WORKFLOWS.glob("*.yml"))
        for job, s in _cache_steps(workflow)
        if s["with"]["path"] == "perfcheck-store"
    }
    pairs = {
        ("perfcheck-aa-cpu.yml", "perfcheck-cpu.yml"): "perfcheck-base-store-",
        ("perfcheck-aa.yml", "perfcheck.yml"): "perfcheck-gpu-base-store-",
    }
    assert set(records) == {
        key
        for (aa, pr) in pairs
        for key in ((aa, "probe", "actions/cache/save"), (pr, "probe", "actions/cache/restore"))
    }
    for (aa, pr), prefix in pairs.items():
        save, restore = (
            records[(aa, "probe", "actions/cache/save")],
            records[(pr, "probe", "actions/cache/restore")],
        )
        assert save["key"] == prefix + "${{ github.sha }}" and restore["restore-keys"] == prefix
    # Neither runner class's PRs find the other's records by prefix (they would only be refused).
    assert not any(a != b and b.startswith(a) for a in pairs.values() for b in pairs.values())
    # The PR workflows restore the same entry, on hosted runners, and never save it.
    for workflow, job in (
        ("perfcheck.yml", "plan"),
        ("perfcheck-cpu.yml", "plan"),
        ("perfcheck-publish.yml", "publish"),
    ):
        ((where, step),) = [(j, s) for j, s in _cache_steps(workflow) if s["with"]["path"] == STORE]
        assert where == job and step["uses"].startswith("actions/cache/restore@")
        assert step["with"]["path"] == STORE and step["with"]["restore-keys"] == "perfcheck-history-"


@pytest.mark.e2e
def test_the_cpu_aa_workflow_records_an_aa_run_that_history_noise_counts(
    fake_github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfcheck.cli.main import main

    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    sha = git_commit(
        origin,
        "a classifier",
        {"model.py": (DEMO / "base" / "model.py").read_text(), "perfcheck.yml": AA_CONFIG},
    )
    runner = Runner(fake_github, tmp_path, {"install": "false", "python": sys.executable})
    event = {"ref": "refs/heads/main", "after": sha, "repository": {"full_name": REPO}}

    def clone(dest: Path) -> Path:  # actions/checkout of github.sha
        subprocess.run(["git", "clone", "-q", str(origin), str(dest)], check=True)
        return dest

    # Job `probe`: the default branch's commit checked out twice, as base and head.
    ws = tmp_path / "probe"
    clone(ws / "base")
    clone(ws / "head")
    (probe_step,) = perfcheck_steps("perfcheck-aa-cpu.yml", "probe")
    done, _ = runner.step(
        {k: resolve(v, {"github.sha": sha}) for k, v in probe_step["with"].items()}, ws, "push", event
    )
    assert done.returncode == 0, done.stderr

    # Job `record`: the default branch at the root, the probes downloaded, the store restored
    # (none yet: the first run), the review recorded in it.
    record_ws = clone(tmp_path / "record")
    (record_ws / "artifacts").mkdir()
    shutil.copy(ws / "perfcheck-out" / "probes.json", record_ws / "artifacts")
    (report_step,) = perfcheck_steps("perfcheck-aa-cpu.yml", "record")
    done, out = runner.step(dict(report_step["with"]), record_ws, "push", event)
    assert done.returncode == 0, done.stderr
    result = json.loads((record_ws / "perfcheck-out" / "result.json").read_text())
    assert result["base"]["revision"] == result["head"]["revision"] == sha
    assert out["verdict"] == result["verdict"]  # whatever it is, the step did not fail on it

    assert main(["history", "noise", "--db", str(record_ws / STORE)]) == 0
    shown = capsys.readouterr().out
    row = next(line for line in shown.splitlines() if line.startswith("classifier "))
    assert row.split()[:2] == ["classifier", "1"] and "step time" in row, shown
