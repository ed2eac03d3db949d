"""Paired A/B timing on the CPU: the gate's logic with real workers running real models.

The trees differ the way real PRs do: identical code (A/A), a forward that does its work twice
(a true 2x slowdown), a forward that sleeps at random (noise no gate can see through), and a
model that holds a large extra buffer (memory growth).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.config import Config, parse_config
from perfcheck.schema import Review

HEAVY = """\
import random
import time

import torch
from torch import nn

REPEAT = {repeat}
NOISE_SEED = {noise_seed}
EXTRA_MB = {extra_mb}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)])
        self.rng = random.Random(NOISE_SEED)
        # touched memory, so it shows in the peak RSS
        self.scratch = torch.ones(EXTRA_MB * 2**18) if EXTRA_MB else None

    def forward(self, x):
        for _ in range(REPEAT):
            y = self.layers(x)
        if NOISE_SEED:
            time.sleep(0.002 * self.rng.lognormvariate(0, 1.5))
        return y


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(64, 256, generator=gen).to(device),)
"""


def heavy_tree(root: Path, repeat: int = 1, noise_seed: int = 0, extra_mb: int = 0) -> Path:
    return write_tree(
        root, {"model.py": HEAVY.format(repeat=repeat, noise_seed=noise_seed, extra_mb=extra_mb)}
    )


def timing_config(compiled: bool = False, extra: str = "") -> Config:
    return parse_config(
        f"""
workloads: [{{name: net, entry: model.py:build, timeout_s: 300}}]
compile: {{backend: aot_eager}}
timing:
  compiled: {str(compiled).lower()}
  steps_per_round: 5
  min_rounds: 8
  extra_rounds: 8
  max_rounds: 24
  time_budget_s: 60
{extra}
""",
        "timing-test.yml",
    )


def timing_findings(result: Review, category: str = "throughput_regression") -> list:
    return [f for f in result.findings if f.category == category]


def test_identical_code_never_fails(review: ReviewFn, tmp_path: Path) -> None:
    tree = heavy_tree(tmp_path / "tree")
    result = review(tree, tree, config=timing_config(), probes=("timing",))
    assert result.verdict in ("pass", "inconclusive")
    assert not [f for f in result.findings if f.severity == "error"]
    change = result.workloads[0].timing_change
    assert change is not None and change.ratio_low <= 1.0 + change.budget_pct / 100
    base, head = result.workloads[0].base[0].timing, result.workloads[0].head[0].timing
    assert base is not None and head is not None
    assert len(base.samples_ms) == len(head.samples_ms) >= 8
    assert base.mode == "eager" and base.memory_kind == "peak_rss"


def test_doing_the_work_twice_fails(review: ReviewFn, tmp_path: Path) -> None:
    result = review(
        heavy_tree(tmp_path / "base"),
        heavy_tree(tmp_path / "head", repeat=2),
        config=timing_config(),
        probes=("timing",),
    )
    [slower] = timing_findings(result)
    assert slower.severity == "error" and result.verdict == "fail"
    assert 1.5 < slower.evidence["ratio"] < 2.6
    assert "CI" in slower.message and "budget" in slower.message
    # the fail was re-checked, and held, in a second fresh pair of worker processes
    assert len(slower.evidence["generation_rounds"]) == 2


def test_wild_noise_is_inconclusive_not_fail(review: ReviewFn, tmp_path: Path) -> None:
    base = heavy_tree(tmp_path / "base", noise_seed=1)
    head = heavy_tree(tmp_path / "head", noise_seed=2)
    result = review(base, head, config=timing_config(), probes=("timing",))
    assert result.verdict == "inconclusive"
    assert not [f for f in result.findings if f.severity == "error"]
    # an inconclusive verdict bought extra rounds (up to max_rounds) before giving up; on a busy
    # machine a first generation can even look like a fail and buy a fresh pair on top
    rounds = result.workloads[0].head[0].timing.generation_rounds  # type: ignore[union-attr]
    assert rounds[0] > 8 or len(rounds) == 2
    assert any("straddles" in why for why in result.inconclusive)


def test_compiled_timing_warms_up_to_a_steady_state(review: ReviewFn, tmp_path: Path) -> None:
    tree = heavy_tree(tmp_path / "tree")
    result = review(tree, tree, config=timing_config(compiled=True), probes=("timing",))
    head = result.workloads[0].head[0]
    assert head.timing is not None and head.timing.mode == "compiled"
    # Whether block times settle within the tolerance depends on this machine's noise; what must
    # hold regardless: nothing compiled during the timed rounds, and warm-up ran past the blocks
    # that compiled.
    assert head.timing.recompiles_during_timing == 0
    assert head.timing.warmup_steps >= 3 * timing_config().timing.warmup_block
    assert head.timing.cold_compile_s is not None and head.timing.cold_compile_s > 0
    assert result.verdict in ("pass", "inconclusive")


def test_holding_a_large_buffer_is_a_memory_regression(review: ReviewFn, tmp_path: Path) -> None:
    result = review(
        heavy_tree(tmp_path / "base"),
        heavy_tree(tmp_path / "head", extra_mb=400),
        config=timing_config(),
        probes=("timing",),
    )
    [grew] = timing_findings(result, "memory_regression")
    assert grew.severity == "error"
    # 400 MB held on head. The base worker's own peak RSS baseline has been seen at 291 MB alone and
    # 436 MB late in a full suite run (cause not found), so the growth is checked against half the
    # planted size: a regression of this size is still reported as one, with room for that drift.
    assert grew.evidence["head_mb"] - grew.evidence["base_mb"] > 200


def test_a_crashing_side_is_a_finding_and_the_other_is_skipped(review: ReviewFn, tmp_path: Path) -> None:
    head = heavy_tree(tmp_path / "head")
    (head / "model.py").write_text(
        (head / "model.py")
        .read_text()
        .replace("def build(device):\n", "def build(device):\n    raise RuntimeError('cannot build')\n")
    )
    result = review(heavy_tree(tmp_path / "base"), head, config=timing_config(), probes=("timing",))
    [crashed] = timing_findings(result, "probe_crashed")
    assert "cannot build" in crashed.evidence["detail"]
    assert result.workloads[0].base[0].status == "skipped"
    assert result.verdict == "fail"


@pytest.mark.parametrize("field", ["min_rounds", "steps_per_round"])
def test_timing_settings_are_validated(field: str) -> None:
    from perfcheck.config import ConfigError

    with pytest.raises(ConfigError, match=f"timing.{field}"):
        parse_config(f"timing: {{{field}: 0}}", "perfcheck.yml")
