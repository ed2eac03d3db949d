"""A first adoption (issue 29): base has no perfcheck.yml, so the PR's own is followed. The PR's
code must not be able to change it after it was read, and nothing in it may widen the gate in the
trusted report job. Each test performs the attack against the real commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, git_commit, perfcheck_cli, write_tree

from perfcheck.runner.process import sandbox

# A graph break in head (base has none), so the default budget, 0 new breaks, fails the review.
MODEL = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = self.fc(x)
        {change}
        return torch.relu(h)


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(4, 8).to(device),)
"""
BREAK = "if h.sum().item() > 0:\n            h = h * 2"

CONFIG = """\
workloads:
  - {name: net, entry: model.py:build}
compile: {backend: aot_eager}
"""

# Prepended to head's model.py: as the probe imports it, it loosens the PR's own perfcheck.yml.
REWRITE = """\
from pathlib import Path as _P

try:
    _P(__file__).with_name("perfcheck.yml").write_text(
        "workloads:\\n  - {name: net, entry: model.py:build}\\ncompile: {backend: aot_eager}\\n"
        "budgets: {max_new_graph_breaks: 1000}\\n"
    )
except OSError:
    pass  # a tree the probe cannot write to: the attack is stopped sooner
"""


# The attacks run without the per-side sandbox, in which the tree is read-only to its own code and
# the rewrite fails at once (test_sandbox.py): what is shown here is the defence beneath it, which
# holds where a machine cannot make a sandbox (UNSANDBOXED).


def _trees(root: Path, *, head_is_checkout: bool) -> tuple[Path, Path]:
    base = write_tree(root / "base", {"model.py": MODEL.replace("{change}", "pass")})
    head_files = {"model.py": REWRITE + MODEL.replace("{change}", BREAK), "perfcheck.yml": CONFIG}
    head = root / "head"
    if head_is_checkout:
        head.mkdir(parents=True)
        git(head, "init", "-q")
        git_commit(head, "adopt perfcheck", head_files)
    else:
        write_tree(head, head_files)
    return base, head


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The probe job of a first adoption whose workload rewrites head/perfcheck.yml as it runs:
    (base checkout, head checkout, probes.json)."""
    base, head = _trees(tmp_path_factory.mktemp("adopt"), head_is_checkout=True)
    out = head.parent / "probed"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(sandbox.DISABLE_ENV, "0")  # UNSANDBOXED, above, says why
        done = perfcheck_cli(
            "probe", "--base", str(base), "--head", str(head), "--probes", "compile", "--out", str(out)
        )
    assert done.returncode == 0, done.stderr
    return base, head, out / "probes.json"


@pytest.mark.e2e
def test_a_workload_that_rewrites_the_prs_config_is_judged_by_the_committed_one(
    probed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    base, head, probes = probed
    if "1000" not in (head / "perfcheck.yml").read_text():
        pytest.fail("the workload did not rewrite head/perfcheck.yml: the attack was not performed")
    # What the probe job hands to the report job is the commit's text, read before the probes ran.
    assert json.loads(probes.read_text())["head_config"] == CONFIG
    out = tmp_path / "report"
    done = perfcheck_cli("report", str(probes), "--probes", "compile", "--out", str(out), cwd=base)
    assert done.returncode == 1, done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["config_origin"] == "head" and result["verdict"] == "fail"
    assert [f["category"] for f in result["findings"]] == ["graph_break_added"]
    top = "\n".join((out / "comment.md").read_text().splitlines()[:5])
    assert "as committed" in top and "no more loosely than perfcheck's defaults" in top


@pytest.mark.e2e
def test_a_first_adoption_in_a_plain_tree_is_read_before_any_probe_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No git here (a tree copied out of a checkout): the file is read before the first probe.
    monkeypatch.setenv(sandbox.DISABLE_ENV, "0")  # UNSANDBOXED, above, says why
    base, head = _trees(tmp_path, head_is_checkout=False)
    out = tmp_path / "out"
    done = perfcheck_cli(
        "review", "--base", str(base), "--head", str(head), "--probes", "compile", "--out", str(out)
    )
    assert done.returncode == 1, done.stderr
    assert "1000" in (head / "perfcheck.yml").read_text()  # the attack ran
    assert [f["category"] for f in json.loads((out / "result.json").read_text())["findings"]] == [
        "graph_break_added"
    ]


EVIL_MODULE = """\
from pathlib import Path
Path(__file__).with_name("imported-by-the-trusted-job").write_text("ran")
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("plugins: [evilmod]\n", "plugins"),
        ("history: {enabled: true, path: ../escaped.sqlite}\n", "history"),
        ("acks:\n  - {category: graph_break_added, reason: known}\n", "acks"),
        ("budgets: {max_new_graph_breaks: 1000}\n", "budgets.max_new_graph_breaks"),
        ("timing: {confidence: 0.6}\n", "timing.confidence"),
        # Issue 45: the PR's own severity turned its failing review into a pass
        ("matrix:\n  graph_break_added: {severity: info}\n", "matrix.graph_break_added.severity"),
    ],
)
def test_the_trusted_report_refuses_what_would_widen_a_first_adoptions_gate(
    probed: tuple[Path, Path, Path], tmp_path: Path, extra: str, key: str
) -> None:
    # probes.json comes from the job that ran PR code: its config text is the PR's to choose.
    base, _, probes = probed
    doc = json.loads(probes.read_text())
    doc["head_config"] = CONFIG + extra
    forged = tmp_path / "probed" / "probes.json"
    forged.parent.mkdir()
    forged.write_text(json.dumps(doc))
    modules = tmp_path / "site"  # an installed module the PR names
    write_tree(modules, {"evilmod.py": EVIL_MODULE})
    checkout = tmp_path / "checkout"  # the report job's working directory, base's checkout
    write_tree(checkout, {"model.py": (base / "model.py").read_text()})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, str(modules)])}
    out = checkout / "out"
    done = subprocess.run(
        [sys.executable, "-m", "perfcheck", "report", str(forged), "--probes", "compile", "--out", str(out)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"the pull request's perfcheck.yml (in probes.json): {key}:" in done.stderr
    assert not (modules / "imported-by-the-trusted-job").exists()
    assert not (tmp_path / "escaped.sqlite").exists() and not list(checkout.rglob("*.sqlite"))
    assert not (out / "result.json").exists()
