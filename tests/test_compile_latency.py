"""Compile latency: repeated cache-cold compiles, counted under callgrind or timed, per stage.

The decision rules over hand-made samples (pure, no torch), then real reviews: an A/A under
callgrind repeats within 2 % process to process, a head that compiles a deeper graph is
reported naming the stage, the wall-clock measure interleaves its processes, and callgrind asked for
where valgrind is missing is bad input.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import MODEL, ReviewFn, fast_config, model_tree, write_tree

from perfcheck.config import parse_config
from perfcheck.core import compile_latency
from perfcheck.core.compare import compare
from perfcheck.core.probes.compile import rows as compile_rows
from perfcheck.core.probes.kind import Row
from perfcheck.measures import CompileLatency, CompileMetrics, CompileSample, TimingMetrics
from perfcheck.runner.latency import callgrind
from perfcheck.runner.latency.runs import choose
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.schema import ProbeResult, WorkloadReview
from perfcheck.settings import CompileConfig

HAVE_VALGRIND = callgrind.valgrind() is not None and callgrind.header_dir() is not None


def _sample(dynamo: float, aot: float, measure: str) -> CompileSample:
    if measure == "callgrind":
        return CompileSample(
            wall_s=1.0,
            instructions=int(dynamo + aot),
            stage_instructions={"dynamo": int(dynamo), "aot_autograd": int(aot)},
        )
    return CompileSample(wall_s=dynamo + aot, stages_s={"dynamo": dynamo, "aot_autograd": aot})


def _result(side: str, samples: list[CompileSample], measure: str) -> ProbeResult:
    latency = CompileLatency(measure=measure, samples=samples)  # type: ignore[arg-type]
    metrics = CompileMetrics(
        backend="aot_eager",
        graph_count=1,
        graph_break_count=0,
        recompile_count=0,
        cold_compile_s=1.0,
        latency=latency,
    )
    return ProbeResult(
        probe="compile",
        workload="w",
        side=side,
        status="ok",
        duration_s=1.0,
        metrics=metrics.model_dump(mode="json"),  # type: ignore[arg-type]
    )


def _compare(base: list[CompileSample], head: list[CompileSample], measure: str, config: str = "{}"):
    wl = WorkloadReview(
        name="w", base=[_result("base", base, measure)], head=[_result("head", head, measure)]
    )
    return compare([wl], parse_config(config, "c.yml"))


def _rows(base: list[CompileSample], head: list[CompileSample], measure: str) -> list[Row]:
    """The compile probe's table rows, as the comment shows them after comparing."""
    b, h = _result("base", base, measure), _result("head", head, measure)
    change = _compare(base, head, measure).compile_latency_changes["w"]
    return compile_rows(b, h, WorkloadReview(name="w", base=[b], head=[h], compile_latency=change))


def test_a_compile_that_grew_35_percent_fails_naming_the_stage_without_a_per_workload_budget() -> None:
    base = [_sample(1.00, 2.0, "wall"), _sample(1.05, 2.1, "wall"), _sample(0.95, 1.9, "wall")]
    head = [_sample(1.02, 3.0, "wall"), _sample(1.06, 3.2, "wall"), _sample(0.97, 2.9, "wall")]
    got = _compare(base, head, "wall")
    [f] = got.findings
    assert f.category == "compile_latency_regression" and f.severity == "error"
    assert f.evidence["stage"] == "aot_autograd" and "AOTAutograd grew most" in f.message
    assert "20 % budget" in f.message
    assert got.compile_latency_changes["w"].measure == "wall"


def test_a_significant_change_within_the_budget_is_a_warning_and_noise_is_nothing() -> None:
    base = [
        _sample(1e8, 2e8, "callgrind"),
        _sample(1.001e8, 2e8, "callgrind"),
        _sample(0.999e8, 2e8, "callgrind"),
    ]
    grown = [
        _sample(1.1e8, 2.05e8, "callgrind"),
        _sample(1.101e8, 2.05e8, "callgrind"),
        _sample(1.099e8, 2.05e8, "callgrind"),
    ]
    [f] = _compare(base, grown, "callgrind").findings
    assert f.severity == "warning" and f.evidence["stage"] == "dynamo" and "10 % budget" in f.message
    same = [
        _sample(1.0002e8, 2e8, "callgrind"),
        _sample(1.0009e8, 2e8, "callgrind"),
        _sample(0.9995e8, 2e8, "callgrind"),
    ]
    quiet = _compare(base, same, "callgrind")
    assert quiet.findings == [] and quiet.verdict == "pass"


