"""Two-layer MLP: the model from the classic DDP + torch.compile regression report, and a tiny copy."""

from __future__ import annotations

import torch
from torch import nn

from ._common import Workload, build_model, input_generator, randn


class MLP(nn.Module):
    """Linear -> ReLU -> Linear."""

    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.fc1(x)))


def _build(
    device: str | torch.device, in_features: int, hidden: int, out_features: int, batch: int
) -> Workload:
    model = build_model(lambda: MLP(in_features, hidden, out_features), device)
    x = randn(batch, in_features, device=device, generator=input_generator())
    return model, (x,)


def mlp(device: str | torch.device) -> Workload:
    """Linear(1024 -> 2048), ReLU, Linear(2048 -> 1000); input batch 256 x 1024."""
    return _build(device, 1024, 2048, 1000, batch=256)


def mlp_tiny(device: str | torch.device) -> Workload:
    """Linear(64 -> 128), ReLU, Linear(128 -> 10); input batch 32 x 64."""
    return _build(device, 64, 128, 10, batch=32)
