"""The decoder shapes two workloads build the same model of, framework-free: decode's presets and the model serve's
engine serves (`gguf_writer` writes either's weights), and which of llama.cpp's architectures each block is."""

from __future__ import annotations

from typing import Any, Mapping

# A named shape: every parameter the decoder's weights follow (`gguf_writer.weights`, decode's modules), besides the seed.
SHAPES: dict[str, dict[str, Any]] = {
    "smoke": {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "mlp_width": 128, "vocab": 256, "context": 32,
              "positions": "rope", "block": "llama"},
    "tiny": {"layers": 4, "width": 256, "heads": 4, "kv_heads": 4, "mlp_width": 1024, "vocab": 8192, "context": 256,
             "positions": "learned", "block": "gpt2"},
    "gpt2-small": {"layers": 12, "width": 768, "heads": 12, "kv_heads": 12, "mlp_width": 3072, "vocab": 50257,
                   "context": 1024, "positions": "learned", "block": "gpt2"},
}
ARCHITECTURES = {("gpt2", "learned"): "gpt2", ("llama", "rope"): "llama"}  # (block, positions) -> llama.cpp's


def head_dim(p: Mapping[str, Any]) -> int:
    return int(p["width"] // p["heads"])


def architecture(p: Mapping[str, Any]) -> str | None:
    """llama.cpp's architecture for the block and positions; None where it has none (GPT-2 blocks with rotary
    positions, Llama blocks with a learned table)."""
    return ARCHITECTURES.get((p["block"], p["positions"]))