def test_an_instruction_count_that_straddles_the_budget_is_inconclusive() -> None:
    base = [_sample(1e8, 2e8, "callgrind")] * 3
    head = [
        _sample(1e8, 2.2e8, "callgrind"),
        _sample(1e8, 2.6e8, "callgrind"),
        _sample(1e8, 2.4e8, "callgrind"),
    ]
    got = _compare(base, head, "callgrind")
    assert got.verdict == "inconclusive" and "straddles the 10 % budget" in got.inconclusive[0]


def test_wall_clock_that_cannot_decide_says_so_in_its_row_and_leaves_the_verdict_alone() -> None:
    """Fresh-process compiles scatter by ±20 % by wall clock (an A/A on the H200 read -51 … +134 %
    over three pairs): undecided is the usual outcome, not a reason to hold every review."""
    base = [_sample(1.0, 2.0, "wall"), _sample(1.0, 2.0, "wall"), _sample(1.0, 2.0, "wall")]
    head = [_sample(1.0, 2.0, "wall"), _sample(1.0, 3.0, "wall"), _sample(1.0, 2.3, "wall")]
    got = _compare(base, head, "wall")
    assert got.verdict == "pass" and got.inconclusive == []
    [row] = [r for r in _rows(base, head, "wall") if r.metric.startswith("compile latency")]
    assert "undecided against 20 %" in row.delta
    # Never silent (issue 40): the estimate is within the budget, so an info note says so and
    # what would decide; the comment's headline is then no "No findings".
    [note] = got.findings
    assert note.severity == "info" and note.evidence["undecided"] is True
    assert "undecided against the 20 % budget: the estimate is within it" in note.message
    assert re.search(r"about \d+ pairs would decide it|more pairs than compile.runs allows", note.message)
    assert "compile.measure: callgrind" in note.message


def test_wall_clock_undecided_with_its_estimate_beyond_the_budget_is_a_warning_saying_what_decides() -> None:
    """Issue 40's silent green: a head 8 layers deeper on a busy CPU, +127 % (+2.8 … +401.6) by
    wall clock over three pairs, undecided against 20 %, and the review said "No findings"."""
    base = [_sample(1.0, 2.0, "wall"), _sample(1.0, 2.4, "wall"), _sample(1.0, 1.6, "wall")]
    head = [_sample(1.0, 2.6, "wall"), _sample(1.0, 9.0, "wall"), _sample(1.0, 5.0, "wall")]
    got = _compare(base, head, "wall")
    change = got.compile_latency_changes["w"]
    assert change.verdict == "inconclusive" and change.change_pct > 20
    [f] = got.findings
    assert f.category == "compile_latency_regression" and f.severity == "warning"
    assert f"+{change.change_pct:.1f} %" in f.message
    assert (
        "undecided against the 20 % budget: the estimate is beyond it and the interval reaches below it"
        in f.message
    )
    assert got.verdict == "pass"  # a warning: undecided is not a failure


def test_auto_takes_callgrind_only_where_it_fits_and_says_why_not() -> None:
    """``auto``'s choice where the wall clock left compile latency undecided, from the wall clock's
    own cache-cold compile: callgrind where its estimate fits, else the wall clock, saying why."""
    auto = CompileConfig()
    # A small model under aot_eager: a cache-cold compile of a tenth of a second, about 37 s a side.
    small = choose(auto, "cpu", True, 0.1)
    assert small.measure == "callgrind"
    # stopped, should a busy machine make it slower, at twice its estimate (at least the budget)
    assert small.limit_s == max(2 * small.estimate_s, auto.callgrind_budget_s)
    assert choose(auto, "cuda", True, 0.1).measure == "wall"
    missing = choose(auto, "cpu", False, 0.1)
    assert missing.measure == "wall" and "valgrind is not installed" in (missing.note or "")
    # The demo's Inductor compile, 0.34 s by the wall clock cache-cold: 77 s a side under callgrind
    # (measured), over the 60 s budget.
    big = choose(auto, "cpu", True, 0.34)
    assert big.measure == "wall" and "compile.callgrind_budget_s" in (big.note or "")
    late = choose(auto, "cpu", True, 0.1, left_s=30.0)
    assert late.measure == "wall" and "left of review.time_budget_s" in (late.note or "")
    asked = CompileConfig(measure="callgrind")
    assert choose(asked, "cpu", True, 60.0, left_s=0.0).measure == "callgrind"


