"""Each side's probe processes run in a sandbox of their own (issue 29, runner/sandbox.py): head's
code cannot rewrite base's tree, perfcheck's install or base's compile cache, cannot reach the
orchestrator's descriptors, and shares no /tmp with anything. Performed by a hostile head as a PR
would write it, in real probe processes, forked from a fork server and started fresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ReviewFn, model_tree, write_tree

from perfcheck import preflight
from perfcheck.runner import sandbox
from perfcheck.runner.forkserver import DISABLE_ENV as FORKSERVER_ENV
from perfcheck.runner.orchestrate import SHARED_CACHE_ENV

# Each attack prints one line, ATTACK <name>: held <why> | BROKE; the test reads them from the log.
HOSTILE = """\
import ctypes
import glob
import os
import sys

import perfcheck
import torch
from torch import nn

BASE_MODEL = {base_model!r}
ORCHESTRATOR = {orchestrator}


def attempt(name, act):
    try:
        act()
    except OSError as err:
        print(f"ATTACK {{name}}: held {{err.strerror}}", flush=True)
    else:
        print(f"ATTACK {{name}}: BROKE", flush=True)


def rewrite_base():
    with open(BASE_MODEL, "w") as f:
        f.write(open(__file__).read().replace("torch.relu", "torch.nn.functional.gelu"))


def plant_in(folder):
    def act():
        path = os.path.join(folder, "perfcheck_planted.py")
        with open(path, "x") as f:
            f.write("print('planted')")
        os.unlink(path)  # proved; leave nothing behind even when it broke
    return act


def poison_base_cache():
    workdir = os.path.dirname(os.path.abspath(sys.argv[1]))  # OUT/probes/<stem>.spec.json
    found = glob.glob(os.path.join(workdir, "cache", "base-*"))
    if not found:
        raise FileNotFoundError(2, "no cache of base's to be found")
    with open(os.path.join(found[0], "poison"), "w") as f:
        f.write("x")


def orchestrator_fds():
    os.listdir(f"/proc/{{ORCHESTRATOR}}/fd")


def pidfd_open():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(434, ORCHESTRATOR, 0) < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def fork_server():
    # The process this one was forked from (a fork server) or started by: named, it could be
    # killed, traced or asked for processes. In a PID namespace of its own it has no parent to see.
    parent = os.getppid()
    if parent == 0:
        raise OSError(3, "no parent process to be seen")
    open(f"/proc/{{parent}}/cmdline").read()


def shared_tmp():
    with open("/tmp/perfcheck-sandbox-attack", "w") as f:
        f.write("x")
    # Written: fine if this /tmp is the side's own, which the test checks from outside.
    raise OSError(0, "written to this side's own /tmp")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def build(device):
    attempt("base tree", rewrite_base)
    attempt("perfcheck install", plant_in(os.path.dirname(perfcheck.__file__)))
    attempt("torch install", plant_in(os.path.dirname(torch.__file__)))
    attempt("base cache", poison_base_cache)
    attempt("orchestrator fds", orchestrator_fds)
    attempt("pidfd_open", pidfd_open)
    attempt("fork server", fork_server)
    attempt("tmp", shared_tmp)
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""

ATTACKS = (
    "base tree",
    "perfcheck install",
    "torch install",
    "base cache",
    "orchestrator fds",
    "pidfd_open",
    "fork server",
)

needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)


