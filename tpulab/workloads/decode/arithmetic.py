"""The decode model's arithmetic from its configuration: parameters, bytes, FLOPs and --verify's
tolerance, as plain functions (no framework), read by the declaration, the runners and the figures alike."""

from __future__ import annotations

from typing import Any

from tpulab.workloads.decode import gguf_model
from tpulab.workloads.shared.decoder_shapes import head_dim

Params = dict[str, Any]

DTYPES = ("float32", "bfloat16", "float16")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Each dtype's tolerance for --verify: the largest |difference| of the cached logits from a full forward
# pass's, as a fraction of the largest |logit| (float32 allows TF32 or bfloat16-pass matmuls on GPUs, TPUs).
TOLERANCE = {"float32": 5e-3, "bfloat16": 6e-2, "float16": 1e-2}


def block_parameters(p: Params) -> int:
    """One decoder block's weights: attention's four projections, the feed-forward network, two norms."""
    d, m, hd = p["width"], p["mlp_width"], head_dim(p)
    q, kv = p["heads"] * hd, p["kv_heads"] * hd
    attention = d * q + 2 * d * kv + q * d
    if p["block"] == "gpt2":  # biases everywhere, a two-matrix GELU MLP, LayerNorms (scale and shift)
        return attention + q + 2 * kv + d + 2 * d * m + m + d + 2 * 2 * d
    return attention + 3 * d * m + 2 * d  # SwiGLU's gate, up and down matrices; RMSNorms (scale only)


def matmul_parameters(p: Params) -> int:
    """The weights a token is multiplied by: every block, the final norm, and the output projection
    (the token embedding, tied, read as a d x vocab matrix)."""
    final_norm = 2 * p["width"] if p["block"] == "gpt2" else p["width"]
    return p["layers"] * block_parameters(p) + final_norm + p["width"] * p["vocab"]


def parameters(p: Params) -> int:
    """All the model's weights: those above and the learned position table (the token table is tied); a GGUF
    file's, all it holds."""
    if (file := gguf_model.of(p)) is not None:
        return file.parameters
    table = p["context"] * p["width"] if p["positions"] == "learned" else 0
    return matmul_parameters(p) + table


def weight_bytes(p: Params) -> int:
    """The weights' bytes at the run's dtype."""
    return parameters(p) * BYTES[p["dtype"]]


# --weight-format: the weights as a GGUF file holds them: the matrices in that format, the vectors (norms, biases) in
# float32, as llama.cpp reads them. "dtype": --dtype's, counted as the framework decoders hold them, every weight in
# --dtype (in a GGUF file its vectors are float32 still: 0.1% of GPT-2's weights, counted at --dtype).
# q8_0 packs 32 weights as 32 int8 and a float16 scale (34 bytes), q4_0 as 32 4-bit and a float16 scale (18 bytes).
WEIGHT_FORMATS = ("dtype", "f32", "f16", "bf16", "q8_0", "q4_0")
FORMAT_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
QUANT_BLOCK = 32  # a quantized row packs its weights in blocks of this many: a matrix's rows must be a multiple
DTYPE_FORMATS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def weight_format(p: Params) -> str:
    """The weights' format as a GGUF file holds them: --weight-format, or --dtype's where it is "dtype"; the user's
    file's own formats ('q4_0 + q6_k')."""
    if (file := gguf_model.of(p)) is not None:
        return file.formats
    chosen = str(p.get("weight_format", "dtype"))
    return DTYPE_FORMATS[p["dtype"]] if chosen == "dtype" else chosen


def vector_parameters(p: Params) -> int:
    """The weights a token multiplies by that are no matrix: the norms' scales (and shifts) and the biases."""
    d, m, hd = p["width"], p["mlp_width"], head_dim(p)
    if p["block"] == "gpt2":
        per_block = p["heads"] * hd + 2 * p["kv_heads"] * hd + d + m + d + 2 * 2 * d
        return p["layers"] * per_block + 2 * d
    return p["layers"] * 2 * d + d


