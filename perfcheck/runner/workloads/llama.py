"""LLaMA-style decoder: RMSNorm, rotary position embeddings, causal SDPA attention, SwiGLU MLP."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._common import Workload, build_model, input_generator


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of the decoder; the defaults besides the required sizes are LLaMA's."""

    dim: int
    n_layers: int
    n_heads: int
    ffn_hidden: int
    vocab_size: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, without mean subtraction or bias."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The reduction runs in float32: in bf16/fp16 the mean of squares loses too much precision.
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape (max_seq_len, head_dim) for the rotate-half form of RoPE."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
    # Both halves carry the same angles, matching rotate_half's pairing of dim i with dim i + head_dim/2.
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) by per-position angles; real arithmetic, no complex tensors."""
    # Complex-number RoPE (view_as_complex) is avoided because complex dtypes are poorly supported by
    # the compile and export stacks; the rotate-half form computes the same rotation with real ops.
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    """Causal multi-head attention with RoPE applied to queries and keys."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        # Under autocast q is bf16/fp16 while the tables stay float32; match q so SDPA sees one dtype.
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: h = x + attn(norm(x)); out = h + ffn(norm(h))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg.dim, cfg.ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """Token ids (batch, seq) -> logits (batch, seq, vocab)."""

    # Buffers, registered in __init__; declared so they type as tensors, not `Tensor | Module`.
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        if cfg.dim % cfg.n_heads or cfg.head_dim % 2:
            raise ValueError(f"dim {cfg.dim} must split into {cfg.n_heads} heads of even size")
        self.max_seq_len = cfg.max_seq_len
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # Non-persistent: derived from the config, so they stay out of state_dict and checkpoints.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq_len = tokens.shape[1]
        if seq_len > self.max_seq_len:
            raise ValueError(f"sequence length {seq_len} exceeds max_seq_len {self.max_seq_len}")
        cos, sin = self.rope_cos[:seq_len], self.rope_sin[:seq_len]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def _build(
    device: str | torch.device, cfg: LlamaConfig, batch: int, seq_len: int, dtype: torch.dtype
) -> Workload:
    model = build_model(lambda: Llama(cfg), device, dtype=dtype)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq_len), generator=input_generator()).to(device)
    return model, (tokens,)


def llama_7b_layers(device: str | torch.device, *, dtype: torch.dtype = torch.float32) -> Workload:
    """Two LLaMA-7B-shaped layers (dim 4096, 32 heads, FFN 11008, vocab 32000); token ids 4 x 512.

    float32 by default: perfcheck applies autocast itself when a workload asks for bf16/fp16.
    """
    cfg = LlamaConfig(dim=4096, n_layers=2, n_heads=32, ffn_hidden=11008, vocab_size=32000, max_seq_len=2048)
    return _build(device, cfg, batch=4, seq_len=512, dtype=dtype)


def llama_tiny(device: str | torch.device, *, dtype: torch.dtype = torch.float32) -> Workload:
    """Tiny decoder: dim 64, 4 heads, FFN 172, vocab 256, 2 layers; token ids 2 x 16."""
    cfg = LlamaConfig(dim=64, n_layers=2, n_heads=4, ffn_hidden=172, vocab_size=256, max_seq_len=64)
    return _build(device, cfg, batch=2, seq_len=16, dtype=dtype)
