"""The built-in workloads: they build, run, export and compile without graph breaks (real torch, CPU)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch

from perfcheck.config import DEFAULT_WORKLOAD
from perfcheck.runner.workloads import BUILTIN_DESCRIPTIONS, BUILTIN_WORKLOADS, TINY_WORKLOADS

Build = Callable[[str], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

EXPECTED_OUTPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "mlp-tiny": (32, 10),
    "mlp": (256, 1000),
    "resnet-tiny": (4, 10),
    "vit-tiny": (4, 10),
    "llama-tiny": (2, 16, 256),
}


def resolve(name: str) -> Build:
    module_name, _, attr = BUILTIN_WORKLOADS[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    # Compiled code and counters from one test must not satisfy or pollute the next one's checks.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_registry_is_consistent() -> None:
    assert set(BUILTIN_DESCRIPTIONS) == set(BUILTIN_WORKLOADS)
    assert set(TINY_WORKLOADS) <= set(BUILTIN_WORKLOADS)
    assert set(EXPECTED_OUTPUT_SHAPES) == set(TINY_WORKLOADS)
    assert DEFAULT_WORKLOAD in TINY_WORKLOADS
    for entry in BUILTIN_WORKLOADS.values():
        module_name, _, attr = entry.partition(":")
        assert module_name.startswith("perfcheck.runner.workloads.") and attr.isidentifier()


@pytest.mark.e2e
def test_registry_import_is_torch_free() -> None:
    code = "import sys, perfcheck.runner.workloads; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", sorted(set(BUILTIN_WORKLOADS) - set(TINY_WORKLOADS)))
def test_realistic_entries_resolve(name: str) -> None:
    # Only resolved, not built: these sizes are meant for a GPU and too big for a CPU test run.
    assert callable(resolve(name))


@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_builds_deterministically_without_touching_global_rng(name: str) -> None:
    rng_before = torch.get_rng_state()
    model_a, inputs_a = resolve(name)("cpu")
    model_b, inputs_b = resolve(name)("cpu")
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert not model_a.training
    for a, b in zip(inputs_a, inputs_b, strict=True):
        assert torch.equal(a, b)
    for (key, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), key


@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_workload_runs_exports_and_compiles(name: str) -> None:
    model, inputs = resolve(name)("cpu")
    assert isinstance(model, torch.nn.Module)
    assert inputs and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)

    with torch.no_grad():
        expected = model(*inputs)
        # perfcheck re-runs with a batch slice to provoke a recompile, so any batch size must work.
        sliced = model(*(t[:1] for t in inputs))
    assert expected.shape == EXPECTED_OUTPUT_SHAPES[name]
    assert torch.isfinite(expected).all()
    assert sliced.shape == (1, *EXPECTED_OUTPUT_SHAPES[name][1:])
    assert torch.isfinite(sliced).all()

    exported = torch.export.export(model, inputs)
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(*inputs), expected, rtol=1e-4, atol=1e-5)

    explanation = torch._dynamo.explain(model)(*inputs)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet-tiny", "llama-tiny"])
def test_training_mode_has_no_graph_breaks(name: str) -> None:
    # BatchNorm updates buffers in train mode, a different path from eval; llama stands in for the rest.
    model, inputs = resolve(name)("cpu")
    model.train()
    explanation = torch._dynamo.explain(model)(*inputs)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    torch.export.export(model, inputs)
