"""The `ddp` probe on the CPU: two gloo ranks launched by torchrun, real DDP, real torch.compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.config import Config, parse_config
from perfcheck.core.matrix import resolve
from perfcheck.core.probes.ddp import DdpMetrics, DdpVariantMetrics, RankGraphs, findings
from perfcheck.runner.distributed.comm_trace import collectives, comm_overlap_pct
from perfcheck.runner.process import sandbox
from perfcheck.runner.process.sides import SHARED_CACHE_ENV
from perfcheck.schema import ProbeResult

# Six 512×512 layers: with 1 MB buckets each layer is its own bucket, so DDPOptimizer splits.
MODEL = """\
{prelude}
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(6))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        {change}
        return x


def build(device):
    torch.manual_seed(0)
    return Net().to(device), (torch.randn(64, 512, device=device),)
"""


def tree(root: Path, change: str = "pass", prelude: str = "") -> Path:
    return write_tree(root, {"model.py": MODEL.format(change=change, prelude=prelude)})


def config(variants: str = "[compiled_ddp]") -> Config:
    return parse_config(
        f"""
workloads: [{{name: net, entry: model.py:build, timeout_s: 300}}]
compile: {{backend: aot_eager}}
ddp: {{world_size: 2, bucket_cap_mb: 1, steps: 3, variants: {variants}}}
""",
        "test-config.yml",
    )


def categories(result: Any) -> set[str]:
    return {f.category for f in result.findings}


def test_rank_dependent_python_compiles_different_graphs(review: ReviewFn, tmp_path: Path) -> None:
    base = tree(tmp_path / "base")
    head = tree(tmp_path / "head", "x = x * 2 if torch.distributed.get_rank() == 1 else x")
    result = review(base, head, config(), probes=("ddp",))
    (mismatch,) = [f for f in result.findings if f.category == "rank_graph_mismatch"]
    assert mismatch.severity == "error" and mismatch.evidence["ranks"] == [1]
    assert "compiled_ddp" in mismatch.message
    hashes = mismatch.evidence["hashes"]
    assert (
        hashes["0"][:-1] == hashes["1"][:-1] and hashes["0"][-1] != hashes["1"][-1]
    )  # only the last differs
    (base_ddp,) = result.workloads[0].base
    variant = base_ddp.metrics_as(DdpMetrics).variants[0]
    assert variant.ddp_splits >= 5 and variant.graph_count == 1  # DDPOptimizer's splits, not breaks
    assert variant.graph_breaks == []
    # 6 weights + 6 biases, all float32, in 1 MB buckets: every byte of every parameter once per step
    assert sum(c.bytes * c.count for c in variant.collectives) == 6 * (512 * 512 + 512) * 4


def test_turning_off_ddpoptimizer_stops_the_overlap(review: ReviewFn, tmp_path: Path) -> None:
    # A real regression a PR can make: the whole backward becomes one compiled graph, so every
    # gradient is ready only at its end and no all-reduce can overlap it.
    base = tree(tmp_path / "base")
    head = tree(tmp_path / "head", prelude="import torch._dynamo\ntorch._dynamo.config.optimize_ddp = False")
    result = review(base, head, config("[eager, compiled_ddp]"), probes=("ddp",))
    assert {"ddp_overlap_drop", "collective_drift"} <= categories(result)
    (drop,) = [f for f in result.findings if f.category == "ddp_overlap_drop"]
    assert drop.evidence["variant"] == "compiled_ddp"
    assert drop.evidence["base_pct"] > 50 and drop.evidence["head_pct"] == 0
    assert drop.evidence["ddp_splits"][0] >= 5 and drop.evidence["ddp_splits"][1] == 0
    # eager DDP is untouched by a Dynamo setting: no finding names it
    assert not [f for f in result.findings if f.evidence.get("variant") == "eager"]


# -- collectives and their process groups across graph breaks -------------------------------------

# A model whose forward all-reduces a statistic on a process group of its own: `dist.new_group` in
# build(), which every rank calls (as new_group needs) once per build.
GROUPED = """\
import torch
import torch.distributed as dist
from torch import nn

