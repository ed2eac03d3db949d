"""A head as an attacker would write it against the per-side sandbox (perfcheck/runner/process/sandbox.py):
its build() tries each attack and prints what happened. Used by tests/test_sandbox.py on the CPU and
by bench/sandbox.py through the device tool on a GPU (standard library only, no pytest)."""

from __future__ import annotations

from pathlib import Path

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
    found = glob.glob(os.path.join(workdir, "cache", "base-net"))
    if not found:
        raise FileNotFoundError(2, "no cache of base's to be seen")
    with open(os.path.join(found[0], "poison"), "w") as f:
        f.write("x")
    # Written: fine if what this side sees at base's path is its own copy, which the test checks.
    raise OSError(0, "written where base's cache is seen")


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


def attacks_in(out: Path) -> dict[str, str]:
    """Every ATTACK line of head's probe logs: name -> what happened."""
    found: dict[str, str] = {}
    for log in sorted((out / "probes").glob("head-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ATTACK "):
                name, _, outcome = line.removeprefix("ATTACK ").partition(": ")
                found[name] = outcome
    return found


# What the hostile head is compared against: the same network with ReLU, no attacks.
BASE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""
