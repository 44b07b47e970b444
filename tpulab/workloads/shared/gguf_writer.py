"""The decoder as a GGUF file, for llama.cpp (decode's runner, and serve's engine): the same decoder, its random weights
drawn from the seed with numpy, written with the `gguf` package and cached in tpulab's home by shape, seed and format.

The weights are named as decode's PyTorch module names them (`torch_model.TorchDecoder.state_dict()`) and drawn as
it initialises them (Glorot-uniform kernels, zero biases, token and position tables uniform in +-0.05, unit norms),
so decode's `--verify` loads the same arrays into it and sets its greedy tokens against llama.cpp's. A GPT-2 block is
llama.cpp's `gpt2` architecture (its query, key and value kernels one `attn_qkv` matrix, as the module holds them),
a Llama block with rotary positions its `llama`: llama.cpp turns adjacent pairs of a head's dimensions where the
module turns each dimension with the one half a head on (`rope`), so the query and key rows are interleaved as
llama.cpp's own converter interleaves a Hugging Face checkpoint's; the scores are the same.

The vocabulary is llama.cpp's RWKV type, token i spelt `<i>`: the one type with no special token. Each other type
makes one token the end of text, which would end a greedy generation early, or, with the server's `ignore_eos`,
never be chosen.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import gguf
import numpy as np

from tpulab.base.home import home
from tpulab.workloads.shared.decoder_shapes import architecture, head_dim

Params = Mapping[str, Any]  # the decoder's shape (`decoder_shapes.SHAPES`) and its seed

EMBEDDING_RANGE = 0.05  # as the module's tables start (Keras's Embedding initialiser)
EPS = 1e-5  # the norms' epsilon, as the module's
TYPES = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
         "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
         "q4_0": gguf.GGMLQuantizationType.Q4_0}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
              "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}
LAYOUT = 1  # in a kept file's name: raised where this module writes a file differently, so no old one is read


def weights(p: Params) -> dict[str, np.ndarray]:
    """The model's float32 weights from the seed, by the PyTorch module's names and shapes (a kernel [inputs,
    outputs], as `x @ kernel`)."""
    rng = np.random.default_rng(p["seed"])
    d, m, hd, gpt2 = p["width"], p["mlp_width"], head_dim(p), p["block"] == "gpt2"
    q, kv = p["heads"] * hd, p["kv_heads"] * hd

    def uniform(shape: tuple[int, ...], bound: float) -> np.ndarray:
        return (rng.random(shape, dtype=np.float32) * np.float32(2 * bound) - np.float32(bound)).astype(np.float32)

    def glorot(inputs: int, *outputs: int) -> np.ndarray:  # several layers' kernels side by side, each its own
        return np.concatenate([uniform((inputs, o), (6 / (inputs + o)) ** 0.5) for o in outputs], axis=1)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        scale = {f"{prefix}.weight": np.ones(d, np.float32)}
        return {**scale, f"{prefix}.bias": np.zeros(d, np.float32)} if gpt2 else scale

    def dense(prefix: str, inputs: int, *outputs: int, bias: bool = gpt2) -> dict[str, np.ndarray]:
        kernel = {f"{prefix}.kernel": glorot(inputs, *outputs)}
        return {**kernel, f"{prefix}.bias": np.zeros(sum(outputs), np.float32)} if bias else kernel

    out = {"tokens.weight": uniform((p["vocab"], d), EMBEDDING_RANGE)}
    if p["positions"] == "learned":
        out["table.weight"] = uniform((p["context"], d), EMBEDDING_RANGE)
    for i in range(p["layers"]):
        b = f"blocks.{i}."
        out |= norm(b + "norm1") | dense(b + "attention.qkv", d, q, kv, kv) | dense(b + "attention.o", q, d)
        out |= norm(b + "norm2")
        if not gpt2:
            out |= dense(b + "mlp.gate", d, m, bias=False)
        out |= dense(b + "mlp.up", d, m) | dense(b + "mlp.down", m, d)
    return out | norm("final")


def interleaved(rows: np.ndarray, heads: int) -> np.ndarray:
    """A query or key matrix [heads x head_dim, inputs] with each head's rows i and i + head_dim/2 made adjacent
    (rows 2i and 2i+1): llama.cpp's rotary pairs, where the module's are a half apart."""
    return rows.reshape(heads, 2, rows.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(rows.shape)


def tensors(p: Params, w: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`weights` by llama.cpp's tensor names, a matrix [outputs, inputs] (the transposed kernel)."""
    hd = head_dim(p)
    q, kv = p["heads"] * hd, p["kv_heads"] * hd
    out = {"token_embd.weight": w["tokens.weight"]}  # tied: llama.cpp's output is the token table, as the module's
    if "table.weight" in w:
        out["position_embd.weight"] = w["table.weight"]
    names = {"norm1": "attn_norm", "norm2": "ffn_norm", "attention.o": "attn_output", "mlp.gate": "ffn_gate",
             "mlp.up": "ffn_up", "mlp.down": "ffn_down", "attention.qkv": "attn_qkv"}
    for i in range(p["layers"]):
        for ours, theirs in names.items():
            for part in ("weight", "bias", "kernel"):
                key = f"blocks.{i}.{ours}.{part}"
                if key in w:
                    out[f"blk.{i}.{theirs}.{'bias' if part == 'bias' else 'weight'}"] = \
                        w[key].T if part == "kernel" else w[key]
        if p["block"] == "llama":  # separate query, key and value matrices, the rotary pairs interleaved
            qkv = out.pop(f"blk.{i}.attn_qkv.weight")
            out[f"blk.{i}.attn_q.weight"] = interleaved(qkv[:q], p["heads"])
            out[f"blk.{i}.attn_k.weight"] = interleaved(qkv[q:q + kv], p["kv_heads"])
            out[f"blk.{i}.attn_v.weight"] = qkv[q + kv:]
    out["output_norm.weight"] = w["final.weight"]
    if "final.bias" in w:
        out["output_norm.bias"] = w["final.bias"]
    return out