RANKS = {ranks}


class Net(nn.Module):
    def __init__(self, group):
        super().__init__()
        self.group = group
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        seen = x.detach().abs().amax().reshape(1)
        {sync}
        return x * seen


def build(device):
    torch.manual_seed(0)
    group = dist.new_group(ranks=RANKS) if dist.is_initialized() else None
    return Net(group).to(device), (torch.randn(16, 64, device=device),)
"""
NAMED = "dist.all_reduce(seen, op=dist.ReduceOp.MAX, group=self.group)"
# The head's change: a print that breaks the graph, and the all_reduce after it without its group.
MOVED = 'print("synced")\n        dist.all_reduce(seen, op=dist.ReduceOp.MAX)'


def grouped_tree(root: Path, sync: str = NAMED, ranks: str = "[0, 1]") -> Path:
    return write_tree(root, {"model.py": GROUPED.format(sync=sync, ranks=ranks)})


def _line(tree: Path, code: str) -> int:
    [line] = [i for i, t in enumerate((tree / "model.py").read_text().splitlines(), 1) if t.strip() == code]
    return line


def test_a_break_that_moves_an_all_reduce_onto_the_default_group_is_found_at_the_break(
    review: ReviewFn, tmp_path: Path
) -> None:
    base, head = grouped_tree(tmp_path / "base"), grouped_tree(tmp_path / "head", MOVED)
    result = review(base, head, config("[eager, compiled_ddp]"), probes=("ddp",))
    [moved] = [f for f in result.findings if f.category == "collective_group_changed"]
    assert moved.severity == "error" and moved.evidence["change"] == "default group"
    # One finding for both variants: eager DDP runs the call on WORLD too, at its own line.
    assert moved.evidence["variants"] == "eager, compiled_ddp"
    assert moved.evidence["op"] == "all_reduce" and moved.evidence["bytes"] == 4
    assert (
        moved.evidence["base_group"].endswith("(ranks 0, 1)") and "WORLD" not in moved.evidence["base_group"]
    )
    assert moved.evidence["head_group"] == "the default group (WORLD, ranks 0, 1)"
    # Compiled, the break moved it out of forward's graph into the graph Dynamo resumes in after
    # the print: the finding is at the break.
    assert moved.evidence["moved"] == "across a graph break"
    break_line = _line(head, 'print("synced")')
    assert moved.location is not None and (moved.location.path, moved.location.line) == (
        "model.py",
        break_line,
    )
    assert moved.location.function == "forward" and moved.location.code == 'print("synced")'
    assert moved.evidence["base_place"] == "the compiled graph of forward (model.py)"
    assert moved.evidence["head_place"] == (
        f"the compiled graph of forward after the graph break at model.py:{break_line}"
    )
    assert "compiled_ddp it moved from the compiled graph of forward (model.py)" in moved.message
    entry = resolve(moved)
    assert entry is not None and entry.cause.startswith("a graph break moved the collective")
    assert "--probes ddp;" in entry.verify[0]
    assert result.summary.startswith(
        f"1 cause: collective moved to another process group at model.py:{break_line}"
    )
    # What each side recorded: base's call site inside the compiled graph is the all_reduce's line.
    (base_ddp,) = result.workloads[0].base
    by = {v.variant: v for v in base_ddp.metrics_as(DdpMetrics).variants}
    [ranks] = by["compiled_ddp"].collective_calls
    assert ranks.ranks == [0, 1]  # both ranks issued the same
    [ours] = [c for c in ranks.calls if c.frame == "forward"]
    assert ours.graph and not ours.world and ours.ranks == [0, 1]
    assert ours.site is not None and ours.site.line == _line(base, NAMED)
    # DDP's own bucket all-reduces run in backward on WORLD, from no frame of the tree.
    assert any(c.world and c.frame is None for c in ranks.calls)


def test_identical_trees_that_all_reduce_on_a_group_of_their_own_after_a_break_find_nothing(
    review: ReviewFn, tmp_path: Path
) -> None:
    # A/A: each side makes its own groups, named in the order they are made; the same code on
    # both is no change, whatever the names.
    tree = grouped_tree(tmp_path / "tree", 'print("synced")\n        ' + NAMED)
    result = review(tree, tree, config(), probes=("ddp",))
    assert not result.findings, [f.message for f in result.findings]
    (head_ddp,) = result.workloads[0].head
    [variant] = head_ddp.metrics_as(DdpMetrics).variants
    [ranks] = variant.collective_calls
    [ours] = [c for c in ranks.calls if c.frame is not None]
    assert ours.graph and not ours.world and ours.ranks == [0, 1]
    assert ours.frame.startswith("torch_dynamo_resume_in_forward_at_")
    assert ours.site is not None and ours.site.line == _line(tree, NAMED)


# -- pure parts -----------------------------------------------------------------------------------


def _x(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op", **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "cat": cat, "args": args}


def test_collectives_from_nccl_and_gloo_events() -> None:
    allreduce = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 10, "Group size": 4}
    barrier = {"Collective name": "barrier", "dtype": "Byte", "In msg nelems": 1, "Group size": 4}
    nccl = [
        _x("record_param_comms", 0, 1, **allreduce),
        _x("record_param_comms", 5, 1, **allreduce),
        _x("record_param_comms", 9, 1, **barrier),
    ]
    (c,) = collectives(nccl, world_size=4, steps=2)
    assert (c.op, c.group_size, c.dtype, c.bytes, c.count) == ("all_reduce", 4, "Float", 40, 1)
    gloo = [_x("gloo:all_reduce", 0, 3, tid=9, **{"Input type": ["c10::BFloat16"], "Input Dims": [[3, 5]]})]
    (g,) = collectives(gloo, world_size=2)
    assert (g.op, g.bytes, g.group_size) == ("all_reduce", 30, 2)


def test_overlap_on_gpu_follows_hta() -> None:
    # NCCL 0-10 µs; compute 2-4 and 6-12: 2 + 4 = 6 of 10 µs hidden.
    kernels = [
        _x("ncclDevKernel_AllReduce", 0, 10, cat="kernel"),
        _x("sgemm", 2, 2, cat="kernel"),
        _x("elementwise", 6, 6, cat="kernel"),
    ]
    assert comm_overlap_pct(kernels) == 60.0


def test_overlap_on_cpu_counts_collectives_launched_before_backward_ends() -> None:
    node = "autograd::engine::evaluate_function: "
    step = [
        _x("perfcheck:step", 0, 100),
        _x(node + "AddmmBackward0", 10, 5),
        _x("c10d::allreduce_", 16, 1),  # before the next backward node: hidden
        _x(node + "AddmmBackward0", 20, 5),
        _x(node + "torch::autograd::AccumulateGrad", 26, 1),  # only stores a gradient
        _x("c10d::allreduce_", 28, 1),  # after backward's last node: not hidden
    ]
    assert comm_overlap_pct(step) == 50.0


def _variant(hashes: dict[int, list[str]], overlap: float, **kw: Any) -> DdpVariantMetrics:
    return DdpVariantMetrics(
        variant="compiled_ddp",
        ranks=[RankGraphs(rank=r, graph_hashes=h) for r, h in hashes.items()],
        comm_overlap_pct=overlap,
        **kw,
    )


def _result(side: str, v: DdpVariantMetrics) -> ProbeResult:
    return ProbeResult(
        probe="ddp",
        workload="net",
        side=side,  # type: ignore[arg-type]
        status="ok",
        duration_s=1,
        metrics=DdpMetrics(backend="nccl", world_size=2, variants=[v]).model_dump(mode="json"),
    )


def test_comparator_budget_and_existing_mismatch() -> None:
    same = {0: ["a", "b"], 1: ["a", "b"]}
    base = _result("base", _variant({0: ["a"], 1: ["z"]}, 60.0))
    head = _result("head", _variant({0: ["a"], 1: ["z"]}, 55.0))
    (only,) = findings("net", base, head, Config())
    assert only.category == "rank_graph_mismatch" and only.severity == "warning"  # already on base
    small_drop = findings(
        "net", _result("base", _variant(same, 60.0)), _result("head", _variant(same, 51.0)), Config()
    )
    assert small_drop == []  # 9 pp is within the default 10 pp budget


def test_the_ddp_section_reaches_the_worker_through_the_spec() -> None:
    from perfcheck.core.probes.ddp import DdpSettings
    from perfcheck.settings import WorkloadConfig
    from perfcheck.spec import ProbeSpec

    config = parse_config("ddp: {world_size: 3, variants: [eager]}", "perfcheck.yml")
    assert config.section(DdpSettings) == DdpSettings(world_size=3, variants=["eager"])
    assert Config().section(DdpSettings) == DdpSettings()  # no section: the defaults
    wl = WorkloadConfig(name="w", entry="mlp")
    sent = ProbeSpec(probe="ddp", side="base", tree=".", workload=wl, settings={"ddp": {"world_size": 3}})
    assert sent.section(DdpSettings).world_size == 3
    assert ProbeSpec(probe="ddp", side="base", tree=".", workload=wl).section(DdpSettings).world_size == 2


# -- the user's path ------------------------------------------------------------------------------


def users_environment() -> dict[str, str]:
    """The environment a user's review has: no test-suite compile cache, the sandbox on."""
    return {k: v for k, v in os.environ.items() if k not in (SHARED_CACHE_ENV, sandbox.DISABLE_ENV)}