def test_the_workload_with_the_cheapest_samples_is_timed_last_the_others_in_order() -> None:
    from perfcheck.runner.budget import lightest_last

    # The suite's samples on the H200 (run-4): only the last workload's are made with no set-up beside.
    cost = {"resnet50": 68.0, "vit": 37.0, "mlp": 5.0, "llama": 14.0}
    assert lightest_last(["mlp", "resnet50", "vit", "llama"], cost.__getitem__) == [
        "resnet50", "vit", "llama", "mlp"
    ]  # fmt: skip
    assert lightest_last(["resnet50", "vit", "llama"], cost.__getitem__) == ["resnet50", "vit", "llama"]
    # Ties (no samples made in the timing pairs at all) and costs within noise of each other (two
    # copies of one model whose first compiles differ by the machine's load) keep the plan's order.
    assert lightest_last(["a", "b", "c"], lambda _: 0.0) == ["a", "b", "c"]
    near = {"net": 3.1, "twin": 3.6}
    assert lightest_last(["net", "twin"], near.__getitem__) == ["net", "twin"]
    assert lightest_last(["a"], lambda _: 1.0) == ["a"]


DEEPER = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.extra = nn.ModuleList(nn.Linear(32, 32) for _ in range(8))
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        for layer in self.extra:
            h = torch.relu(layer(h))
        return self.fc2(h)


def build(device):
    gen = torch.Generator().manual_seed(0)
    return Net().to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""


@pytest.fixture
def cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's shared compile cache off: with it no compile is cold, and none is measured."""
    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)


@pytest.mark.skipif(not HAVE_VALGRIND, reason="valgrind (with callgrind.h) is not installed")
def test_callgrind_repeats_within_2_percent_and_a_deeper_graph_is_named(
    tmp_path: Path, review: ReviewFn, cold: None
) -> None:
    # One review of two processes a side (each ~20 s of valgrind just importing torch): the two
    # processes of one tree are the A/A, the deeper head the change that must be named.
    config = fast_config("  measure: callgrind\n  runs: 2\n")
    base = model_tree(tmp_path / "base")
    deeper = review(base, write_tree(tmp_path / "deeper", {"model.py": DEEPER}), config, probes=("compile",))
    change = deeper.workloads[0].compile_latency
    assert change is not None and change.measure == "callgrind" and change.pairs == 2
    for side in (deeper.workloads[0].base[0], deeper.workloads[0].head[0]):
        samples = side.metrics_as(CompileMetrics).latency.samples  # type: ignore[union-attr]
        counts = [s.instructions for s in samples]
        assert len(counts) == 2 and all(counts), counts
        assert max(counts) <= 1.02 * min(counts), counts  # type: ignore[type-var,operator]
        assert all(s.stage_instructions["dynamo"] > 0 for s in samples)

    [f] = [f for f in deeper.findings if f.category == "compile_latency_regression"]
    assert f.severity == "error" and f.evidence["stage"] in ("dynamo", "aot_autograd")
    # The stage named is the one that added the most instructions, and it grew beyond the budget.
    added = {k: v[1] - v[0] for k, v in f.evidence["stages"].items()}
    base_count, head_count = f.evidence["stages"][f.evidence["stage"]]
    assert added[f.evidence["stage"]] == max(added.values()) and head_count > 1.1 * base_count
    assert deeper.verdict == "fail"


