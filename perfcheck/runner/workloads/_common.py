"""Shared plumbing for the built-in workloads: reproducible weights and inputs without global RNG changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

# Distinct seeds so that the first input values are not a copy of the first weight values.
WEIGHT_SEED = 0
INPUT_SEED = 1

Workload = tuple[nn.Module, tuple[torch.Tensor, ...]]
"""What every workload's `build(device)` returns: the model and its example inputs, both on `device`."""

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def build_model(
    factory: Callable[[], ModuleT],
    device: str | torch.device,
    *,
    dtype: torch.dtype | None = None,
    seed: int = WEIGHT_SEED,
) -> ModuleT:
    """Construct `factory()` with seeded default initialisation, move it to `device`, return it in eval mode.

    The caller's global RNG state is the same afterwards as before.
    """
    # nn.Module initialisers draw from the global generator and take no generator argument, so the
    # CPU generator is forked (and restored on exit) rather than replaced. Building on CPU rather than
    # on `device` keeps the weights identical on every device, which lets results from different
    # machines be compared; the one extra host-to-device copy is cheap next to a benchmark.
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        # A caller's torch.set_default_device would otherwise send init to another device's generator.
        with torch.device("cpu"):
            model = factory()
    # eval so that BatchNorm uses running statistics; a training probe calls .train() itself.
    return model.to(device=device, dtype=dtype).eval()


def input_generator(seed: int = INPUT_SEED) -> torch.Generator:
    """A fresh CPU generator for example inputs; inputs are drawn on CPU and then moved, as weights are."""
    return torch.Generator(device="cpu").manual_seed(seed)


def randn(*shape: int, device: str | torch.device, generator: torch.Generator) -> torch.Tensor:
    """Standard-normal float32 tensor drawn on CPU from `generator`, then moved to `device`."""
    return torch.randn(shape, generator=generator).to(device)
