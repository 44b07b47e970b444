"""Decoder-only language models in Keras layers (imported in a worker only): the `transformer`'s and
`decode`'s, one implementation in `keras.ops`, so the same blocks run on every Keras backend.

A block's attention, when decoding, takes a KV cache ([batch, kv_heads, context, head_dim], valid
below `start`) and the runner's `write`, its framework's way of writing in place: it writes the
tokens' keys and values into the cache first, then attends over the cache as written, masked past
each token's position, and returns the cache. (Written before it is read, the cache is updated in
place: read first, XLA keeps the old one alive and copies it every token.) Grouped-query attention shares each key/value head among
heads / kv_heads query heads; positions are a learned table (GPT-2) or rotary (RoPE, Llama).
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from tpulab.workloads.shared.decoder_config import NEG, Config, Write


def rope(x: Any, positions: Any, theta: float) -> Any:
    """Rotary positions: each pair (i, i + d/2) of a head's features turned by position x theta^(-2i/d).
    `x`: [batch, tokens, ..., head_dim]; `positions`: [tokens]."""
    half = x.shape[-1] // 2
    freqs = theta ** (-ops.arange(half, dtype="float32") / half)
    angles = ops.cast(positions, "float32")[:, None] * freqs[None, :]  # [tokens, half]
    shape = (1, -1) + (1,) * (len(x.shape) - 3) + (half,)
    cos, sin = ops.reshape(ops.cos(angles), shape), ops.reshape(ops.sin(angles), shape)
    x1, x2 = ops.cast(x[..., :half], "float32"), ops.cast(x[..., half:], "float32")
    turned = ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return ops.cast(turned, x.dtype)


class Attention(keras.layers.Layer):
    """Causal self-attention with grouped-query heads, attending over a KV cache when given one."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(dtype=cfg.dtype, **kwargs)
        self.cfg = cfg
        bias, hd = cfg.block == "gpt2", cfg.head_dim
        self.q = keras.layers.Dense(cfg.heads * hd, use_bias=bias, dtype=cfg.dtype)
        self.k = keras.layers.Dense(cfg.kv_heads * hd, use_bias=bias, dtype=cfg.dtype)
        self.v = keras.layers.Dense(cfg.kv_heads * hd, use_bias=bias, dtype=cfg.dtype)
        self.o = keras.layers.Dense(cfg.width, use_bias=bias, dtype=cfg.dtype)

    def call(self, x: Any, start: Any = 0, past: tuple[Any, Any] | None = None,
             write: Write | None = None) -> tuple[Any, tuple[Any, Any]]:
        """`x`: [batch, tokens, width] at positions start, start + 1...; `past`: the cache's (keys, values),
        which `write` updates. Returns the output and the (keys, values): the cache as written, or
        without a cache the tokens' own, [batch, kv_heads, tokens, head_dim]."""
        c = self.cfg
        tokens = x.shape[1]
        groups, hd = c.heads // c.kv_heads, c.head_dim
        positions = start + ops.arange(tokens, dtype="int32")
        q = ops.reshape(self.q(x), (-1, tokens, c.kv_heads, groups, hd))
        k = ops.reshape(self.k(x), (-1, tokens, c.kv_heads, hd))
        v = ops.reshape(self.v(x), (-1, tokens, c.kv_heads, hd))
        if c.positions == "rope":
            q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        k, v = ops.transpose(k, (0, 2, 1, 3)), ops.transpose(v, (0, 2, 1, 3))
        q = q * ops.cast(hd ** -0.5, q.dtype)
        keys = positions
        if past is not None:
            assert write is not None, "a cache is written by its runner's write"
            k, v = write(past[0], k, start), write(past[1], v, start)
            keys = ops.arange(k.shape[2], dtype="int32")  # every position the cache holds
        scores = ops.einsum("btkgh,bksh->bkgts", q, k)  # [batch, kv_heads, groups, tokens, keys]
        s = ops.where(positions[:, None] >= keys[None, :], ops.cast(scores, "float32"), NEG)
        w = ops.cast(ops.softmax(s, axis=-1), v.dtype)
        out = ops.einsum("bkgts,bksh->btkgh", w, v)
        return self.o(ops.reshape(out, (-1, tokens, c.heads * hd))), (k, v)


