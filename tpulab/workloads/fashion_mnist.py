"""The seed's second experiment: its 5-layer CNN trained on Fashion-MNIST (declaration only)."""

from __future__ import annotations

from ..data import DataError, find
from .base import Limits, ParamError, Params, ParamSpec, Workload, check_shards

# (kind, output height/width, output channels, kernel size, input channels) of each layer with weights
LAYERS = [("conv", 28, 64, 5, 1), ("conv", 14, 128, 5, 64), ("conv", 7, 256, 5, 128),
          ("dense", 1, 256, 1, 3 * 3 * 256), ("dense", 1, 10, 1, 256)]


def forward_flops_per_example() -> int:
    """Multiply-adds of the convolutions and dense layers (normalisation, pooling and activations are
    a rounding error), times two."""
    return sum(2 * size * size * out * k * k * cin for _, size, out, k, cin in LAYERS)


def flops(p: Params) -> float:
    # Training costs about three forward passes: forward, then gradients for inputs and weights.
    return 3 * forward_flops_per_example() * p["batch_size"]


PARAMS = (
    ParamSpec("batch_size", int, 1024, "examples per training step, split evenly across the shards (global batch)",
              1, 65536, unit="examples", term="batch"),
    ParamSpec("epochs", int, 5, "passes of steps-per-epoch steps, each followed by validation", 1, 1000,
              term="epoch"),
    ParamSpec("steps_per_epoch", int, 100, "training steps per epoch", 1, 100000),
    ParamSpec("learning_rate", float, 1e-3, "Adam's step size", 1e-6, 1.0, term="learning rate"),
    ParamSpec("shards", int, 1, "replicas the batch is split over (1 = no sharding)", 1, 64, term="shard"),
    ParamSpec("precision", str, "float32", "float32, or mixed: bfloat16/float16 compute with float32 weights",
              choices=("float32", "mixed_bfloat16", "mixed_float16"), term="precision"),
    ParamSpec("xla", bool, False, "compile the training step with XLA (jit_compile)", term="XLA"),
    ParamSpec("pipeline", str, "tf.data", "tf.data: shuffled, batched, prefetched; generator: the article's "
              "Python generator of random slices", choices=("tf.data", "generator"), term="input pipeline"),
    ParamSpec("validation", bool, True, "evaluate on the test set after each epoch", term="validation"),
    ParamSpec("validation_examples", int, 10000, "test examples used for validation", 1, 10000,
              unit="examples"),
    ParamSpec("steps_per_execution", int, 1, "steps run per call into the device (helps TPUs; timings stay "
              "per step)", 1, 1000, term="steps per execution"),
    ParamSpec("dataset", str, "fashion-mnist", "fashion-mnist: the real data from local files; synthetic: "
              "random data of the same shapes (timing only)", choices=("fashion-mnist", "synthetic")),
    ParamSpec("device", str, "auto", "where to run: auto picks TPU, then GPU, then CPU",
              choices=("auto", "cpu", "gpu", "tpu")),
    ParamSpec("seed", int, 0, "seed of weights, shuffling and dropout", 0, 2**31 - 1, advanced=True),
    ParamSpec("data_dir", str, "", "folder with the four Fashion-MNIST .gz files (default: search)",
              advanced=True),
    ParamSpec("download", bool, False, "let Keras download Fashion-MNIST if no local copy is found",
              advanced=True),
)


def check(p: Params, limits: Limits) -> None:
    check_shards(p, limits)
    if p["steps_per_execution"] > p["steps_per_epoch"]:
        raise ParamError("steps_per_execution", f"--steps-per-execution must be an integer from 1 to "
                         f"--steps-per-epoch {p['steps_per_epoch']} (got {p['steps_per_execution']})")
    if p["dataset"] == "fashion-mnist" and not p["download"]:
        try:
            find(p["data_dir"] or None)
        except DataError as e:
            raise ParamError("data_dir", str(e)) from None


COMPUTE_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}


FASHION_MNIST = Workload(
    name="fashion-mnist",
    title="Fashion-MNIST CNN",
    summary="The article's second test: a 5-layer CNN (1.6M weights) trained on Fashion-MNIST, "
            "timed per step, with loss and accuracy as it learns.",
    params=PARAMS,
    runner="tpulab.workloads.fashion_mnist_tf",
    flops_per_step=flops,
    check=check,
    total_steps=lambda p: p["epochs"] * p["steps_per_epoch"],
    compute_dtype=lambda p: COMPUTE_DTYPES[p["precision"]],
    presets={
        "smoke": {"batch_size": 64, "epochs": 2, "steps_per_epoch": 8, "validation_examples": 512},
        "article": {},
    },
)