@pytest.mark.skipif(not HAVE_VALGRIND, reason="valgrind (with callgrind.h) is not installed")
@pytest.mark.parametrize("probes", [("compile",), ("compile", "timing")])
def test_callgrind_that_overruns_its_limit_is_stopped_and_the_wall_clock_samples_count(
    tmp_path: Path, review: ReviewFn, cold: None, monkeypatch: pytest.MonkeyPatch, probes: tuple[str, ...]
) -> None:
    """``auto`` measures by wall clock first and takes callgrind where that leaves compile latency
    undecided, on its estimate; on a machine busier than that estimate its processes are stopped
    at twice the estimate, and the wall-clock compiles stand. (Here the wall clock is told
    undecided once, and callgrind's estimate and limit are told: a second.)"""
    from perfcheck.runner.latency import more_pairs as latency_more
    from perfcheck.runner.latency import runs as latency_runs

    told = latency_runs.Choice("callgrind", estimate_s=1.0, limit_s=2.0)
    monkeypatch.setattr(latency_runs, "choose", lambda *a, **k: told)
    real, asked = latency_more.undecided, []

    def undecided_once(compiled: Any, config: Any) -> Any:
        state = real(compiled, config)
        if asked or state is not None:
            return state
        asked.append(True)
        base, head = compiled["base"], compiled["head"]
        change = compile_latency.decide(base.latency, head.latency, config.budgets, config.timing)
        return latency_more.Undecided(
            change.model_copy(update={"verdict": "inconclusive"}),
            {"base": base.latency, "head": head.latency},
            max(base.cold_compile_s, head.cold_compile_s),
        )

    monkeypatch.setattr(latency_more, "undecided", undecided_once)
    config = fast_config("  measure: auto\n  runs: 2\n")  # auto, the default
    result = review(model_tree(tmp_path / "base"), model_tree(tmp_path / "head"), config, probes=probes)
    assert asked, "the wall clock was never asked whether it decided"
    change = result.workloads[0].compile_latency
    assert change is not None and change.measure == "wall" and change.pairs >= 2
    [head] = [r for r in result.workloads[0].head if r.probe == "compile"]
    note = head.metrics_as(CompileMetrics).latency.note  # type: ignore[union-attr]
    assert note is not None and note.startswith("wall-clock: callgrind was stopped at its limit of 2 s"), note
    steps = {s.step: s for c in result.costs for s in c.steps}
    stopped = steps["base ⇄ head · net · compile latency (callgrind)"]
    assert stopped.spent_s is not None and stopped.spent_s < 60  # stopped, not run to its end
    assert any("callgrind was stopped at its limit" in cut for c in result.costs for cut in c.cuts)


def test_wall_clock_compiles_are_made_in_the_timing_pairs_alternating_sides(
    tmp_path: Path, review: ReviewFn, cold: None
) -> None:
    """By wall clock no process starts for compile latency: each timing pair's two workers, warm and
    idle after their rounds, compile once more on empty caches, the side that timed first first."""
    config = fast_config("  measure: wall\n  runs: 2\n")
    result = review(
        model_tree(tmp_path / "base"), model_tree(tmp_path / "head"), config, probes=("compile", "timing")
    )
    probes_dir = tmp_path / "out" / "probes"
    # No process of its own for the first look's pairs; an undecided first look buys more pairs, a
    # round at a time, each round a process a side (perfcheck/runner/latency/more_pairs.py).
    assert all(
        p.name.split("-", 2)[2].startswith("compile_latency-more")
        for p in probes_dir.glob("*compile_latency*")
    )
    change = result.workloads[0].compile_latency
    assert change is not None and change.measure == "wall" and change.pairs >= 2
    results = result.workloads[0].base + result.workloads[0].head
    timing = {r.side: r.metrics_as(TimingMetrics) for r in results if r.probe == "timing"}
    for side in ("base", "head"):
        processes = timing[side].processes  # type: ignore[union-attr]
        assert [("latency" in p.phases_s) for p in processes[:2]] == [True, True]
        assert all("latency" not in p.phases_s for p in processes[2:])
    for side in (result.workloads[0].base[0], result.workloads[0].head[0]):
        samples = side.metrics_as(CompileMetrics).latency.samples  # type: ignore[union-attr]
        assert len(samples) == change.pairs
        assert all(s.instructions is None and s.stages_s["dynamo"] > 0 for s in samples)
        # What each compile did, and what its process compiled before it (the warm-up), counted.
        assert all(s.work["aot_autograd.total"] == 1 <= s.earlier["aot_autograd.total"] for s in samples)
        # aot_eager's compiled code is in no cache: the set-up compiled in full, nothing to prime.
        assert not any(s.primed for s in samples)
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert f"compile latency (wall clock, {change.pairs} cache-cold per side) · decides" in comment
    assert (
        "| · Dynamo |" in comment
        and "first compile of a process (aot\\_eager, one run each) · context" in comment
    )