def matmul_bytes(p: Params) -> float:
    """The bytes of the weights a token is multiplied by, in the format they are read in (`WEIGHT_FORMATS`); a GGUF
    file's as it stores them."""
    if (file := gguf_model.of(p)) is not None:
        return file.token_bytes
    if p.get("weight_format", "dtype") == "dtype":
        return float(matmul_parameters(p) * BYTES[p["dtype"]])
    vectors = vector_parameters(p)
    return (matmul_parameters(p) - vectors) * FORMAT_BYTES[weight_format(p)] + vectors * FORMAT_BYTES["f32"]


CACHE_BLOCK = 64  # a cache sized by its work holds the prompt and the generated tokens, rounded up to this


def cache_len(p: Params) -> int:
    """Positions the KV cache holds: `--kv-cache` where given, else the prompt and the generated tokens rounded up
    to CACHE_BLOCK, no more than the model's positions (a step reads the whole cache, masked: padding the cache to
    the context measured the padding, not the machine)."""
    need = p["prompt_len"] + p["gen_len"]
    return int(p.get("kv_cache") or min(p["context"], -(-need // CACHE_BLOCK) * CACHE_BLOCK))


def kv_cache_bytes(p: Params) -> int:
    """The preallocated cache: keys and values, per layer, [batch, kv_heads, cache_len, head_dim]."""
    return 2 * p["layers"] * p["batch_size"] * p["kv_heads"] * cache_len(p) * head_dim(p) * BYTES[p["dtype"]]


def decode_step_bytes(p: Params) -> float:
    """What one decode step reads: every weight it multiplies by, in its format (and one row of the position
    table), and the whole cache, whose static shape the step reads in full, masked past the current position."""
    return matmul_bytes(p) + kv_cache_bytes(p)


def prefill_flops(p: Params) -> float:
    """The prompt's forward pass over the batch: 2N per token and the attention term, 4 L d T per token
    attending T positions (PaLM, appendix B; causality not halved, as the transformer counts it)."""
    tokens = p["prompt_len"]
    return float(p["batch_size"] * tokens * (2 * matmul_parameters(p) + 4 * p["layers"] * p["width"] * tokens))


def decode_step_flops(p: Params, attended: float | None = None) -> float:
    """One token per sequence, attending `attended` positions (default: the mean over the generation)."""
    if attended is None:
        attended = p["prompt_len"] + p["gen_len"] / 2
    return float(p["batch_size"] * (2 * matmul_parameters(p) + 4 * p["layers"] * p["width"] * attended))


def tolerance(p: Params) -> float:
    """--verify's bound on the largest |difference| of logits, as a fraction of the largest |logit|."""
    return TOLERANCE[p["dtype"]]


# --verify on llama.cpp: a bound on its chosen tokens' log-probabilities against the PyTorch decoder's in float32 (as a
# fraction of the largest |logit|), per weight format: a log-probability bound, not a top-k agreement, because random
# weights give near-flat distributions whose greedy tokens part at near ties (q4_0 parted at up to 24 of 32 tokens,
# each within the bound), while the bound measures the rounding itself. q8_0 rounds each weight to 1/127 of its
# block's largest, q4_0 to 1/8 (16x coarser), and llama.cpp rounds what a quantized matmul reads to 8 bits too:
# on tpulab's decoders (smoke, and 4 layers 256 wide; Llama and GPT-2 blocks; 10 seeds each) q8_0 parted by at most
# 0.023 and q4_0 by 0.21, and f16 and bf16 within float16's and bfloat16's own tolerances: each bound is about twice
# the largest measured. The float formats take their dtype's.
Q8_0_TOLERANCE, Q4_0_TOLERANCE = 0.05, 0.4
FORMAT_TOLERANCE = {"f32": TOLERANCE["float32"], "f16": TOLERANCE["float16"], "bf16": TOLERANCE["bfloat16"],
                    "q8_0": Q8_0_TOLERANCE, "q4_0": Q4_0_TOLERANCE}


def format_tolerance(fmt: str, dtype: str) -> tuple[float, str]:
    """llama.cpp's --verify bound (`FORMAT_TOLERANCE`) for weights in `fmt` and a cache in `dtype`: the looser of the
    two, and whose it is ('q4_0', 'float16 cache')."""
    weights, cache = FORMAT_TOLERANCE[fmt], TOLERANCE[dtype]
    return (weights, fmt) if weights >= cache else (cache, f"{dtype} cache")
