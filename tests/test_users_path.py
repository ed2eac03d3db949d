"""Every probe the way a user's review runs it (issue 40, item 2): the real command in a fresh
process, the default config but for which probes run (inductor, compile latency auto), the
sandbox on, the default compile caches (no PERFCHECK_COMPILE_CACHE). One A/A review of a small
model that each probe has something to measure in: repeated blocks (fsdp wraps each), a custom
op (custom_ops checks it), autocast (amp). Each probe must have run on both sides, every variant
of it measured, and nothing may be 'not measured'. (The ddp probe's user-path test, a real
regression, is in test_ddp.py; compile latency's, on a busy CPU, in test_compile_latency.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_tree

from perfcheck.runner.process import sandbox
from perfcheck.runner.process.sides import SHARED_CACHE_ENV

MODEL = """\
import torch
from torch import nn


@torch.library.custom_op("perfcheck_users_path::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5


@scale.register_fake
def _(x):
    return torch.empty_like(x)


scale.register_autograd(lambda ctx, grad: grad * 0.5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.out(scale(x))


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(8, 32, device=device),)
"""

PROBES = ["timing", "compile", "export", "amp", "custom_ops", "profile", "fsdp"]
CONFIG = f"workloads:\n  - {{name: net, entry: model.py:build, amp: bf16, probes: [{', '.join(PROBES)}]}}\n"


@pytest.mark.e2e
@pytest.mark.inductor
@pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")
def test_every_probe_runs_on_both_sides_in_the_sandbox_with_the_default_caches(tmp_path: Path) -> None:
    tree = write_tree(tmp_path / "repo", {"model.py": MODEL, "perfcheck.yml": CONFIG})
    env = {k: v for k, v in os.environ.items() if k not in (SHARED_CACHE_ENV, sandbox.DISABLE_ENV)}
    out = tmp_path / "out"
    command = [sys.executable, "-m", "perfcheck", "review", "--base", str(tree), "--head", str(tree)]
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, env=env, timeout=900, check=False
    )
    assert done.returncode in (0, 3), done.stdout + done.stderr  # an A/A: never a fail
    result = json.loads((out / "result.json").read_text())
    (wl,) = result["workloads"]
    for side in ("base", "head"):
        ran = {r["probe"]: r for r in wl[side]}
        assert set(PROBES) <= set(ran), f"{side}: {sorted(ran)}"
        for name, r in ran.items():
            assert r["status"] == "ok", f"{side} {name}: {r['status']}: {r.get('message')}"
            (first, *_) = sorted((out / "probes").glob(f"{side}-net-{name}*.spec.json"))
            spec = json.loads(first.read_text())
            assert spec["walls"] is not None and spec["compile"]["backend"] == "inductor"
            failed = [v["variant"] for v in r["metrics"].get("variants", []) if v.get("error")]
            assert not failed, f"{side} {name}: {failed}"
    assert not [f for f in result["findings"] if f["severity"] == "error"], result["findings"]
    unmeasured = [w for w in result["inconclusive"] if "not measured" in w or "neither side" in w]
    assert not unmeasured, unmeasured
    compiled = next(r for r in wl["head"] if r["probe"] == "compile")["metrics"]
    assert compiled["latency"]["samples"], "compile latency was not measured"
    # The timing workers' set-up read the compiled model from the caches handed out: each made
    # one untimed cache-cold compile before its sample, on both sides alike.
    for side in ("base", "head"):
        samples = next(r for r in wl[side] if r["probe"] == "compile")["metrics"]["latency"]["samples"]
        assert all(s["primed"] and s["earlier"].get("fxgraph_cache_hit", 0) > 0 for s in samples), samples
