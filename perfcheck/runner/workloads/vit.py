"""Vision Transformer (ViT): patch embedding, class token, learned positions, pre-norm blocks, linear head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._common import Workload, build_model, input_generator, randn


class Attention(nn.Module):
    """Multi-head self-attention over all tokens through scaled_dot_product_attention."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        # One fused projection, split into (3, batch, heads, tokens, head_dim).
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class MLP(nn.Module):
    """Linear -> GELU -> Linear."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, dim: int, num_heads: int, mlp_hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLP(dim, mlp_hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """Image -> patch tokens (+ class token, + positions) -> blocks -> norm -> head on the class token."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        dim: int,
        depth: int,
        num_heads: int,
        mlp_hidden: int,
        num_classes: int,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
        num_patches = (image_size // patch_size) ** 2
        # A conv with stride == kernel == patch is the usual patchify-and-project in one op.
        self.patch_embed = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
        # Small random values rather than zeros, so that these parameters are not a special case.
        self.cls_token = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, 1, dim), std=0.02))
        self.pos_embed = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, num_patches + 1, dim), std=0.02))
        self.blocks = nn.Sequential(*(Block(dim, num_heads, mlp_hidden) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def _build(
    device: str | torch.device,
    *,
    image_size: int,
    patch_size: int,
    dim: int,
    depth: int,
    num_heads: int,
    mlp_hidden: int,
    num_classes: int,
    batch: int,
) -> Workload:
    model = build_model(
        lambda: VisionTransformer(image_size, patch_size, dim, depth, num_heads, mlp_hidden, num_classes),
        device,
    )
    x = randn(batch, 3, image_size, image_size, device=device, generator=input_generator())
    return model, (x,)


def vit_b16(device: str | torch.device) -> Workload:
    """ViT-B/16: 224 px, patch 16, dim 768, depth 12, 12 heads, MLP 3072, 1000 classes; batch 64."""
    return _build(
        device,
        image_size=224,
        patch_size=16,
        dim=768,
        depth=12,
        num_heads=12,
        mlp_hidden=3072,
        num_classes=1000,
        batch=64,
    )


def vit_tiny(device: str | torch.device) -> Workload:
    """Tiny ViT: 32 px, patch 8, dim 32, depth 2, 2 heads, MLP 128, 10 classes; batch 4."""
    return _build(
        device,
        image_size=32,
        patch_size=8,
        dim=32,
        depth=2,
        num_heads=2,
        mlp_hidden=128,
        num_classes=10,
        batch=4,
    )