class MLP(keras.layers.Layer):
    """The feed-forward network: GELU (GPT-2) or SwiGLU (Llama: down(silu(gate x) * up x))."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(dtype=cfg.dtype, **kwargs)
        self.swiglu = cfg.block == "llama"
        if self.swiglu:
            self.gate = keras.layers.Dense(cfg.mlp_width, activation="silu", use_bias=False, dtype=cfg.dtype)
        self.up = keras.layers.Dense(cfg.mlp_width, activation=None if self.swiglu else "gelu",
                                     use_bias=not self.swiglu, dtype=cfg.dtype)
        self.down = keras.layers.Dense(cfg.width, use_bias=not self.swiglu, dtype=cfg.dtype)

    def call(self, x: Any) -> Any:
        h = self.up(x)
        return self.down(self.gate(x) * h if self.swiglu else h)


def norm(cfg: Config) -> keras.layers.Layer:
    if cfg.block == "llama":
        return keras.layers.RMSNormalization(epsilon=1e-5, dtype=cfg.dtype)
    return keras.layers.LayerNormalization(epsilon=1e-5, dtype=cfg.dtype)


class Block(keras.layers.Layer):
    """Pre-norm: attention, then the feed-forward network, each added to the residual stream."""

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(dtype=cfg.dtype, **kwargs)
        self.norm1, self.attention, self.norm2, self.mlp = norm(cfg), Attention(cfg), norm(cfg), MLP(cfg)

    def call(self, h: Any, start: Any = 0, past: tuple[Any, Any] | None = None,
             write: Write | None = None) -> tuple[Any, tuple[Any, Any]]:
        a, kv = self.attention(self.norm1(h), start=start, past=past, write=write)
        h = h + a
        return h + self.mlp(self.norm2(h)), kv


class Decoder(keras.layers.Layer):
    """Tokens in, float32 logits and each block's new (keys, values) out.

    `call(tokens, start, past, last_only, write)`: a full forward pass (no `past`), a prefill
    (`last_only`: the logits of the last position only, the next token's), or a decode step over a
    cache that `write` updates (each block's (keys, values) out is then its cache as written).
    """

    def __init__(self, cfg: Config, **kwargs: Any) -> None:
        super().__init__(dtype=cfg.dtype, **kwargs)
        self.cfg = cfg
        self.tokens = keras.layers.Embedding(cfg.vocab, cfg.width, dtype=cfg.dtype)
        self.table = keras.layers.Embedding(cfg.context, cfg.width, dtype=cfg.dtype) \
            if cfg.positions == "learned" else None
        self.blocks = [Block(cfg) for _ in range(cfg.layers)]
        self.final = norm(cfg)
        self.head = None if cfg.tied else keras.layers.Dense(cfg.vocab, dtype=cfg.dtype)

    def call(self, tokens: Any, start: Any = 0, past: list[tuple[Any, Any]] | None = None,
             last_only: bool = False, write: Write | None = None) -> tuple[Any, list[tuple[Any, Any]]]:
        h = self.tokens(tokens)
        if self.table is not None:
            h = h + self.table(start + ops.arange(tokens.shape[1], dtype="int32"))
        kvs = []
        for i, block in enumerate(self.blocks):
            h, kv = block(h, start=start, past=None if past is None else past[i], write=write)
            kvs.append(kv)
        h = self.final(h[:, -1:] if last_only else h)
        if self.head is not None:
            logits = self.head(h)
        else:  # h times the token table, transposed (einsum: no transposed copy of the table is made)
            logits = ops.einsum("btd,vd->btv", h, ops.cast(self.tokens.embeddings, h.dtype))
        return ops.cast(logits, "float32"), kvs


def decoder(layers: int, width: int, heads: int, seq_len: int, vocab: int) -> keras.Model:
    """The transformer workload's model: GPT-2's blocks (4x-wide GELU MLP), untied logits with a bias."""
    cfg = Config(layers, width, heads, heads, 4 * width, vocab, seq_len, tied=False)
    tokens = keras.Input((seq_len,), dtype="int32")
    logits, _ = Decoder(cfg)(tokens)
    return keras.Model(tokens, logits, name="decoder")
