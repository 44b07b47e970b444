"""The decode workload's decoder written in PyTorch: the same model as the shared Keras decoder
(`tpulab.workloads.shared.decoder_keras`), layer for layer and weight for weight, as an `nn.Module`.

Keras on torch runs each layer through Keras's own dispatch (seconds of imports, and a step slower than
the module a PyTorch user writes); this one is what they write. Its `forward` has the Keras decoder's
signature, so the runner's calls over the static cache take either. Weights start as Keras's would:
Glorot-uniform kernels, zero biases, token and position tables uniform in +-0.05, unit norms.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tpulab.workloads.shared.decoder_config import NEG, Config, Write

EMBEDDING_RANGE = 0.05  # Keras's Embedding initialiser: uniform in +-0.05


class Dense(nn.Module):
    """Keras's Dense: `x @ kernel + bias`, the kernel [inputs, outputs]; several layers' kernels side by side
    where `outputs` lists them (one matmul instead of three, each kernel initialised as its own layer's).
    Not `nn.Linear`, whose weight is [outputs, inputs]: on a CPU, a few rows times a transposed weight is the
    slower matmul (8 rows, GPT-2's MLP: 0.61 ms against 0.49 ms), and a decode step is that few rows."""

    def __init__(self, inputs: int, outputs: int | tuple[int, ...], bias: bool) -> None:
        super().__init__()
        parts = outputs if isinstance(outputs, tuple) else (outputs,)  # several layers' kernels side by side
        self.kernel = nn.Parameter(torch.cat([nn.init.xavier_uniform_(torch.empty(inputs, o)) for o in parts], 1))
        self.bias = nn.Parameter(torch.zeros(sum(parts))) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.kernel
        return y if self.bias is None else y + self.bias


def embedding(rows: int, width: int) -> nn.Embedding:
    table = nn.Embedding(rows, width)
    nn.init.uniform_(table.weight, -EMBEDDING_RANGE, EMBEDDING_RANGE)
    return table


def norm(cfg: Config) -> nn.Module:
    """RMSNorm (Llama) or LayerNorm (GPT-2), epsilon 1e-5, as the Keras decoder's."""
    return nn.RMSNorm(cfg.width, eps=1e-5) if cfg.block == "llama" else nn.LayerNorm(cfg.width, eps=1e-5)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary positions, as the Keras decoder's: each pair (i, i + d/2) turned by position x theta^(-2i/d).
    `x`: [batch, tokens, ..., head_dim]; `positions`: [tokens]."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]
    shape = (1, -1) + (1,) * (x.dim() - 3) + (half,)
    cos, sin = angles.cos().reshape(shape), angles.sin().reshape(shape)
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


class TorchAttention(nn.Module):
    """Causal self-attention with grouped-query heads, over a static cache when given one."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        bias, hd = cfg.block == "gpt2", cfg.head_dim
        self.widths = (cfg.heads * hd, cfg.kv_heads * hd, cfg.kv_heads * hd)
        self.qkv = Dense(cfg.width, self.widths, bias)  # the query, key and value layers' kernels side by side
        self.o = Dense(cfg.heads * hd, cfg.width, bias)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor, start: Any = 0,
                past: tuple[torch.Tensor, torch.Tensor] | None = None,
                write: Write | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """`positions`: the tokens' [tokens]; `hidden`: True where a token may not see a key, [tokens, keys]."""
        c = self.cfg
        batch, tokens = x.shape[0], x.shape[1]
        groups, hd = c.heads // c.kv_heads, c.head_dim
        q, k, v = self.qkv(x).split(self.widths, dim=-1)
        q = q.reshape(batch, tokens, c.kv_heads, groups, hd)
        k, v = k.reshape(batch, tokens, c.kv_heads, hd), v.reshape(batch, tokens, c.kv_heads, hd)
        if c.positions == "rope":
            q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_heads, tokens, head_dim]
        if past is not None:
            assert write is not None, "a cache is written by its runner's write"
            k, v = write(past[0], k, start), write(past[1], v, start)
        # each key-value head's query heads as rows of one matmul: [batch, kv_heads, groups x tokens, head_dim]
        q = (q * hd ** -0.5).permute(0, 2, 3, 1, 4).reshape(batch, c.kv_heads, groups * tokens, hd)
        scores = (q @ k.transpose(-1, -2)).float().reshape(batch, c.kv_heads, groups, tokens, -1)
        w = scores.masked_fill(hidden, NEG).softmax(dim=-1).to(v.dtype)
        out = w.reshape(batch, c.kv_heads, groups * tokens, -1) @ v  # [batch, kv_heads, groups x tokens, head_dim]
        out = out.reshape(batch, c.kv_heads, groups, tokens, hd).permute(0, 3, 1, 2, 4)
        return self.o(out.reshape(batch, tokens, c.heads * hd)), (k, v)


class TorchMLP(nn.Module):
    """GELU (GPT-2) or SwiGLU (Llama: down(silu(gate x) * up x))."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.swiglu = cfg.block == "llama"
        self.gate = Dense(cfg.width, cfg.mlp_width, False) if self.swiglu else None
        self.up = Dense(cfg.width, cfg.mlp_width, not self.swiglu)
        self.down = Dense(cfg.mlp_width, cfg.width, not self.swiglu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        return self.down(F.silu(self.gate(x)) * h if self.gate is not None else F.gelu(h))


class TorchBlock(nn.Module):
    """Pre-norm: attention, then the feed-forward network, each added to the residual stream."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.norm1, self.attention, self.norm2, self.mlp = norm(cfg), TorchAttention(cfg), norm(cfg), TorchMLP(cfg)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor, start: Any = 0,
                past: tuple[torch.Tensor, torch.Tensor] | None = None,
                write: Write | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        a, kv = self.attention(self.norm1(h), positions, hidden, start=start, past=past, write=write)
        h = h + a
        return h + self.mlp(self.norm2(h)), kv


class TorchDecoder(nn.Module):
    """Tokens in, float32 logits and each block's (keys, values) out: a full forward pass (no `past`), a
    prefill (`last_only`) or a step over a cache that `write` updates, as the Keras decoder's `call`."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokens = embedding(cfg.vocab, cfg.width)
        self.table = embedding(cfg.context, cfg.width) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(TorchBlock(cfg) for _ in range(cfg.layers))
        self.final = norm(cfg)
        self.head = None if cfg.tied else Dense(cfg.width, cfg.vocab, True)

    def forward(self, tokens: torch.Tensor, start: Any = 0, past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
                last_only: bool = False, write: Write | None = None) -> tuple[torch.Tensor, list[Any]]:
        h = self.tokens(tokens)
        positions = start + torch.arange(tokens.shape[1], device=tokens.device)
        if self.table is not None:
            h = h + self.table(positions)
        # once for every block: the keys are the tokens' own, or the whole cache's
        keys = positions if past is None else torch.arange(past[0][0].shape[2], device=tokens.device)
        hidden = positions[:, None] < keys[None, :]
        kvs = []
        for i, block in enumerate(self.blocks):
            h, kv = block(h, positions, hidden, start=start, past=None if past is None else past[i], write=write)
            kvs.append(kv)
        h = self.final(h[:, -1:] if last_only else h)
        logits = self.head(h) if self.head is not None else h @ self.tokens.weight.T  # tied: the token table
        return logits.float(), kvs