def write(p: Params, fmt: str, path: Path) -> None:
    """The model as a GGUF file at `path`: its matrices in `fmt`, its vectors (norms, biases) in float32."""
    arch = architecture(p)
    assert arch is not None, "the runner refuses a model llama.cpp has no architecture for"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(p["layers"])
    writer.add_context_length(p["context"])
    writer.add_embedding_length(p["width"])
    writer.add_feed_forward_length(p["mlp_width"])
    writer.add_head_count(p["heads"])
    writer.add_head_count_kv(p["kv_heads"])
    if arch == "gpt2":
        writer.add_layer_norm_eps(EPS)
    else:
        writer.add_layer_norm_rms_eps(EPS)
        writer.add_rope_freq_base(500_000.0)  # the module's theta (`decoder_config.Config.rope_theta`)
        writer.add_rope_dimension_count(head_dim(p))
    writer.add_file_type(FILE_TYPES[fmt])
    writer.add_tokenizer_model("rwkv")
    writer.add_token_list([f"<{i}>" for i in range(p["vocab"])])
    writer.add_token_types([gguf.TokenType.NORMAL] * p["vocab"])
    for name, array in tensors(p, weights(p)).items():
        kind = TYPES[fmt] if array.ndim == 2 else gguf.GGMLQuantizationType.F32
        writer.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(array, np.float32), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def cached(p: Params, fmt: str) -> tuple[Path, bool]:
    """The model's GGUF file in tpulab's home (written first where none is kept for this shape, seed and format),
    and whether it was written now. Written beside and renamed, so that two runs never read half a file."""
    shape = "-".join(f"{k}{p[k]}" for k in ("layers", "width", "heads", "kv_heads", "mlp_width", "vocab", "context"))
    path = home() / "gguf" / f"{p['block']}-{p['positions']}-{shape}-seed{p['seed']}-{fmt}-v{LAYOUT}.gguf"
    if path.exists():
        return path, False
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    try:
        write(p, fmt, partial)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path, True
