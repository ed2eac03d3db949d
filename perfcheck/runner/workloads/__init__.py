"""Built-in workloads, by name.

Each entry names a `build(device) -> (model, example_inputs)` callable as "package.module:function".
This module holds only strings and must stay torch-free, so that the bot side can list and validate
names without torch installed; the runner imports the entry when it runs the workload.
"""

from __future__ import annotations

_PKG = "perfcheck.runner.workloads"

BUILTIN_WORKLOADS: dict[str, str] = {
    "mlp": f"{_PKG}.mlp:mlp",
    "mlp-tiny": f"{_PKG}.mlp:mlp_tiny",
    "resnet50": f"{_PKG}.resnet:resnet50",
    "resnet-tiny": f"{_PKG}.resnet:resnet_tiny",
    "vit-b16": f"{_PKG}.vit:vit_b16",
    "vit-tiny": f"{_PKG}.vit:vit_tiny",
    "llama-7b-layers": f"{_PKG}.llama:llama_7b_layers",
    "llama-tiny": f"{_PKG}.llama:llama_tiny",
}

BUILTIN_DESCRIPTIONS: dict[str, str] = {
    "mlp": "MLP 1024-2048-1000 from the DDP + compile regression report, batch 256",
    "mlp-tiny": "MLP 64-128-10, batch 32",
    "resnet50": "ResNet-50 (bottleneck blocks [3, 4, 6, 3]), batch 128 x 3 x 224 x 224",
    "resnet-tiny": "ResNet with two 1-block bottleneck stages, width 8-16, batch 4 x 3 x 32 x 32",
    "vit-b16": "ViT-B/16 (dim 768, depth 12, 12 heads), batch 64 x 3 x 224 x 224",
    "vit-tiny": "ViT with patch 8, dim 32, depth 2, 2 heads, batch 4 x 3 x 32 x 32",
    "llama-7b-layers": "two LLaMA-7B-shaped decoder layers (dim 4096, 32 heads), tokens 4 x 512",
    "llama-tiny": "LLaMA-style decoder, dim 64, 4 heads, 2 layers, vocab 256, tokens 2 x 16",
}

# Small enough to build, compile and export on a CPU-only machine in seconds.
TINY_WORKLOADS: tuple[str, ...] = ("mlp-tiny", "mlp", "resnet-tiny", "vit-tiny", "llama-tiny")

__all__ = ["BUILTIN_DESCRIPTIONS", "BUILTIN_WORKLOADS", "TINY_WORKLOADS"]
