"""PR code cannot outlive its probe or hand back a result of its own making (real probe processes).

The attacks are workloads, as a PR would write them: one forks a daemon into a session of its own
that rewrites the aggregated results after the probe has ended; one writes a forged result where
the old worker wrote its result file, and exits before the worker could.

Both run without the per-side sandbox (perfcheck/runner/process/sandbox.py), which would stop them sooner (the
results folder is read-only inside it, and a daemon dies with its PID namespace): these are the
defences beneath it, which hold where a machine cannot make one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, write_tree

from perfcheck.runner.process import reaper, sandbox

DAEMON = """\
import os
import subprocess
import sys
import time

import torch
from torch import nn

DAEMON = '''
import os, sys, time
if os.fork():            # the second fork: the daemon is nobody's child any more
    os._exit(0)
open(sys.argv[2], "w").write(str(os.getpid()))
time.sleep(3)            # until the probe has ended and been judged
open(sys.argv[1], "w").write('{{"forged": true}}')
'''


def build(device):
    out = os.path.dirname(os.path.dirname(os.path.abspath(sys.argv[1])))  # OUT/probes/<stem>.spec.json
    subprocess.Popen(
        [sys.executable, "-c", DAEMON, os.path.join(out, "probes.json"), {pid_file!r}],
        start_new_session=True,  # a session of its own: out of the probe's process group
    )
    time.sleep(0.5)
    return nn.Linear(4, 4).to(device), (torch.randn(2, 4).to(device),)
"""

FORGER = """\
import json
import os
import sys

FORGED = {forged}


def build(device):
    # Where the worker used to write its result, a result claiming all is well; then exit at once.
    spec = sys.argv[1]
    with open(spec.removesuffix(".spec.json") + ".json", "w") as f:
        json.dump(FORGED, f)
    os._exit(0)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it runs nothing and writes nothing.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(autouse=True)
def _unsandboxed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.DISABLE_ENV, "0")


def test_a_setsid_daemon_does_not_outlive_its_probe(review: ReviewFn, tmp_path: Path) -> None:
    assert reaper.become_subreaper(), "this test needs Linux's child subreaper"
    pid_file = tmp_path / "daemon.pid"
    tree = write_tree(tmp_path / "tree", {"model.py": DAEMON.format(pid_file=str(pid_file))})
    result = review(tree, tree, config=fast_config(), probes=("compile",))
    assert [r.status for wl in result.workloads for r in wl.base + wl.head] == ["ok", "ok"]
    daemons = [int(pid_file.read_text())]
    time.sleep(4)  # past the moment the daemon meant to strike
    assert not any(_alive(pid) for pid in daemons)
    probes = json.loads((tmp_path / "out" / "probes.json").read_text())
    assert "forged" not in probes and probes["kind"] == "probe-run"
    assert "child subreaper" in reaper.guarantee()


def test_a_workload_that_forges_a_result_file_and_exits_is_a_crash(review: ReviewFn, tmp_path: Path) -> None:
    forged = {
        "probe": "compile",
        "workload": "net",
        "side": "head",
        "status": "ok",
        "duration_s": 1.0,
        "compile": {
            "backend": "aot_eager",
            "graph_count": 1,
            "graph_break_count": 0,
            "recompile_count": 0,
            "cold_compile_s": 0.1,
        },
    }
    head = write_tree(tmp_path / "head", {"model.py": FORGER.format(forged=json.dumps(forged))})
    base = write_tree(tmp_path / "base", {"model.py": FORGER.format(forged=json.dumps(forged))})
    result = review(base, head, config=fast_config(), probes=("compile",))
    statuses = {(r.side, r.status) for wl in result.workloads for r in wl.base + wl.head}
    assert statuses == {("base", "crashed"), ("head", "crashed")}
    head_result = result.workloads[0].head[0]
    assert "ended without a result" in (head_result.message or "")