# Two workloads of the same model, two samples a side each, timing at its defaults (3 pairs first).
# What these tests look at is where the work runs, not a tiny step's time on a shared 2-core
# machine: a throughput budget that such noise cannot reach (a 1 % step once read as a warning).
LOOSE = "budgets: {max_throughput_regression_pct: 50}\n"
TWO_WORKLOADS = parse_config(
    "workloads:\n  - {name: net, entry: model.py:build}\n  - {name: twin, entry: model.py:build}\n"
    "compile: {backend: aot_eager, measure: wall, runs: 2}\n" + LOOSE,
    "two.yml",
)


def test_several_workloads_make_their_samples_together_after_their_timing(
    tmp_path: Path, review: ReviewFn, cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where one batch of compiles has room for them (a core for each process: here told so), the
    workers that owe samples wait, idle, while the next workload is timed, and then every workload's
    samples are made at once: one step of the review, not one per workload. With more per-side
    probes than slots (four compiles, two at once), head's compiles wait for base's and start from
    its cache."""
    from perfcheck.runner.timing import pairs as timing

    monkeypatch.setattr(timing, "latency_batch_pairs", lambda: 4)  # 2 owed + a first look of 3: no
    config = TWO_WORKLOADS
    result = review(
        model_tree(tmp_path / "base"),
        model_tree(tmp_path / "head"),
        config,
        probes=("compile", "timing"),
        jobs=2,
    )
    assert result.verdict == "pass", result.findings
    for workload in result.workloads:
        [head] = [r.metrics_as(CompileMetrics) for r in workload.head if r.probe == "compile"]
        assert head.from_base_cache, workload.name
        change = workload.compile_latency
        assert change is not None and change.measure == "wall" and change.pairs >= 2, workload.name
        [timed] = [r.metrics_as(TimingMetrics) for r in workload.base if r.probe == "timing"]
        assert [("latency" in p.phases_s) for p in timed.processes[:2]] == [True, True]
    steps = {s.step: s for c in result.costs for s in c.steps}
    joint = steps["base ⇄ head · net, twin · compile latency"]
    assert joint.spent_s is not None and joint.spent_s > 0
    for name in ("net", "twin"):  # their timing steps made none of it
        assert steps[f"base ⇄ head · {name} · timing"].parts_s.get("compile latency", 0.0) == 0


def test_a_workloads_samples_are_made_while_the_next_workloads_timing_workers_set_up(
    tmp_path: Path, review: ReviewFn, cold: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the machine has a core for each process (here told so: the samples' two pairs and the
    next workload's first look of three), the first workload's samples are made in a thread beside
    the next workload's set-up, before any of its pairs is timed; the last workload's alone."""
    from perfcheck.runner.timing import pairs as timing

    monkeypatch.setattr(timing, "latency_batch_pairs", lambda: 5)
    result = review(
        model_tree(tmp_path / "base"),
        model_tree(tmp_path / "head"),
        TWO_WORKLOADS,
        probes=("compile", "timing"),
    )
    # Told of five pairs' cores on what may be two, the samples run oversubscribed beside the next
    # workload's set-up: their wall-clock verdict (a warning, even) is not the point, the order is.
    # Nothing crashed or timed out, and every workload has its samples.
    assert not [f for f in result.findings if f.category != "compile_latency_regression"], result.findings
    for workload in result.workloads:
        change = workload.compile_latency
        assert change is not None and change.measure == "wall" and change.pairs >= 2, workload.name
    steps = {s.step: s for c in result.costs for s in c.steps}
    assert "base ⇄ head · net, twin · compile latency" not in steps
    assert steps["base ⇄ head · net · compile latency"].spent_s
    assert steps["base ⇄ head · twin · compile latency"].spent_s
    # The first timed workload's samples were made inside the second's timing step, beside its
    # set-up; none in its own. (Which goes first is the plan's order unless one's samples are
    # expected to cost clearly less: two copies of one model keep it, or swap on a loaded machine.)
    first, second = (s.step for c in result.costs for s in c.steps if s.step.endswith("· timing"))
    assert "waiting beside" in steps[second].parts_s
    assert "waiting beside" not in steps[first].parts_s
    assert steps[first].parts_s.get("compile latency", 0.0) == 0


def test_the_first_timed_workloads_workers_set_up_while_the_last_per_side_probes_run(
    tmp_path: Path, review: ReviewFn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several slots and the cores for it (here told so), the workload whose per-side probes
    are done first is timed first: its workers set up while the slow workload's probes still run,
    and its pairs wait for them; every probe's result is in the review all the same."""
    from perfcheck.runner import orchestrate

    monkeypatch.setattr(orchestrate, "host_cores", lambda: 16)
    # Slow in its compile probes only (the process's spec names its probe; the probe builds the
    # model three times, so about 10 s): its timing workers' builds need not wait too.
    slow = MODEL.replace(
        "def build(device):\n",
        "def build(device):\n    import sys\n    import time\n\n"
        "    if any(a.endswith('-compile.spec.json') for a in sys.argv):\n        time.sleep(3)\n",
    )
    files = {"model.py": MODEL.replace("{change}", "pass"), "slow.py": slow.replace("{change}", "pass")}
    config = parse_config(
        "workloads:\n  - {name: slow, entry: slow.py:build}\n  - {name: quick, entry: model.py:build}\n"
        "compile: {backend: aot_eager, measure: 'off'}\n"
        # When the pairs start is what this test reads, not how many there are.
        "timing: {processes: 2, max_processes: 2}\n" + LOOSE,
        "two.yml",
    )
    result = review(
        write_tree(tmp_path / "base", files), write_tree(tmp_path / "head", files), config,
        probes=("compile", "timing"), jobs=2,
    )  # fmt: skip
    assert not result.findings
    steps = {s.step: s for c in result.costs for s in c.steps}
    assert "waiting beside" in steps["base ⇄ head · quick · timing"].parts_s  # set up beside slow's
    assert "waiting beside" not in steps["base ⇄ head · slow · timing"].parts_s
    for workload in result.workloads:
        for side in (workload.base, workload.head):
            assert sorted(r.probe for r in side) == ["compile", "timing"], workload.name


def test_without_timing_a_round_of_both_sides_at_once_makes_the_cold_compiles(
    tmp_path: Path, review: ReviewFn, cold: None
) -> None:
    """Where no timing pairs run, the samples come from a round of processes of their own, one a
    side at the same time, after the compile probes: sample i of base and of head are made in the
    same moment. (Made in each side's compile probe, one side after the other, a busy moment on a
    shared CI worker moved one side's pair only, and an A/A failed.)"""
    config = fast_config("  measure: wall\n  runs: 2\n")
    result = review(model_tree(tmp_path / "base"), model_tree(tmp_path / "head"), config, probes=("compile",))
    change = result.workloads[0].compile_latency
    assert change is not None and change.measure == "wall" and change.pairs >= 2
    [head] = [r for r in result.workloads[0].head if r.probe == "compile"]
    assert head.metrics_as(CompileMetrics).from_base_cache  # what base compiled, read
    rounds = sorted(p.name for p in (tmp_path / "out" / "probes").glob("*compile_latency-first*.log"))
    assert rounds == ["base-net-compile_latency-first.log", "head-net-compile_latency-first.log"], rounds
    steps = {s.step: s for c in result.costs for s in c.steps}
    assert steps["base ⇄ head · net · compile latency"].note == "2 cache-cold per side, both sides at once"
    # Paired in time, the figure is still the wall clock's: a busy moment can still move both
    # sides' pair apart. Nothing structural may differ in this A/A.
    assert [f.category for f in result.findings if f.category != "compile_latency_regression"] == []


@pytest.mark.e2e
def test_callgrind_asked_for_without_valgrind_is_bad_input(tmp_path: Path) -> None:
    base = model_tree(tmp_path / "base")
    (tmp_path / "perfcheck.yml").write_text(
        "workloads: [{name: net, entry: model.py:build}]\ncompile: {backend: aot_eager, measure: callgrind}\n"
    )
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # this venv's tools only: no valgrind
    done = subprocess.run(
        [sys.executable, "-m", "perfcheck", "review", "--base", str(base), "--head", str(base),
         "--config", str(tmp_path / "perfcheck.yml"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "compile.measure: callgrind needs valgrind" in done.stderr and "Traceback" not in done.stderr


def test_the_pairs_that_would_decide_narrow_the_interval_to_the_estimates_distance_from_the_budget() -> None:
    from perfcheck.core.compile_latency import pairs_to_decide
    from perfcheck.measures import CompileLatencyChange

    def change(ratio: float, low: float, high: float) -> CompileLatencyChange:
        fields = {"base": 1.0, "head": ratio, "confidence": 0.95, "p_value": 0.01}
        return CompileLatencyChange(
            **fields, ratio=ratio, ratio_low=low, ratio_high=high, measure="wall", pairs=3,
            budget_pct=20.0, verdict="inconclusive", warn=False,
        )  # fmt: skip

    # Three pairs, half-width log(1.54/1.10)/2 = 0.168 with t(2) = 4.30: a spread of 0.068. The
    # distance log(1.30/1.20) = 0.080; five pairs give t(4) 2.78 × 0.068 / √5 = 0.084, six 0.071.
    assert pairs_to_decide(change(1.30, 1.10, 1.54)) == 6
    assert pairs_to_decide(change(1.20, 1.00, 1.44)) is None  # on the budget: nothing decides


def _compiled(base: list[CompileSample], head: list[CompileSample]) -> dict[str, CompileMetrics]:
    return {
        side: CompileMetrics.model_validate(_result(side, samples, "wall").metrics)
        for side, samples in (("base", base), ("head", head))
    }


def test_an_undecided_wall_clock_takes_rounds_of_pairs_until_it_decides_within_the_budget() -> None:
    from perfcheck.runner.latency import more_pairs as latency_more

    config = parse_config("{}", "c.yml")
    base = [_sample(1.0, 2.0, "wall"), _sample(1.0, 2.4, "wall"), _sample(1.0, 1.6, "wall")]
    head = [_sample(1.0, 2.6, "wall"), _sample(1.0, 9.0, "wall"), _sample(1.0, 5.0, "wall")]
    asked: list[tuple[str, int]] = []

    def launch(side: str, compiles: int) -> ProbeResult:
        # What a side's process would hand back: head's compiles steadily twice base's.
        asked.append((side, compiles))
        made = [_sample(1.0, 2.0 if side == "base" else 5.0, "wall") for _ in range(compiles)]
        latency = CompileLatency(measure="wall", samples=made)
        return ProbeResult(
            probe="compile_latency", workload="w", side=side, status="ok", duration_s=1.0,
            metrics={"latency": latency.model_dump(mode="json")},
        )  # fmt: skip

    notes: list[str] = []
    got = latency_more.more_pairs(
        _compiled(base, head), config, lambda: 600.0, launch, lambda line, _s: notes.append(line)
    )
    assert got is not None and got.latency is not None
    n = len(got.latency["base"].samples)
    assert n == len(got.latency["head"].samples) > 3
    assert sorted(s for s, _ in asked) == ["base", "head"] * (len(asked) // 2)
    assert got.said.endswith("decided") and notes[0].startswith("after 3 pairs +")
    decided = compile_latency.decide(got.latency["base"], got.latency["head"], config.budgets, config.timing)
    assert decided.verdict == "fail"
    # No time left: no round, and why.
    short = latency_more.more_pairs(_compiled(base, head), config, lambda: 1.0, launch)
    assert short is not None and short.latency is None and "more than the 1 s left" in short.said
    # Decided already: nothing to do.
    assert latency_more.more_pairs(_compiled(base, base), config, lambda: 600.0, launch) is None


@pytest.mark.e2e
@pytest.mark.inductor
def test_with_defaults_on_a_busy_cpu_a_head_8_layers_deeper_gets_a_compile_latency_finding(
    tmp_path: Path,
) -> None:
    """Issue 40's silent green, as a user meets it: the real command, the default config (inductor,
    compile.measure auto), the sandbox and the default caches, `--probes compile`, while another
    process spins on the CPU. The review must say that compiling got slower, whichever measure
    decided (callgrind where it fits, else the wall clock and as many more pairs as it needs)."""
    user_config = "workloads:\n  - {name: net, entry: model.py:build}\n"
    base = write_tree(
        tmp_path / "base", {"model.py": MODEL.replace("{change}", "pass"), "perfcheck.yml": user_config}
    )
    head = write_tree(tmp_path / "head", {"model.py": DEEPER})
    env = {k: v for k, v in os.environ.items() if k not in (SHARED_CACHE_ENV, "PERFCHECK_SANDBOX")}
    command = [sys.executable, "-m", "perfcheck", "review", "--base", str(base), "--head", str(head)]
    command += ["--out", str(tmp_path / "out"), "--probes", "compile"]
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    finally:
        spinner.kill()
        spinner.wait()
    assert done.returncode in (0, 1), done.stdout + done.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    found = [f for f in result["findings"] if f["category"] == "compile_latency_regression"]
    assert found and found[0]["severity"] in ("error", "warning"), done.stdout + done.stderr
    assert "No findings" not in done.stdout
