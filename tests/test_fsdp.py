"""The `fsdp` probe on the CPU: two gloo ranks under torchrun, FSDP2 (fully_shard) and torch.compile,
real torch on models the tests write.

One A/A review finds nothing; one head carries three planted changes a reviewer must be told about,
each in a different part of the model: the last layer is of a subclass the wrap policy does not
name (it loses its own FSDP unit: a layout change and other collectives), the model redistributes
an activation to Replicate() (a layout change no FX graph shows), and the layers branch on their
own index (identical layers no longer share one compiled graph).

Then workloads that call fully_shard themselves (SELF_SHARDED): perfcheck's own wrap against
PyTorch's defaults, and a head that merges two blocks into one unit, adds an all_reduce and
branches on the rank, each of which the probe once got wrong; and heads that change only how the
units run (reshard_after_forward, a MixedPrecisionPolicy): a unit change the collectives' drift is
read against, no DTensor layout change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.config import ConfigError, parse_config
from perfcheck.core.causes import grouped
from perfcheck.core.matrix import resolve
from perfcheck.core.probes.fsdp_models import FsdpMetrics, FsdpSettings, FsdpUnit
from perfcheck.core.probes.fsdp_units import unit_findings

MODEL = """\
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard

BRANCH = {branch}
REDISTRIBUTE = {redistribute}


class Block(nn.Module):
    def __init__(self, index):
        super().__init__()
        self.index = index
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        if BRANCH and self.index % 2:
            x = x * 0.5
        return x + torch.relu(self.fc(self.norm(x)))


class FinalBlock(Block):
    pass


LAST = {last}


