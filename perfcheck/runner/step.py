"""One training or inference step of a workload, the unit every probe runs and times."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

_AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def autocast(amp: str, device: str) -> Iterator[None]:
    if amp == "none":
        yield
        return
    with torch.autocast(device_type=device, dtype=_AMP_DTYPES[amp]):
        yield


def _loss(out: Any) -> torch.Tensor:
    # A sum over every floating output is enough to drive backward through the whole graph.
    tensors = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    return sum(t.float().sum() for t in tensors if t.is_floating_point())  # type: ignore[return-value]


def make_step(
    model: Callable[..., Any],
    train: bool,
    amp: str,
    device: str,
    optimizer: torch.optim.Optimizer | None = None,
) -> Callable[..., Any]:
    """A step over ``model`` (eager or compiled): forward; for training backward and the optimizer."""

    def infer(*inputs: Any) -> Any:
        with torch.no_grad(), autocast(amp, device):
            return model(*inputs)

    def train_step(*inputs: Any) -> Any:
        with autocast(amp, device):
            out = model(*inputs)
        _loss(out).backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return out

    return train_step if train else infer


def frozen_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum at learning rate 0: the full optimizer work, but the weights never move,
    so step 1000 computes on the same numbers as step 1 (no drift into NaNs or denormals)."""
    return torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)


def batch_size(inputs: tuple[Any, ...]) -> int:
    return next((int(t.shape[0]) for t in inputs if isinstance(t, torch.Tensor) and t.dim()), 1)


def prepare(model: torch.nn.Module, train: bool) -> torch.nn.Module:
    return model.train() if train else model.eval()


def resize_batch(inputs: tuple[Any, ...], batch: int) -> tuple[Any, ...]:
    """The inputs cut to ``batch`` rows along dim 0, for the recompilation check. Only what is a
    batch is cut: tensors whose first dimension is the batch's (offsets, index and lookup tensors
    of other lengths stay whole)."""
    full = batch_size(inputs)
    return tuple(
        t[:batch] if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape[0] == full else t for t in inputs
    )


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