def attacks_in(out: Path) -> dict[str, str]:
    """Every ATTACK line of head's probe logs: name -> what happened."""
    found: dict[str, str] = {}
    for log in sorted((out / "probes").glob("head-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ATTACK "):
                name, _, outcome = line.removeprefix("ATTACK ").partition(": ")
                found[name] = outcome
    return found


@needs_sandbox
@pytest.mark.parametrize("started", ["forked", "fresh"])
def test_head_cannot_touch_base_perfcheck_caches_or_the_orchestrator(
    review: ReviewFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: str
) -> None:
    # Per-side caches, as a review in Actions has them (the suite's shared one is a test knob).
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    if started == "fresh":
        monkeypatch.setenv(FORKSERVER_ENV, "0")
    base = model_tree(tmp_path / "base")
    original = (base / "model.py").read_text()
    source = HOSTILE.format(base_model=str(base / "model.py"), orchestrator=os.getpid())
    head = write_tree(tmp_path / "head", {"model.py": source})
    (Path("/tmp") / "perfcheck-sandbox-attack").unlink(missing_ok=True)

    result = review(base, head, probes=("compile", "export"))

    outcomes = attacks_in(tmp_path / "out")
    assert set(ATTACKS) <= set(outcomes), outcomes
    broke = {name: how for name, how in outcomes.items() if not how.startswith("held")}
    assert not broke, broke
    assert (base / "model.py").read_text() == original
    assert not list((tmp_path / "out" / "probes" / "cache").glob("base-*/poison"))
    assert not (Path("/tmp") / "perfcheck-sandbox-attack").exists()
    # Base measured its own code: the IR change head made is found, not hidden by a poisoned base.
    assert "export_ir_changed" in {f.category for f in result.findings}
    assert all(r.status == "ok" for wl in result.workloads for r in [*wl.base, *wl.head])


@needs_sandbox
def test_a_sandboxed_process_sees_its_own_tree_and_writes_only_its_own_folders(tmp_path: Path) -> None:
    """The launcher around a fresh process, as the orchestrator starts one: the own tree readable,
    the hidden tree gone, the writable folder and /tmp writable, exit code passed through."""
    own, other, cache, scratch = (tmp_path / n for n in ("own", "other", "cache", "scratch"))
    for folder in (own, other, cache):
        folder.mkdir()
    (own / "mine.txt").write_text("mine")
    (other / "theirs.txt").write_text("theirs")
    walls = json.dumps(
        {"scratch": str(scratch), "writable": [str(cache)], "hidden": [str(other)], "visible": [str(own)]}
    )
    script = f"""
import os, sys
assert open({str(own / "mine.txt")!r}).read() == "mine"
assert not os.path.exists({str(other / "theirs.txt")!r})
open({str(cache / "written")!r}, "w").write("ok")
open("/tmp/scratch-file", "w").write("ok")
for path in ({str(own / "new")!r}, {sys.prefix + "/planted"!r}):
    try:
        open(path, "w")
    except OSError:
        pass
    else:
        sys.exit(9)
assert os.getpid() == 1
sys.exit(7)
"""
    done = subprocess.run(
        sandbox.command(walls, [sys.executable, "-c", script]), capture_output=True, text=True, check=False
    )
    assert done.returncode == 7, done.stderr
    assert (cache / "written").read_text() == "ok"
    assert (scratch / "scratch-file").read_text() == "ok"
    assert not (own / "new").exists()


def test_actions_refuses_a_review_without_a_sandbox_or_with_one_shared_cache() -> None:
    actions = {"GITHUB_ACTIONS": "true"}
    with pytest.raises(preflight.SetupError, match="user namespaces"):
        preflight.sandboxed(actions, lambda: "unshare: Operation not permitted")
    with pytest.raises(preflight.SetupError, match=SHARED_CACHE_ENV):
        preflight.sandboxed({**actions, SHARED_CACHE_ENV: "/tmp/cache"}, lambda: None)
    # Elsewhere the review runs and says the sides are not isolated; an operator may turn it off.
    isolated, warning = preflight.sandboxed({}, lambda: "unshare: Operation not permitted")
    assert not isolated and warning is not None and "unisolated" in warning
    isolated, warning = preflight.sandboxed({**actions, sandbox.DISABLE_ENV: "0"}, lambda: None)
    assert not isolated and warning is not None and "can change what base measures" in warning
    assert preflight.sandboxed(actions, lambda: None) == (True, None)