class Net(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.mesh = mesh
        self.embed = nn.Linear(16, 32)
        self.layers = nn.ModuleList([Block(i) for i in range(3)] + [LAST(3)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.embed(x)
        if self.mesh is not None:
            h = DTensor.from_local(h, self.mesh, [Shard(0)]).redistribute(self.mesh, [Replicate()]).to_local()
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def build(device):
    mesh = None
    if REDISTRIBUTE and dist.is_initialized():
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device.split(":")[0], (dist.get_world_size(),))
    gen = torch.Generator().manual_seed(0)
    return Net(mesh).to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""

CONFIG = """
workloads: [{name: decoder, entry: model.py:build, timeout_s: 400}]
compile: {backend: aot_eager}
fsdp:
  wrap: [Block]
  variants: [eager, compiled_layers]
  steps: 2
"""


def decoder_tree(root: Path, branch: bool = False, last: str = "Block", redistribute: bool = False) -> Path:
    body = MODEL.format(branch=branch, last=last, redistribute=redistribute)
    return write_tree(root, {"model.py": body})


def fsdp_review(review: ReviewFn, base: Path, head: Path):  # type: ignore[no-untyped-def]
    return review(base, head, config=parse_config(CONFIG, "fsdp-test.yml"), probes=("fsdp",))


def test_identical_trees_have_the_same_layout_collectives_and_graphs(
    review: ReviewFn, tmp_path: Path
) -> None:
    tree = decoder_tree(tmp_path / "tree")
    result = fsdp_review(review, tree, tree)
    assert not result.findings, [f.message for f in result.findings]
    head = result.workloads[0].head[0]
    assert head.status == "ok", head.message
    m = head.metrics
    assert m["backend"] == "gloo" and m["world_size"] == 2 and m["wrapped_by"] == "perfcheck"
    assert [u["name"] for u in m["units"]] == ["", "layers.0", "layers.1", "layers.2", "layers.3"]
    assert {tuple(p["placements"]) for p in m["params"]} == {("Shard(dim=0)",)}
    layers = next(v for v in m["variants"] if v["variant"] == "compiled_layers")
    [graphs] = layers["graphs"]
    assert (graphs["code"], graphs["graphs"], graphs["modules"]) == (
        "Block.forward",
        1,
        4,
    )  # one graph, 4 layers
    gathered = {c["unit"] for c in layers["collectives"] if c["op"] == "all_gather"}
    assert gathered == {"", "layers.0", "layers.1", "layers.2", "layers.3"}
    assert {c["op"] for c in layers["collectives"]} == {"all_gather", "reduce_scatter"}
    # Each collective with its process group: FSDP's run on the mesh's, the default group here.
    [issued] = layers["collective_calls"]
    assert issued["ranks"] == [0, 1] and issued["calls"]
    assert all(c["world"] and c["ranks"] == [0, 1] and not c["graph"] for c in issued["calls"])


def test_a_head_that_unwraps_a_layer_redistributes_and_branches_per_layer(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = decoder_tree(tmp_path / "base")
    head = decoder_tree(tmp_path / "head", branch=True, last="FinalBlock", redistribute=True)
    result = fsdp_review(review, base, head)
    by = {}
    for f in result.findings:
        by.setdefault(f.category, []).append(f)
    assert result.verdict == "fail"
    # The last layer's class no longer matches `fsdp.wrap`: its parameters move to the root's unit.
    # That is how FSDP groups the modules, not a DTensor layout: every parameter is Shard(dim=0) still.
    [unwrapped] = by["fsdp_unit_changed"]
    assert unwrapped.evidence["change"] == "unwrapped"
    assert (
        "layers.3 has no unit of its own on head: its parameters are sharded by the root" in unwrapped.message
    )
    layout = by["dtensor_layout_changed"]
    assert not [f for f in layout if f.evidence["kind"] == "parameter"]  # their move is the unit's change
    entry = resolve(unwrapped)
    assert entry is not None and "fsdp.wrap" in entry.cause
    # The activation's redistribute: named at its line, though no FX graph shows it.
    [moved] = [f for f in layout if f.evidence["kind"] == "redistribute"]
    assert moved.evidence["source"] == "Shard(dim=0)" and moved.evidence["target"] == "Replicate()"
    assert moved.location is not None and "redistribute(self.mesh, [Replicate()])" in (
        moved.location.code or ""
    )
    # Collectives: layers.3 has no all-gather of its own any more; the redistribute adds one outside FSDP.
    [drift] = by["collective_drift"]
    assert drift.evidence["units_lost"] == ["layers.3"]
    assert any("outside FSDP" in line for line in drift.evidence["added"])
    assert "; likely from the FSDP unit settings changed (layers.3 has no unit of its own" in drift.message
    # The per-layer branch: the compiled layers no longer share one graph, named at the guarded line.
    [reuse] = by["graph_reuse_lost"]
    assert reuse.evidence["code"] == "Block.forward" and reuse.evidence["head_graphs"] > 1
    assert reuse.evidence["base_graphs"] == 1
    assert "self.index" in reuse.evidence["guard"]
    assert reuse.location is not None and reuse.location.code == "if BRANCH and self.index % 2:"
    cause = resolve(reuse)
    assert cause is not None and "attribute" in cause.cause


def test_fsdp_settings_are_checked_before_anything_runs() -> None:
    with pytest.raises(
        ConfigError,
        match=r"fsdp\.variants\[0\]: expected .eager., .compiled_layers. or .compiled_model. "
        r"\(got .compiled.\)",
    ):
        parse_config("fsdp:\n  variants: [compiled]\n", "perfcheck.yml")
    with pytest.raises(ConfigError, match=r"fsdp\.world_size: expected a whole number"):
        parse_config("fsdp:\n  world_size: '2'\n", "perfcheck.yml")
    with pytest.raises(ConfigError, match=r"did you mean `fsdp`"):
        parse_config("fsdpp:\n  world_size: 2\n", "perfcheck.yml")
    with pytest.raises(ConfigError, match=r"fsdp\.wrp: unknown key \(did you mean `wrap`\?\)"):
        parse_config("fsdp:\n  wrp: []\n", "perfcheck.yml")
    config = parse_config("fsdp:\n  wrap: [DecoderLayer]\n", "perfcheck.yml")
    assert config.section(FsdpSettings).wrap == ["DecoderLayer"]


# -- workloads that shard themselves ----------------------------------------------------------

SELF_SHARDED = """\
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

SHARD = {shard!r}
MERGE = {merge}
ALL_REDUCE = {all_reduce}
RANK_BRANCH = {rank_branch}
TUNED = {tuned}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        h = x + torch.relu(self.fc(self.norm(x)))
        if RANK_BRANCH and dist.get_rank() == 1:
            h = h * 0.5
        return h


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.layers = nn.ModuleList([Block() for _ in range(4)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        if ALL_REDUCE:
            seen = h.detach().abs().amax().reshape(1)
            dist.all_reduce(seen, op=dist.ReduceOp.MAX)
        return self.head(h)


def by_columns(param):
    return Shard(1) if param.ndim == 2 else None


def shard(net):
    if SHARD == "defaults":  # PyTorch's own defaults throughout
        for layer in net.layers:
            fully_shard(layer)
        fully_shard(net)
    elif SHARD == "own":
        own = dict(reshard_after_forward=False, mp_policy=MixedPrecisionPolicy(reduce_dtype=torch.float32))
        if MERGE:
            fully_shard([net.layers[0], net.layers[1]], shard_placement_fn=by_columns, **own)
        for layer in net.layers[2 if MERGE else 0 :]:
            fully_shard(layer, shard_placement_fn=by_columns, **own)
        fully_shard(net)
    elif SHARD == "tuned":  # PyTorch's defaults but for the settings TUNED gives every unit
        for layer in net.layers:
            fully_shard(layer, **TUNED)
        fully_shard(net, **TUNED)


def build(device):
    net = Net().to(device)
    if SHARD != "none" and dist.is_initialized():
        shard(net)
    gen = torch.Generator().manual_seed(0)
    return net, (torch.randn(8, 16, generator=gen).to(device),)
"""

EAGER_ONLY = CONFIG.replace("variants: [eager, compiled_layers]", "variants: [eager]")


def self_sharded(
    root: Path,
    shard: str,
    merge: bool = False,
    all_reduce: bool = False,
    rank_branch: bool = False,
    tuned: str = "dict()",
) -> Path:
    body = SELF_SHARDED.format(
        shard=shard, merge=merge, all_reduce=all_reduce, rank_branch=rank_branch, tuned=tuned
    )
    return write_tree(root, {"model.py": body})


def _per_step(variant: dict, op: str) -> int:  # type: ignore[type-arg]
    return sum(c["count"] for c in variant["collectives"] if c["op"] == op)


def _lines(tree: Path, code: str) -> list[int]:
    """The lines of the tree's model.py that hold ``code``."""
    return [
        i for i, text in enumerate((tree / "model.py").read_text().splitlines(), 1) if text.strip() == code
    ]


def test_perfchecks_own_wrap_runs_the_collectives_of_fsdp2s_defaults(
    review: ReviewFn, tmp_path: Path
) -> None:
    # base: perfcheck shards the blocks and the root; head: the workload calls fully_shard itself
    # with nothing but PyTorch's defaults. perfcheck's wrap once passed reshard_after_forward=True
    # for the root too, so it measured 10 all-gathers a step where FSDP2 runs 9, and recorded the
    # workload's own reshard_after_forward as null.
    base, head = self_sharded(tmp_path / "base", "none"), self_sharded(tmp_path / "head", "defaults")
    result = review(base, head, config=parse_config(EAGER_ONLY, "fsdp-test.yml"), probes=("fsdp",))
    assert not result.findings, [f.message for f in result.findings]
    sides = [r.metrics for r in (result.workloads[0].base[0], result.workloads[0].head[0])]
    assert [m["wrapped_by"] for m in sides] == ["perfcheck", "workload"]
    for m in sides:
        [eager] = m["variants"]
        # Forward gathers each of the 5 units; backward gathers again all but the root's, which
        # FSDP2 keeps after forward by default.
        assert (_per_step(eager, "all_gather"), _per_step(eager, "reduce_scatter")) == (9, 5)
        units = {u["name"]: u for u in m["units"]}
        assert sorted(units) == ["", "layers.0", "layers.1", "layers.2", "layers.3"]
        assert [units[n]["reshard_after_forward"] for n in sorted(units)] == [False, True, True, True, True]
        assert m["reshard_after_forward"] is True  # every unit but the root's
    perfchecks, workloads = ({u["name"]: u["sharded_at"] for u in m["units"]} for m in sides)
    assert set(perfchecks.values()) == {None}  # perfcheck's wrap is no line of the tree
    assert (
        workloads["layers.2"]["code"] == "fully_shard(layer)" and workloads[""]["code"] == "fully_shard(net)"
    )
    assert workloads[""]["line"] == _lines(head, "fully_shard(net)")[0]  # the "defaults" branch


def test_a_workload_that_merges_two_blocks_adds_an_all_reduce_and_branches_on_the_rank(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = self_sharded(tmp_path / "base", "own")
    head = self_sharded(tmp_path / "head", "own", merge=True, all_reduce=True, rank_branch=True)
    result = fsdp_review(review, base, head)
    b, h = (r.metrics for r in (result.workloads[0].base[0], result.workloads[0].head[0]))
    # The workload's own fully_shard lines, for every parameter of the nested blocks too (the
    # recorder once looked only at parameters directly on the module it was given: none here).
    [sharded] = _lines(base, "fully_shard(layer, shard_placement_fn=by_columns, **own)")
    blocks = [p for p in b["params"] if p["name"].startswith("layers.")]
    assert len(blocks) == 16 and {p["sharded_at"]["line"] for p in blocks} == {sharded}
    assert {p["sharded_at"]["line"] for p in b["params"] if p["unit"] == ""} == {
        _lines(base, "fully_shard(net)")[1]
    }
    # Its own reshard_after_forward, mixed precision and placements, as FSDP runs them.
    units = {u["name"]: u for u in b["units"]}
    assert (
        units["layers.1"]["reshard_after_forward"] is False and units["layers.1"]["reduce_dtype"] == "float32"
    )
    assert units[""]["reshard_after_forward"] is False and units[""]["reduce_dtype"] is None
    assert b["reshard_after_forward"] is False
    laid = {p["name"]: p["placements"] for p in b["params"]}
    assert laid["layers.0.fc.weight"] == ["Shard(dim=1)"] and laid["layers.0.fc.bias"] == ["Shard(dim=0)"]
    # fully_shard([block0, block1]) is one unit of two modules, and that is a layout change.
    merged = next(u for u in h["units"] if len(u["modules"]) > 1)
    assert (merged["name"], merged["modules"], merged["params"]) == (
        "layers.0 + layers.1",
        ["layers.0", "layers.1"],
        8,
    )
    assert len(h["units"]) == 4
    by: dict[str, list] = {}  # type: ignore[type-arg]
    for f in result.findings:
        by.setdefault(f.category, []).append(f)
    [unit] = by["fsdp_unit_changed"]  # the parameters' moves are the units' change, no layout's
    assert "dtensor_layout_changed" not in by
    assert unit.evidence["change"] == "merged"
    assert "layers.0 + layers.1 are one unit on head" in unit.message
    assert unit.location is not None and [unit.location.line] == _lines(
        head, "fully_shard([net.layers[0], net.layers[1]], shard_placement_fn=by_columns, **own)"
    )
    cause = resolve(unit)
    assert cause is not None and "one `fully_shard([a, b])` now groups" in cause.cause
    # The collectives: the merged unit named as one, never "layers.0, layers.1"; the all_reduce
    # with its size (it once had none: "of tensors", byte totals unchanged).
    [drift] = by["collective_drift"]
    assert "one unit of 2 modules now: layers.0 + layers.1 (2 units on base)" in drift.message
    assert all("layers.0, layers.1" not in f.message for f in result.findings)
    assert "1× all_reduce of 4 B float over 2 ranks (outside FSDP)" in drift.evidence["added"]
    assert drift.evidence["reading"] == "wrap, outside FSDP"
    # The units' change is what the collectives' drift follows from.
    assert f"likely from the FSDP unit settings changed at model.py:{unit.location.line} (" in drift.message
    drift_cause = resolve(drift)
    assert drift_cause is not None and drift_cause.cause.startswith("a unit's wrap changed")
    assert drift_cause.verify == [
        "perfcheck review --out perfcheck-out/verify --no-compile-latency --base BASE --head HEAD "
        f"--workloads {drift.workload} --probes fsdp"
    ]
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "4 units (1 of several modules)" in comment
    assert "1 all-reduce," in comment and "all-reduces" not in comment
    # The rank-dependent branch: named at the line whose graph differs between the ranks.
    [ranks] = by["rank_graph_mismatch"]
    assert ranks.location is not None and ranks.location.code == "h = h * 0.5"
    assert ranks.evidence["variant"] == "compiled_layers" and ranks.evidence["ranks"] == [1]
    assert "rank 1: %h_1" in ranks.evidence["nodes"]
    rank_cause = resolve(ranks)
    assert rank_cause is not None and all("--probes fsdp" in v for v in rank_cause.verify)


# -- a unit's settings: a cause of their own, no layout ---------------------------------------


def _by_category(result):  # type: ignore[no-untyped-def]
    by: dict[str, list] = {}  # type: ignore[type-arg]
    for f in result.findings:
        by.setdefault(f.category, []).append(f)
    return by


def test_blocks_that_keep_their_parameters_after_forward_are_a_unit_change_the_collectives_follow(
    review: ReviewFn, tmp_path: Path
) -> None:
    # Issue 42: the review once called this a DTensor layout change, though every parameter is
    # Shard(dim=0) on both sides, beside a collective drift that named no cause.
    base = self_sharded(tmp_path / "base", "tuned")
    head = self_sharded(tmp_path / "head", "tuned", tuned="dict(reshard_after_forward=False)")
    result = review(base, head, config=parse_config(EAGER_ONLY, "fsdp-test.yml"), probes=("fsdp",))
    by = _by_category(result)
    assert "dtensor_layout_changed" not in by, [f.message for f in by["dtensor_layout_changed"]]
    [unit] = by["fsdp_unit_changed"]
    assert unit.severity == "warning" and unit.evidence["change"] == "reshard_after_forward"
    # The root keeps its parameters after forward on both sides: the blocks changed.
    assert unit.message == "layers.0, layers.1, layers.2 and layers.3: reshard_after_forward True → False"
    assert unit.location is not None and [unit.location.line] == _lines(head, "fully_shard(layer, **TUNED)")
    cause = resolve(unit)
    assert cause is not None and cause.cause.startswith("`reshard_after_forward` changed")
    assert cause.verify == [
        "perfcheck review --out perfcheck-out/verify --no-compile-latency --base BASE --head HEAD "
        f"--workloads {unit.workload} --probes fsdp"
    ]
    # No all-gather in backward any more (9 → 5 a step, 5 reduce-scatters on both), read as the
    # unit change's effect.
    [drift] = by["collective_drift"]
    assert drift.severity == "error" and "(14 → 10 calls," in drift.message
    assert drift.message.endswith(
        f"; likely from the FSDP unit settings changed at model.py:{unit.location.line} "
        "(layers.0, layers.1, layers.2 and layers.3: reshard_after_forward True → False)"
    )
    assert result.verdict == "fail"
    # One cause, one headline: the unit change heads the review, its collective drift beneath it.
    assert result.summary.startswith("1 cause: FSDP unit settings changed at model.py:")
    assert "reshard_after_forward True → False) — collectives 14 → 10 a step" in result.summary
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "**1. FSDP unit settings changed**" in comment and "**2." not in comment
    assert "| Collectives changed | " in comment
    assert "reshard after forward: 4 of 5, no mixed precision" in comment
    assert "reshard after forward: 0 of 5, no mixed precision" in comment


def test_a_mixed_precision_policy_added_is_a_unit_change_not_a_layout(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = self_sharded(tmp_path / "base", "tuned")
    head = self_sharded(
        tmp_path / "head", "tuned", tuned="dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))"
    )
    result = review(base, head, config=parse_config(EAGER_ONLY, "fsdp-test.yml"), probes=("fsdp",))
    by = _by_category(result)
    assert "dtensor_layout_changed" not in by, [f.message for f in by["dtensor_layout_changed"]]
    [unit] = by["fsdp_unit_changed"]
    assert unit.evidence["change"] == "mixed_precision"
    assert unit.evidence["changes"] == "every unit (5): param_dtype None → bfloat16"
    cause = resolve(unit)
    assert cause is not None and cause.cause.startswith("mixed precision changed")
    # The all-gathers move half the bytes: the drift's cause is the policy.
    [drift] = by["collective_drift"]
    assert "mixed precision" in drift.evidence["reading"]
    assert "likely from the FSDP unit settings changed at model.py:" in drift.message
    assert "(every unit (5): param_dtype None → bfloat16" in drift.message
    assert result.summary.startswith("1 cause: FSDP unit settings changed at model.py:")
    assert "param_dtype None → bfloat16) — collectives " in result.summary
    comment = (tmp_path / "out" / "comment.md").read_text()
    assert "**1. FSDP unit settings changed**" in comment and "**2." not in comment
    assert "param bfloat16 (every unit)" in comment


def _units(**settings: object) -> FsdpMetrics:
    units = [FsdpUnit(name=n, modules=[n], **settings) for n in ("", "layers.0", "layers.1")]  # type: ignore[arg-type]
    return FsdpMetrics(backend="gloo", world_size=2, device="cpu", wrapped_by="workload", units=units)


def test_offload_and_input_casting_are_unit_settings_where_both_sides_know_them() -> None:
    # A record of base written before perfcheck recorded them knows neither: that is no change.
    older, now = _units(), _units(offload_policy="OffloadPolicy()", cast_forward_inputs=True)
    assert unit_findings("wl", older, now) == []
    offloaded = _units(offload_policy="CPUOffloadPolicy(pin_memory=True)", cast_forward_inputs=False)
    [unit] = unit_findings("wl", now, offloaded)
    assert unit.evidence["changes"].splitlines() == [
        "every unit (3): cast_forward_inputs True → False",
        "every unit (3): offload_policy OffloadPolicy() → CPUOffloadPolicy(pin_memory=True)",
    ]
    assert unit.message == "every unit (3): cast_forward_inputs True → False and 1 more unit change"
    cause = resolve(unit.model_copy(update={"evidence": {**unit.evidence, "change": "offload"}}))
    assert cause is not None and cause.cause.startswith("the offload policy changed")


# -- a collective of the model's own, across a graph break ------------------------------------

GROUPED = """\
import torch
import torch.distributed as dist
from torch import nn

RANKS = {ranks}


class Block(nn.Module):
    def __init__(self, group):
        super().__init__()
        self.group = group
        self.fc = nn.Linear(32, 32)

    def forward(self, x):
        h = x + torch.relu(self.fc(x))
        seen = h.detach().abs().amax().reshape(1)
        {sync}
        return h * seen


class Net(nn.Module):
    def __init__(self, group):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.layers = nn.ModuleList([Block(group) for _ in range(2)])
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def build(device):
    # Every rank makes the group, as new_group needs; a rank it leaves out gets no group.
    group = dist.new_group(ranks=RANKS) if dist.is_initialized() else None
    gen = torch.Generator().manual_seed(0)
    return Net(group).to(device), (torch.randn(8, 16, generator=gen).to(device),)
"""
SYNC = "dist.all_reduce(seen, op=dist.ReduceOp.MAX, group=self.group)"


def test_a_break_that_moves_a_layers_all_reduce_onto_fewer_ranks_is_found_at_the_break(
    review: ReviewFn, tmp_path: Path
) -> None:
    base = write_tree(tmp_path / "base", {"model.py": GROUPED.format(ranks=[0, 1], sync=SYNC)})
    head_sync = 'print("synced")\n        ' + SYNC
    head = write_tree(tmp_path / "head", {"model.py": GROUPED.format(ranks=[0], sync=head_sync)})
    only_layers = CONFIG.replace("variants: [eager, compiled_layers]", "variants: [compiled_layers]")
    result = review(base, head, config=parse_config(only_layers, "fsdp-test.yml"), probes=("fsdp",))
    by = _by_category(result)
    [moved] = by["collective_group_changed"]
    assert moved.severity == "error" and moved.evidence["change"] == "fewer ranks"
    assert moved.evidence["variants"] == "compiled_layers" and moved.evidence["ranks"] == [0]
    assert (
        "now runs on group 1 (rank 0 only), where base ran it on group 1 (ranks 0, 1): 1 of base's 2 ranks"
        in (moved.message)
    )
    [break_line] = _lines(head, 'print("synced")')
    assert moved.location is not None and (moved.location.line, moved.location.function) == (
        break_line,
        "forward",
    )
    assert moved.evidence["base_place"] == "the compiled graph of forward (model.py)"
    assert (
        moved.evidence["head_place"]
        == f"the compiled graph of forward after the graph break at model.py:{break_line}"
    )
    entry = resolve(moved)
    assert entry is not None and entry.cause.startswith("the collective now runs on a group of fewer ranks")
    assert (
        entry.verify[0].startswith("TORCH_LOGS=graph_breaks perfcheck review")
        and "--probes fsdp" in entry.verify[0]
    )
    # gloo's trace has no group: each collective's size is the recorded group's, so the collectives
    # per step change too, an effect read under the group change.
    [drift] = by["collective_drift"]
    assert "now 2× all_reduce of 4 B float over 1 ranks (outside FSDP)" in drift.message
    assert "no longer 2× all_reduce of 4 B float over 2 ranks (outside FSDP)" in drift.message
    assert (
        f"; likely from the collective moved to another process group at model.py:{break_line} ("
        in drift.message
    )
    drift_cause = resolve(drift)
    assert drift_cause is not None and drift_cause.cause.startswith(
        "a collective moved to another process group"
    )
    [caused] = [g for g in grouped(result) if g.group.caused]
    assert [f.category for f in caused.leads] == ["collective_group_changed"]
    assert [f.category for f in caused.effects] == ["collective_drift"]
    # FSDP's own all-gathers and reduce-scatters stay on the default group: no finding of theirs.
    assert all(f.evidence["op"] == "all_reduce" for f in by["collective_group_changed"])
    # Base's call, inside each layer's compiled graph, at its own line (the graph's node for it).
    [layers] = result.workloads[0].base[0].metrics["variants"]
    ours = [c for r in layers["collective_calls"] for c in r["calls"] if not c["world"]]
    assert ours and all(c["graph"] and c["site"]["line"] == _lines(base, SYNC)[0] for c in ours)
    # FSDP's, in forward from eager code (its hooks run outside the compiled layers) at Net's call
    # of each layer; in backward from none of the tree's frames.
    theirs = [c for r in layers["collective_calls"] for c in r["calls"] if c["world"]]
    assert {(c["graph"], c["site"]["code"]) for c in theirs if c["frame"] == "forward"} == {
        (False, "h = layer(h)")
    }
