"""A decoder-only language model from Keras layers, trained on synthetic tokens: tokens/s and MFU.

Declaration only. Its FLOPs are the model's by the standard formula (6 x parameters x tokens, plus
the attention term), so their fraction of the peak is its MFU; `predict` over whole sequences is
the prefill (the forward pass that reads a prompt), in tokens/s. Token-by-token decoding is not
timed here.
"""

from __future__ import annotations

from typing import Any

from tpulab.base.charts import GFLOPS, METRICS, STEP_TIME, THROUGHPUT
from tpulab.workloads.base import Limits, Metric, ParamError, Params, ParamSpec, batch_size
from tpulab.workloads.data import Dataset
from tpulab.workloads.keras import KerasWorkload
from tpulab.workloads.keras_params import EPOCHS, HOW_IT_RUNS, PREDICT_STEPS, STEPS_PER_EPOCH

PARAMS = (
    batch_size(8, 4096, unit="sequences", what="sequences per training step"),
    ParamSpec("layers", int, 12, "decoder blocks (attention, then a feed-forward network)", 1, 128),
    ParamSpec("width", int, 768, "model width (d_model); the feed-forward layer is 4x wider", 8, 16384),
    ParamSpec("heads", int, 12, "attention heads; must divide the width", 1, 256),
    ParamSpec("seq_len", int, 1024, "tokens per sequence (the context)", 2, 65536, unit="tokens"),
    ParamSpec("vocab", int, 50257, "vocabulary size (GPT-2's is 50257)", 2, 1_000_000, unit="tokens"),
    EPOCHS,
    STEPS_PER_EPOCH,
    PREDICT_STEPS,
    ParamSpec("learning_rate", float, 3e-4, "AdamW's step size", 1e-6, 1.0, term="learning rate"),
    *HOW_IT_RUNS,
)
SYNTHETIC_BATCHES = 4  # distinct batches of random tokens: enough that no step sees the previous one's


def matmul_parameters(p: Params) -> int:
    """Parameters the model multiplies by: every weight but the two embedding tables (a lookup is no
    FLOP); the output projection to the vocabulary counts."""
    d, v = p["width"], p["vocab"]
    block = 12 * d * d + 13 * d  # attention's 4 projections (4d^2 + 4d), the MLP (8d^2 + 5d), 2 LayerNorms (4d)
    return p["layers"] * block + 2 * d + d * v + v  # the final LayerNorm, the output projection


def parameters(p: Params) -> int:
    """All the model's weights: those above and the token and position embeddings."""
    return matmul_parameters(p) + (p["vocab"] + p["seq_len"]) * p["width"]


def flops_per_token(p: Params, training: bool = True) -> float:
    """6N + 12 L d T when training (forward and backward), 2N + 4 L d T for a forward pass (PaLM, appendix B)."""
    passes = 3 if training else 1
    return passes * (2 * matmul_parameters(p) + 4 * p["layers"] * p["width"] * p["seq_len"])


class Transformer(KerasWorkload):
    name = "transformer"
    title = "Transformer (decoder-only LM)"
    summary = ("A GPT-style language model from Keras layers, trained on synthetic tokens: tokens/s and MFU "
               "(model FLOPs utilisation), then prefill (a forward pass over whole sequences).")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 4, "layers": 2, "width": 64, "heads": 2, "seq_len": 32, "vocab": 256,
                  "epochs": 1, "steps_per_epoch": 4, "predict_steps": 3},
        "tiny": {"batch_size": 16, "layers": 4, "width": 256, "heads": 4, "seq_len": 256, "vocab": 8192,
                 "steps_per_epoch": 20},
        "gpt2-small": {},
    }
    unit = "step"
    throughput_unit = "tokens/s"
    sizes = ("layers", "width", "heads", "seq_len", "vocab")
    synthetic_data = "random tokens"
    model_flops = True
    metrics = (Metric("loss", "loss", higher_is_better=False, headline=True),)
    charts = (STEP_TIME, THROUGHPUT, GFLOPS, METRICS)

    def items_per_example(self, p: Params) -> int:
        return int(p["seq_len"])

    def flops_per_step(self, p: Params) -> float:
        return float(flops_per_token(p) * p["seq_len"] * p["batch_size"])

    def describe_data(self, p: Params) -> str:
        return "synthetic"

    def check(self, p: Params, limits: Limits) -> None:
        super().check(p, limits)
        if p["width"] % p["heads"]:
            raise ParamError("heads", f"--heads must divide --width {p['width']} (got {p['heads']})")

    def build_model(self, p: Params) -> Any:
        from tpulab.workloads.shared.decoder_keras import decoder

        return decoder(p["layers"], p["width"], p["heads"], p["seq_len"], p["vocab"])

    def compile_model(self, model: Any, p: Params, jit_compile: bool | str) -> None:
        import keras

        model.compile(optimizer=keras.optimizers.AdamW(learning_rate=p["learning_rate"]),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit_compile, steps_per_execution=p["steps_per_execution"])

    def data(self, p: Params) -> Dataset:
        """Random token sequences; each target is the next token (a real LM's task, on noise)."""
        import numpy as np

        rng = np.random.default_rng(p["seed"])
        n = SYNTHETIC_BATCHES * p["batch_size"]
        tokens = rng.integers(0, p["vocab"], size=(n, p["seq_len"] + 1), dtype=np.int32)
        x, y = tokens[:, :-1], tokens[:, 1:]
        return Dataset(x, y, x[:0], y[:0], "synthetic")


TRANSFORMER = Transformer()
