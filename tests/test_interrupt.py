"""Ctrl-C and SIGTERM end a review cleanly (issue 32, item 3): a real signal to a real `perfcheck
review` whose probe is running; one line says so, no traceback, the exit code is the signal's
(130, 143), no process of the review is left (fork server, probe, sandbox). What finished before
the stop is written as an inconclusive review; where nothing finished, nothing is written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_tree

SLOW = """\
import time

import torch
from torch import nn


def build(device):
    time.sleep(600)  # still running when the review is stopped
    return nn.Linear(2, 2), (torch.randn(1, 2),)
"""
CONFIG = "workloads:\n  - {name: net, entry: model.py:build}\ncompile: {backend: aot_eager}\n"


def processes_naming(text: str) -> list[str]:
    """Every process on the machine whose command line or working directory mentions ``text``
    (a probe forked from a fork server has the server's command line, and its tree as cwd)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                line = raw.replace(b"\0", b" ").decode(errors="replace")
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if text in line or text in cwd:
                found.append(f"{line} (in {cwd})")
    return found


def _started(tmp_path: Path, base: Path, head: Path, out: Path, *more: str) -> subprocess.Popen[str]:
    """`perfcheck review` as a user starts it, its stderr read at the end."""
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "perfcheck", "review", "--base", str(base), "--head", str(head)),
            *("--config", str(tmp_path / "perfcheck.yml"), "--out", str(out), *more),
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("sig", "code", "name"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_a_stopped_review_ends_every_process_and_writes_no_result(
    tmp_path: Path, sig: signal.Signals, code: int, name: str
) -> None:
    base = write_tree(tmp_path / "base", {"model.py": SLOW})
    head = write_tree(tmp_path / "head", {"model.py": SLOW})
    (tmp_path / "perfcheck.yml").write_text(CONFIG)
    out = tmp_path / "out"
    review = _started(tmp_path, base, head, out)
    # Until a probe process runs the workload: its log is opened as it starts, and build() sleeps.
    deadline = time.monotonic() + 240
    while not list((out / "probes").glob("*-compile.log")):
        assert review.poll() is None and time.monotonic() < deadline, "no probe process started"
        time.sleep(0.5)
    time.sleep(3)
    assert processes_naming(str(tmp_path))  # the review's processes, as seen before the stop
    review.send_signal(sig)
    _, err = review.communicate(timeout=120)

    assert review.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == f"perfcheck: stopped by {name}: no result written", err
    assert not [line for line in err.splitlines() if "crashed" in line], err  # a stop is no crash
    time.sleep(0.5)
    assert processes_naming(str(tmp_path)) == []
    assert not (out / "result.json").exists() and not list(out.glob(".*.part"))


@pytest.mark.e2e
def test_a_review_stopped_after_some_probes_writes_what_they_measured_as_inconclusive(tmp_path: Path) -> None:
    """A job's time limit (SIGTERM) after base's compile probe finished and while head's runs:
    the review of what was measured is written, inconclusive, saying it was stopped and what is
    missing; no process is left."""
    quick = SLOW.replace("    time.sleep(600)  # still running when the review is stopped\n", "")
    base = write_tree(tmp_path / "base", {"model.py": quick})
    head = write_tree(tmp_path / "head", {"model.py": SLOW})
    (tmp_path / "perfcheck.yml").write_text(CONFIG.replace("aot_eager}", "aot_eager, measure: 'off'}"))
    out = tmp_path / "out"
    review = _started(tmp_path, base, head, out, "--probes", "compile")
    # One probe at a time on a CPU: head's compile probe starts once base's is done.
    deadline = time.monotonic() + 300
    while not [p for p in (out / "probes").glob("*-compile.log") if "head" in p.name]:
        assert review.poll() is None and time.monotonic() < deadline, "head's probe never started"
        time.sleep(0.5)
    time.sleep(3)
    review.send_signal(signal.SIGTERM)
    _, err = review.communicate(timeout=120)

    assert review.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "perfcheck: stopped by SIGTERM: wrote what was measured before it: "
        f"{out / 'result.json'} (inconclusive)"
    ), err
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "inconclusive"
    why = result["inconclusive"][0]
    assert why.startswith("the review was stopped by SIGTERM after ") and why.endswith(
        "s: 1 of the 2 probe results asked for were not made"
    ), why
    (wl,) = result["workloads"]
    assert [(r["probe"], r["status"]) for r in wl["base"]] == [("compile", "ok")] and wl["head"] == []
    assert json.loads((out / "probes.json").read_text())["stopped"] == "SIGTERM"
    assert "stopped by SIGTERM" in (out / "comment.md").read_text()
    time.sleep(0.5)
    assert processes_naming(str(tmp_path)) == []
