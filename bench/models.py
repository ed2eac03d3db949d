"""Third-party models for the timing trust benchmark (bench/processes.py), as perfcheck workloads.

Each is ``build(device) -> (model, inputs)`` over a model the GPU machine's packages ship
(transformers, timm, torchvision), random init, a small config, nothing downloaded. The trees the
benchmark reviews are copies of this file; the attention-switch run's head tree is a copy with
``ATTENTION = "eager"``, the change a PR to a model repository makes.
"""

from __future__ import annotations

from typing import Any

import torch

ATTENTION = "sdpa"  # the transformers attention implementation of the Llama model


def _llama(
    device: str, hidden: int, layers: int, vocab: int, sequence: int
) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        vocab_size=vocab,
        max_position_embeddings=2 * sequence,
        use_cache=False,
    )
    config._attn_implementation = ATTENTION
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    ids = torch.randint(0, vocab, (2, sequence), generator=torch.Generator().manual_seed(0))
    return model, (ids.to(device),)


def llama(device: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """A small Hugging Face Llama: 4 decoder layers, hidden 1024, sequence 1024, batch 2."""
    return _llama(device, hidden=1024, layers=4, vocab=32000, sequence=1024)


def llama_tiny(device: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """The same architecture at CPU size, for a smoke run of the benchmark."""
    return _llama(device, hidden=64, layers=2, vocab=256, sequence=32)


def vit(device: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """timm's ViT-B/16 at 224 px, batch 32."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_base_patch16_224", pretrained=False).to(device)
    images = torch.randn(32, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return model, (images.to(device),)


def resnet(device: str) -> tuple[torch.nn.Module, tuple[Any, ...]]:
    """torchvision's ResNet-50, batch 64."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(device)
    images = torch.randn(64, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return model, (images.to(device),)