@pytest.mark.e2e
@pytest.mark.inductor
def test_with_defaults_in_the_sandbox_ranks_that_compile_different_graphs_fail_the_review(
    tmp_path: Path,
) -> None:
    # Issue 40: under inductor in the sandbox, torchrun's ranks found torch's default folder of
    # precompiled headers read-only (the fork server's, shown to its children), every compiled
    # variant failed on both sides, and the review passed. Here: the command a user runs, the
    # default config but for which probe, the default caches, the sandbox on.
    user_config = "workloads:\n  - {name: net, entry: model.py:build, probes: [ddp]}\n"
    base = write_tree(
        tmp_path / "base", {"model.py": MODEL.format(change="pass", prelude=""), "perfcheck.yml": user_config}
    )
    head = tree(tmp_path / "head", "x = x * 2 if torch.distributed.get_rank() == 1 else x")
    assert sandbox.unavailable() is None, "this test is about the sandbox"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perfcheck",
            "review",
            "--base",
            str(base),
            "--head",
            str(head),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        env=users_environment(),
        timeout=600,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    spec = json.loads((tmp_path / "out" / "probes" / "head-net-ddp.spec.json").read_text())
    assert spec["compile"]["backend"] == "inductor" and spec["walls"] is not None
    for side in ("base", "head"):
        (ddp,) = result["workloads"][0][side]
        errors = {v["variant"]: v["error"] for v in ddp["metrics"]["variants"] if v["error"]}
        assert not errors, f"{side}: {errors}"
    mismatches = [f for f in result["findings"] if f["category"] == "rank_graph_mismatch"]
    assert mismatches and all(f["evidence"]["ranks"] == [1] for f in mismatches)


def test_the_ranks_error_is_the_exceptions_line_not_a_source_line_that_names_it() -> None:
    from perfcheck.runner.distributed.torchrun import first_error

    output = """[rank0]:   File "torch/_library/autograd.py", line 84, in backward
[rank0]:     raise RuntimeError(
[rank0]: RuntimeError: Trying to backward through ns.op.default but no autograd formula was registered.
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""
    assert first_error(output).startswith("RuntimeError: Trying to backward through ns.op.default")
    assert first_error("no error here") == "see the probe log"
