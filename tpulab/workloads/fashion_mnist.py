"""The seed's second experiment: its 5-layer CNN trained on Fashion-MNIST (declaration only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from tpulab.workloads.data import DataError, find
from tpulab.workloads.base import (BACKEND, DEVICE, PROCESSES, CancelToken, Chart, Limits, Metric, ParamError, Params,
                                  ParamSpec, Sink, Workload,
                                  check_shards)

if TYPE_CHECKING:
    from tpulab.backends import Placement
    from tpulab.workloads.data import Dataset

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
              1, 60000, unit="examples", term="batch"),  # at most the training set
    ParamSpec("epochs", int, 5, "passes of steps-per-epoch steps, each followed by validation", 1, 1000,
              term="epoch"),
    ParamSpec("steps_per_epoch", int, 100, "training steps per epoch", 1, 100000),
    ParamSpec("learning_rate", float, 1e-3, "Adam's step size", 1e-6, 1.0, term="learning rate"),
    ParamSpec("shards", int, 1, "replicas the batch is split over (1 = no sharding)", 1, 64, term="shard"),
    ParamSpec("precision", str, "float32", "float32, or mixed: bfloat16/float16 compute with float32 weights",
              choices=("float32", "mixed_bfloat16", "mixed_float16"), term="precision"),
    ParamSpec("xla", bool, False, "compile the training step with XLA (jit_compile)", term="XLA",
              backends=("tensorflow",), why_not="JAX always compiles with XLA"),
    ParamSpec("pipeline", str, "tf.data", "tf.data: shuffled, batched, prefetched (on JAX the same from numpy, "
              "without TensorFlow); generator: the article's Python generator of random slices",
              choices=("tf.data", "generator"), term="input pipeline"),
    ParamSpec("validation", bool, True, "evaluate on the test set after each epoch", term="validation"),
    ParamSpec("validation_examples", int, 10000, "test examples used for validation", 1, 10000,
              unit="examples"),
    ParamSpec("steps_per_execution", int, 1, "steps run per call into the device (helps TPUs; timings stay "
              "per step)", 1, 1000, term="steps per execution"),
    ParamSpec("dataset", str, "fashion-mnist", "fashion-mnist: the real data from local files; synthetic: "
              "random data of the same shapes (timing only)", choices=("fashion-mnist", "synthetic"),
              tunes=False),
    DEVICE,
    BACKEND,
    PROCESSES,
    ParamSpec("seed", int, 0, "seed of weights, shuffling and dropout", 0, 2**31 - 1, advanced=True,
              tunes=False),
    ParamSpec("data_dir", str, "", "folder with the four Fashion-MNIST .gz files (default: search)",
              advanced=True, tunes=False),
    ParamSpec("download", bool, False, "let Keras download Fashion-MNIST if no local copy is found",
              advanced=True, tunes=False),
)


def build_model() -> Any:
    """Layer for layer the article's model (1,619,470 parameters), in Keras 3: any backend builds it."""
    import keras

    layers: list[Any] = [keras.Input((28, 28, 1))]
    for filters in (64, 128, 256):
        layers += [keras.layers.BatchNormalization(),
                   keras.layers.Conv2D(filters, (5, 5), padding="same", activation="elu"),
                   keras.layers.MaxPooling2D(pool_size=(2, 2), strides=(2, 2)),
                   keras.layers.Dropout(0.25)]
    layers += [keras.layers.Flatten(), keras.layers.Dense(256), keras.layers.Activation("elu"),
               keras.layers.Dropout(0.5), keras.layers.Dense(10),
               keras.layers.Activation("softmax", dtype="float32")]  # float32 output under mixed precision
    return keras.Sequential(layers)


def compile_model(model: Any, p: Params, jit_compile: bool | str) -> None:
    """The article's optimiser, loss and metric; `jit_compile` is the backend's to decide."""
    import keras

    model.compile(optimizer=keras.optimizers.Adam(learning_rate=p["learning_rate"]),
                  loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"],
                  jit_compile=jit_compile, steps_per_execution=p["steps_per_execution"])


def train(p: Params, sink: Sink, cancel: CancelToken, placement: Placement, versions: dict[str, str],
          backend: str, training_input: Callable[[Dataset, Params], Any],
          validation_input: Callable[[Dataset, Params], Any], jit_compile: bool | str,
          adopt: Callable[[Any], Any] | None = None) -> None:
    """The article's training run on any backend: each backend brings its placement, inputs and compiler."""
    import keras

    from tpulab.callbacks import StepTimer
    from tpulab.workloads.data import load
    from tpulab.core.events import from_dicts

    if p["precision"] != "float32":
        keras.mixed_precision.set_global_policy(p["precision"])
    keras.utils.set_random_seed(p["seed"])
    data = load(p["dataset"], p["data_dir"] or None, p["download"])
    sink(FASHION_MNIST.started(p, placement, versions, backend, data.source, data.synthetic))
    if adopt is not None:
        model = adopt(build_model())
    else:
        with placement.scope():
            model = build_model()
    with placement.scope():
        compile_model(model, p, jit_compile)
    # Every event of a run on synthetic data says so, so no figure travels without the warning.
    timer = StepTimer(from_dicts(sink, data.synthetic), batch_size=p["batch_size"], cancel=cancel)
    model.fit(training_input(data, p), epochs=p["epochs"], steps_per_epoch=p["steps_per_epoch"],
              validation_data=validation_input(data, p) if p["validation"] else None,
              callbacks=[timer], verbose=0, shuffle=False)


def check(p: Params, limits: Limits) -> None:
    check_shards(p, limits)
    if p["validation"] and p["validation_examples"] < p["shards"]:
        raise ParamError("validation_examples", f"--validation-examples must be at least --shards {p['shards']}: "
                         f"each replica validates its share (got {p['validation_examples']})")
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
    runners={"tensorflow": "tpulab.workloads.fashion_mnist_tf", "jax": "tpulab.workloads.fashion_mnist_jax"},
    flops_per_step=flops,
    check=check,
    total_steps=lambda p: p["epochs"] * p["steps_per_epoch"],
    compute_dtype=lambda p: COMPUTE_DTYPES[p["precision"]],
    # A sweep point: one epoch of `steps` steps without validation (throughput is the objective; loss is kept).
    shorten=lambda p, steps: {**p, "epochs": 1, "steps_per_epoch": steps, "validation": False,
                              "steps_per_execution": min(p["steps_per_execution"], steps)},
    presets={
        "smoke": {"batch_size": 64, "epochs": 2, "steps_per_epoch": 8, "validation_examples": 512},
        "article": {},
    },
    trains=True,
    metrics=(Metric("loss", "loss", higher_is_better=False),
             Metric("sparse_categorical_accuracy", "accuracy", higher_is_better=True, headline=True)),
    charts=(Chart("time", "ms per step"), Chart("throughput", "examples/s"), Chart("metrics", "loss, accuracy")),
)
