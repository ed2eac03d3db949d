"""A workload whose ``build()`` gives keyword inputs (``{"pixel_values": x}``, as Hugging Face and
many model repositories call their models) is run through this thin module, which takes them
positionally in the order given. Every probe then calls ``step(*inputs)`` alike, and the model
sees exactly ``model(**inputs)``."""

from __future__ import annotations

from typing import Any

import torch


class KeywordCall(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args: Any) -> Any:
        return self.model(**dict(zip(self.names, args, strict=True)))
