"""Per-side probe processes fork from a server that imported torch once
(perfcheck/runner/process/forkserver.py): each still runs as a fresh process would, alone in its session,
holding none of the server's descriptors; a server that cannot start or dies sends the probes back to fresh
processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ReviewFn, fast_config, write_tree

from perfcheck.review import ReviewRequest, run
from perfcheck.runner.process import sandbox
from perfcheck.runner.process.forkserver import DISABLE_ENV, ForkServers

# These look at the server from its children (its command line, its pid, killing it), which a
# sandboxed child cannot (it has a PID namespace of its own: test_sandbox.py); they run unsandboxed.

# build() records what its process looks like from inside, one JSON line per probe process.
RECORDING = """
import json, os, sys
import torch
from torch import nn


def build(device):
    links = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        parent = f.read().decode().split("\\0")
    with open(f"/proc/{os.getppid()}/environ", "rb") as f:
        parent_env = f.read().split(b"\\0")
    with open(os.environ["PERFCHECK_TEST_RECORD"], "a") as f:
        f.write(json.dumps({
            "parent": parent,
            "parent_pid": os.getppid(),
            "own_session": os.getsid(0) == os.getpid(),
            "cwd": os.getcwd(),
            "sockets": [link for link in links if link.startswith("socket:")],
            "main": sys.modules["__main__"].__spec__.name,
            "argv": sys.argv[1:],
            "nvml_check": os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK"),
            "parent_nvml_check": b"PYTORCH_NVML_BASED_CUDA_CHECK=1" in parent_env,
        }) + "\\n")
    return nn.Linear(4, 2).to(device), (torch.randn(3, 4).to(device),)
"""

# A head whose build() kills the fork server it was forked from (and only a fork server).
KILLS_ITS_SERVER = """
import os, signal
import torch
from torch import nn


def build(device):
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        if b"perfcheck.runner.process.forkserver" in f.read():
            os.kill(os.getppid(), signal.SIGKILL)
    return nn.Linear(4, 2).to(device), (torch.randn(3, 4).to(device),)
"""


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_per_side_probes_fork_from_one_server_and_run_as_fresh_processes(
    tmp_path: Path, review: ReviewFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("PERFCHECK_TEST_RECORD", str(record))
    monkeypatch.setenv(sandbox.DISABLE_ENV, "0")
    base = write_tree(tmp_path / "base", {"model.py": RECORDING})
    head = write_tree(tmp_path / "head", {"model.py": RECORDING})
    result = review(base, head, fast_config(), probes=("compile", "export"))
    assert result.verdict == "pass", result.findings
    forked = _records(record)
    assert len(forked) >= 4  # compile and export, on each side
    assert {r["cwd"] for r in forked} == {str(base.resolve()), str(head.resolve())}
    assert len({r["parent_pid"] for r in forked}) == 1  # one server for the review's one interpreter
    for r in forked:
        assert "perfcheck.runner.process.forkserver" in r["parent"]
        assert r["own_session"] and r["sockets"] == [], r  # nothing of the server's is held
        assert r["main"] == "perfcheck.runner.process.worker" and r["argv"][1] == "fd:3"
        # The server counts CUDA devices through NVML (CUDA's driver stays uninitialized, so its
        # children can use CUDA); the child has the environment it asked for.
        assert r["parent_nvml_check"] and r["nvml_check"] is None, r

    record.unlink()
    monkeypatch.setenv(DISABLE_ENV, "0")
    review(base, head, fast_config(), probes=("compile",))
    fresh = _records(record)
    assert fresh and all("perfcheck.runner.process.forkserver" not in r["parent"] for r in fresh)
    assert all(r["own_session"] and r["main"] == "perfcheck.runner.process.worker" for r in fresh)


@pytest.mark.e2e
def test_a_probe_that_kills_its_fork_server_is_a_crash_and_the_other_probes_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sandbox.DISABLE_ENV, "0")
    fine = RECORDING.replace('os.environ["PERFCHECK_TEST_RECORD"]', "os.devnull")
    base = write_tree(tmp_path / "base", {"model.py": fine})
    head = write_tree(tmp_path / "head", {"model.py": KILLS_ITS_SERVER})
    # The review's own servers, not the module's: this one is killed.
    config, out = fast_config(), tmp_path / "out"
    result, _ = run(ReviewRequest(base, head, config, out, probes=("compile", "export")))
    [wl] = result.workloads
    status = {(r.side, r.probe): r.status for r in (*wl.base, *wl.head)}
    # The head's compile probe, forked, ended its server: a crash of that probe, named so.
    assert status.pop(("head", "compile")) == "crashed"
    [killer] = [r for r in wl.head if r.probe == "compile"]
    assert "fork server ended" in (killer.message or "")
    # Every probe after it started fresh (the export probe's head has no server left to kill).
    assert set(status.values()) == {"ok"}, status
    assert result.verdict == "fail"


def test_a_server_that_cannot_start_means_fresh_processes(tmp_path: Path) -> None:
    with ForkServers(tmp_path) as servers:
        for _ in range(2):
            env = dict(os.environ)
            assert (
                servers.fork("/bin/false", "perfcheck.runner.process.worker", [], str(tmp_path), env, 1, 2)
                is None
            )
    assert [p.name for p in tmp_path.iterdir()] == ["forkserver-0.log"]  # tried once, not per probe


@pytest.mark.e2e
def test_one_server_serves_environments_that_differ_only_where_imports_do_not_read(tmp_path: Path) -> None:
    logs, result = tmp_path / "child.log", tmp_path / "result"
    env = dict(os.environ)
    with ForkServers(tmp_path) as servers, logs.open("wb") as log, result.open("wb") as out:

        def fork(**changes: str) -> int | None:
            child = servers.fork(
                sys.executable,
                "json.tool",
                ["--help"],
                str(tmp_path),
                {**env, **changes},
                log.fileno(),
                out.fileno(),
            )
            assert child is not None
            try:
                return child.wait(60)
            finally:
                child.close()

        # Each compile cache is the probe's own; pytest renames the test it runs: one server.
        assert fork(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "a"), PYTEST_CURRENT_TEST="a (call)") == 0
        assert fork(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "b"), PYTEST_CURRENT_TEST="b (call)") == 0
        assert sorted(p.name for p in tmp_path.glob("forkserver-*.log")) == ["forkserver-0.log"]
    assert "usage:" in logs.read_text()  # json.tool ran as `python -m json.tool --help` would
