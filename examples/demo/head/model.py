"""A small classifier: the demo's head revision, as a PR might change it."""

import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)
        self.last_scale = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.gelu(self.fc1(x))
        # Keep the activation scale for the training logger.
        self.last_scale = h.abs().max().item()
        return self.fc2(h)


def build(device: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    gen = torch.Generator().manual_seed(0)
    model = Classifier().to(device)
    x = torch.randn(32, 64, generator=gen).to(device)
    return model, (x,)
