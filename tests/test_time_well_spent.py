"""Time well spent, and said (issue 54): a step whose estimate, corrected by what the review has
measured so far, cannot finish in the time left is not started; a step that reaches the review's
deadline keeps what it measured and says so; every step cut or stopped is in ``costs.cuts``."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import ReviewFn, fast_config, write_tree

from perfcheck.core.render import render_comment
from perfcheck.measures import CompileMetrics
from perfcheck.runner.budget import prior
from perfcheck.runner.orchestrate import _Review
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.schema import ProbeResult

# Each call of build() takes this long: a model whose every probe is slow the same way (a large
# model's build, a slow data set), which no prior of the probes knows.
SLOW = """\
import time

import torch
from torch import nn


def build(device):
    time.sleep({seconds})
    torch.manual_seed(0)
    return nn.Linear(8, 8).to(device), (torch.randn(4, 8).to(device),)
"""


def _done(workload: str, probe: str, side: str, seconds: float) -> ProbeResult:
    return ProbeResult(probe=probe, workload=workload, side=side, status="ok", duration_s=seconds)  # type: ignore[arg-type]


def test_a_probe_s_estimate_is_corrected_by_what_the_workload_s_probes_took() -> None:
    """A workload whose compile probes took ten times their prior: its export's estimate is ten
    times export's prior, not the prior (which a review of the largest model ran past)."""
    review = _Review.__new__(_Review)  # its estimate alone: no processes, no plan
    review.run_ = SimpleNamespace(device="cpu")  # type: ignore[assignment]
    review.base_compiles = {}
    wl = SimpleNamespace(name="big")
    compile_prior = prior("compile", "cpu")
    review.kept = {
        ("big", "compile", side): _done("big", "compile", side, 10 * compile_prior)
        for side in ("base", "head")
    }
    assert review._expected(wl, "export", "base") == 10 * prior("export", "cpu")  # type: ignore[arg-type]
    # What the other side's own run of it took stands first, as before; a fast workload is never
    # planned below the prior.
    review.kept[("big", "export", "base")] = _done("big", "export", "base", 7.0)
    assert review._expected(wl, "export", "head") == 7.0  # type: ignore[arg-type]
    review.kept = {("small", "compile", "base"): _done("small", "compile", "base", 0.1)}
    assert review._expected(SimpleNamespace(name="small"), "export", "base") == prior("export", "cpu")  # type: ignore[arg-type]


def test_compile_latency_stopped_at_the_deadline_keeps_its_samples_and_says_so(
    review: ReviewFn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compile latency's round is started (its estimate, from the compile probes' first compiles,
    fits) but each compile of it also builds the model for 4 s: three a side cannot end inside the
    budget. Its processes stop before the deadline with what they measured, and the review says
    so in its cuts and the Time line, inside its budget."""
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)  # compile latency is measured cold only
    base = write_tree(tmp_path / "base", {"model.py": SLOW.replace("{seconds}", "4")})
    head = write_tree(tmp_path / "head", {"model.py": SLOW.replace("{seconds}", "4")})
    budget = 32
    config = fast_config(f"  measure: wall\n  runs: 3\nreview:\n  time_budget_s: {budget}\n")
    start = time.monotonic()
    result = review(base, head, config=config, probes=("compile",), jobs=2)
    took = time.monotonic() - start
    [costs] = result.costs
    latency_cuts = [c for c in costs.cuts if "compile latency" in c]
    assert latency_cuts, costs.cuts
    made = [
        len(m.latency.samples)
        for r in result.workloads[0].base + result.workloads[0].head
        if (m := r.metrics_as(CompileMetrics)) is not None and m.latency is not None
    ]
    assert made and max(made) < 3, made
    assert any("stopped after" in c or "not measured" in c for c in latency_cuts), latency_cuts
    assert took < budget + 10  # stopped by itself, not killed after the budget
    comment = render_comment(result)
    assert "cut or stopped, each saying why:" in comment and "cut to fit" not in comment
