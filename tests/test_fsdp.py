"""The `fsdp` probe on the CPU: two gloo ranks under torchrun, FSDP2 (fully_shard) and torch.compile,
real torch on models the tests write.

One A/A review finds nothing; one head carries three planted changes a reviewer must be told about,
each in a different part of the model: the last layer is of a subclass the wrap policy does not
name (it loses its own FSDP unit: a layout change and other collectives), the model redistributes
an activation to Replicate() (a layout change no FX graph shows), and the layers branch on their
own index (identical layers no longer share one compiled graph).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ReviewFn, write_tree

from perfcheck.config import ConfigError, parse_config
from perfcheck.core.matrix import resolve

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
    assert m["units"] == ["", "layers.0", "layers.1", "layers.2", "layers.3"]
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
    layout = by["dtensor_layout_changed"]
    [unwrapped] = [f for f in layout if f.evidence["kind"] == "parameter"]
    assert unwrapped.evidence["parameter"].startswith("layers.3.")
    assert "sharded by layers.3 → by the root" in unwrapped.message
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
    assert parse_config("fsdp:\n  wrap: [DecoderLayer]\n", "perfcheck.yml").plugin_settings["fsdp"].wrap == [  # type: ignore[attr-defined]
        "DecoderLayer"
    ]
