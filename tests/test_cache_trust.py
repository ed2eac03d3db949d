"""Caches by trust (issue 55): no cache a job that ran PR code saved is restored by a job that
records or publishes. actions/cache saves at the job's end, after PR code ran; the action's pip
cache, which the trusted jobs install torch and perfcheck from, must not be saved by a PR's probe
job; the example workflows' PR jobs restore only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
SAVING = "actions/cache@"


def _truthy(expression: str, inputs: dict[str, str]) -> bool:
    """The few forms action.yml's `if:` uses, evaluated for these inputs: `inputs.X == 'v'`,
    `&&`, `!( … )`. Anything else fails the test (a new form needs reading here too)."""
    text = expression
    for name, value in inputs.items():
        text = text.replace(f"inputs.{name}", repr(value))
    text = text.replace("&&", " and ").replace("||", " or ").replace("!(", " not (")
    assert "inputs." not in text, f"an input this test does not set: {expression}"
    # The action's own file, its names replaced by literals above: no builtins, nothing else.
    return bool(eval(text, {"__builtins__": {}}))


def _steps() -> list[dict[str, Any]]:
    return yaml.safe_load((REPO_ROOT / "action.yml").read_text())["runs"]["steps"]


def test_a_probe_job_reviewing_a_pr_saves_no_cache_and_still_restores_pip() -> None:
    pr_probe = {"install": "true", "mode": "probe", "record-base": ""}
    running = [s for s in _steps() if "uses" in s and _truthy(s.get("if", "true"), pr_probe)]
    assert not [s["uses"] for s in running if SAVING in s["uses"]], running
    assert any("actions/cache/restore@" in s["uses"] for s in running)
    # The jobs that run no PR code save it, the recording probe job too.
    for trusted in (
        {"mode": "report", "record-base": ""},
        {"mode": "probe", "record-base": "perfcheck-store"},
    ):
        inputs = {"install": "true", **trusted}
        assert any(SAVING in s.get("uses", "") for s in _steps() if _truthy(s.get("if", "true"), inputs))


def test_the_example_workflows_pr_jobs_never_save_a_cache() -> None:
    """A job that checks out the PR's head (`ref:` from the plan) restores only."""
    pr_jobs = 0
    for path in sorted((REPO_ROOT / "examples" / "workflows").glob("*.yml")):
        workflow = yaml.safe_load(path.read_text())
        for name, job in workflow["jobs"].items():
            steps = job.get("steps", [])
            runs_pr = any(
                "actions/checkout" in s.get("uses", "")
                and "head_sha" in str(s.get("with", {}).get("ref", ""))
                for s in steps
            )
            if runs_pr:
                pr_jobs += 1
                saving = [
                    s["uses"]
                    for s in steps
                    if SAVING in s.get("uses", "") or "cache/save@" in s.get("uses", "")
                ]
                assert not saving, f"{path.name}: {name} checks out the PR and saves {saving}"
    assert pr_jobs >= 2  # the GPU and the CPU PR workflows' probe jobs
