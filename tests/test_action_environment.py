"""The action's probe step refuses, before any Python starts, an environment whose import
variables name a folder of the pull request's tree (issue 55): an interpreter imports
sitecustomize.py from PYTHONPATH at its start, before perfcheck's walls are up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_tree

REPO_ROOT = Path(__file__).resolve().parent.parent


def _probe_step(tmp_path: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    marker = tmp_path / "ran"
    planted = f"open({str(marker)!r}, 'w').write('the PR ran here')\n"
    write_tree(tmp_path / "head", {"sitecustomize.py": planted, "lib/sitecustomize.py": planted})
    write_tree(tmp_path / "base", {"model.py": "x = 1\n"})
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "RUNNER_TEMP": str(tmp_path / "runner"),
        "PERFCHECK_MODE": "probe",
        "PERFCHECK_INSTALL": "false",
        "PERFCHECK_PYTHON": sys.executable,
        "PERFCHECK_BASE": "base",
        "PERFCHECK_HEAD": "head",
        "PERFCHECK_OUT": "out",
        "PERFCHECK_DEVICE": "cpu",
        "PERFCHECK_SHARD": "1/1",
        **extra,
    }
    return subprocess.run(
        ["bash", str(REPO_ROOT / "action" / "run.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
@pytest.mark.parametrize(
    "extra",
    [
        {"PYTHONPATH": "head"},
        {"PYTHONPATH": "/usr/lib/nothing-here:./head/lib"},
        {"PYTHONHOME": "head"},
    ],
    ids=["relative", "among-others", "home"],
)
def test_an_import_variable_naming_the_pr_tree_is_refused_before_python_starts(
    tmp_path: Path, extra: dict[str, str]
) -> None:
    done = _probe_step(tmp_path, extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "names a folder of the pull request's tree" in done.stdout
    assert not (tmp_path / "ran").exists()  # no interpreter started with it
    assert "nothing-here" not in done.stdout  # named, not echoed into a workflow command


@pytest.mark.e2e
def test_an_import_path_outside_the_trees_goes_on_to_perfcheck(tmp_path: Path) -> None:
    """Outside both trees it is the workflow's own: the step starts perfcheck with it (whose own
    refusal of an unknown device ends the step here, after the site's sitecustomize.py ran)."""
    started = tmp_path / "started"
    site = write_tree(tmp_path / "site", {"sitecustomize.py": f"open({str(started)!r}, 'w').write('1')\n"})
    done = _probe_step(tmp_path, {"PYTHONPATH": str(site), "PERFCHECK_DEVICE": "tpu"})
    assert "names a folder of the pull request's tree" not in done.stdout, done.stdout
    assert done.returncode == 2 and "tpu" in done.stderr, done.stderr
    assert started.exists() and not (tmp_path / "ran").exists()
