"""What a GGUF file and llama.cpp can hold of the decode model, framework-free: checked when a run is resolved,
before a worker starts (`RunnerAt.checks`), and read by the writer (`tpulab.workloads.shared.gguf_writer`)."""

from __future__ import annotations

from tpulab.workloads.base import ParamError
from tpulab.workloads.decode import gguf_model
from tpulab.workloads.decode.arithmetic import QUANT_BLOCK, Params, head_dim, weight_format
from tpulab.workloads.shared.decoder_shapes import architecture


def unpackable(p: Params, fmt: str) -> str | None:
    """Why `fmt` cannot hold this model's matrices (a quantized row is whole blocks of 32), or None."""
    if fmt not in ("q8_0", "q4_0"):
        return None
    widths = {"--width": p["width"], "--mlp-width": p["mlp_width"], "--heads x head width": p["heads"] * head_dim(p)}
    odd = [f"{flag} {value}" for flag, value in widths.items() if value % QUANT_BLOCK]
    return f"{fmt} packs each row in blocks of {QUANT_BLOCK} weights: got {', '.join(odd)}" if odd else None


def check(p: Params) -> None:
    """A model llama.cpp has no architecture for, or a format that cannot pack its rows, or --verify on a file of the
    user's (it sets llama.cpp against tpulab's decoder on the weights tpulab writes): one line, exit 2."""
    if p["verify"] and gguf_model.source(p) is not None:
        raise ParamError("verify", f"--verify sets llama.cpp's tokens against tpulab's decoder on the weights tpulab "
                         f"writes, not on --model {p['model']}'s: leave out --verify, or --model")
    if architecture(p) is None:
        raise ParamError("block", f"llama.cpp has no architecture for --block {p['block']} with --positions "
                         f"{p['positions']}: use --block gpt2 --positions learned (GPT-2) or --block llama "
                         "--positions rope (Llama)")
    fmt = weight_format(p)
    if (why := unpackable(p, fmt)) is not None:
        raise ParamError("weight_format", f"--weight-format {fmt}: {why}")
