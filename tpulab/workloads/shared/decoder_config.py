"""A decoder's shape and kind, framework-free: what the Keras decoder (`decoder_keras`) and decode's PyTorch
module (`tpulab.workloads.decode.torch_model`) are both built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

NEG = -1e9  # a masked score: exp() of it is 0 in float32
Write = Callable[[Any, Any, Any], Any]  # (cache, the tokens' keys or values, their first position) -> the cache


@dataclass(frozen=True)
class Config:
    """A decoder's shape and kind. `block`: gpt2 (LayerNorm, biases, GELU MLP) or llama (RMSNorm, no
    biases, SwiGLU MLP). `tied`: the logits reuse the token embedding (else a Dense head with a bias).
    `dtype`: the layers' dtype policy (None: the global one, as mixed precision sets it)."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    mlp_width: int
    vocab: int
    context: int
    positions: str = "learned"  # or "rope"
    block: str = "gpt2"  # or "llama"
    tied: bool = True
    rope_theta: float = 500_000.0
    dtype: str | None = None

    @classmethod
    def of(cls, p: Mapping[str, Any]) -> Config:
        """The `decode` workload's model, from its parameters (its logits tied to the token table)."""
        return cls(p["layers"], p["width"], p["heads"], p["kv_heads"], p["mlp_width"], p["vocab"], p["context"],
                   p["positions"], p["block"], dtype=p["dtype"])

    @property
    def head_dim(self) -> int:
        return self.width // self.heads
