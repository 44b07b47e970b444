"""The seed's second experiment: its 5-layer CNN trained on Fashion-MNIST (declaration only)."""

from __future__ import annotations

from typing import Any

from tpulab.base.charts import METRICS, STEP_TIME, THROUGHPUT
from tpulab.workloads.base import BACKEND, DEVICE, PRECISION, PROCESSES, SHARDS, Limits, Metric, ParamError, Params, ParamSpec, batch_size
from tpulab.workloads.data import DataError, Dataset, find, load
from tpulab.workloads.keras import KerasWorkload
from tpulab.workloads.keras_params import EPOCHS, SEED, STEPS_PER_EPOCH, STEPS_PER_EXECUTION, VALIDATION, XLA

# (kind, output height/width, output channels, kernel size, input channels) of each layer with weights
LAYERS = [("conv", 28, 64, 5, 1), ("conv", 14, 128, 5, 64), ("conv", 7, 256, 5, 128),
          ("dense", 1, 256, 1, 3 * 3 * 256), ("dense", 1, 10, 1, 256)]


def forward_flops_per_example() -> int:
    """Multiply-adds of the convolutions and dense layers (normalisation, pooling and activations are
    a rounding error), times two."""
    return sum(2 * size * size * out * k * k * cin for _, size, out, k, cin in LAYERS)


PARAMS = (
    batch_size(1024, 60000, what="examples per training step"),  # at most the training set
    EPOCHS,
    STEPS_PER_EPOCH,
    ParamSpec("learning_rate", float, 1e-3, "Adam's step size", 1e-6, 1.0, term="learning rate"),
    SHARDS,
    PRECISION,
    XLA,
    ParamSpec("pipeline", str, "tf.data", "tf.data: shuffled, batched, prefetched (on JAX the same from numpy, "
              "without TensorFlow); generator: the article's Python generator of random slices",
              options=("tf.data", "generator"), term="input pipeline"),
    VALIDATION,
    ParamSpec("validation_examples", int, 10000, "test examples used for validation", 1, 10000,
              unit="examples"),
    STEPS_PER_EXECUTION,
    ParamSpec("dataset", str, "fashion-mnist", "fashion-mnist: the real data from local files; synthetic: "
              "random data of the same shapes (timing only)", options=("fashion-mnist", "synthetic"),
              tunes=False),
    DEVICE,
    BACKEND,
    PROCESSES,
    SEED,
    ParamSpec("data_dir", str, "", "folder with the four Fashion-MNIST .gz files (default: search)",
              advanced=True, tunes=False),
    ParamSpec("download", bool, False, "let Keras download Fashion-MNIST if no local copy is found",
              advanced=True, tunes=False),
)


class FashionMnist(KerasWorkload):
    name = "fashion-mnist"
    title = "Fashion-MNIST CNN"
    summary = ("The article's second test: a 5-layer CNN (1.6M weights) trained on Fashion-MNIST, "
               "timed per step, with loss and accuracy as it learns.")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 64, "epochs": 2, "steps_per_epoch": 8, "validation_examples": 512},
        "article": {},
    }
    metrics = (Metric("loss", "loss", higher_is_better=False),
               Metric("sparse_categorical_accuracy", "accuracy", higher_is_better=True, headline=True))
    charts = (STEP_TIME, THROUGHPUT, METRICS)
    how = (*KerasWorkload.how, "pipeline")
    synthetic_data = "random images and labels"

    def flops_per_step(self, p: Params) -> float:
        # Training costs about three forward passes: forward, then gradients for inputs and weights.
        return float(3 * forward_flops_per_example() * p["batch_size"])

    def build_model(self, p: Params) -> Any:
        return build_model()

    def compile_model(self, model: Any, p: Params, jit_compile: bool | str) -> None:
        """The article's optimiser, loss and metric."""
        import keras

        model.compile(optimizer=keras.optimizers.Adam(learning_rate=p["learning_rate"]),
                      loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"],
                      jit_compile=jit_compile, steps_per_execution=p["steps_per_execution"])

    def data(self, p: Params) -> Dataset:
        """Images with their channel axis (28x28x1 bytes), the validation set cut to its size."""
        import numpy as np

        d = load(p["dataset"], p["data_dir"] or None, p["download"])
        n = min(p["validation_examples"], len(d.x_test))
        return Dataset(np.expand_dims(d.x_train, -1), d.y_train, np.expand_dims(d.x_test[:n], -1), d.y_test[:n],
                       d.source)

    def check(self, p: Params, limits: Limits) -> None:
        super().check(p, limits)
        if p["validation"] and p["validation_examples"] < p["shards"]:
            raise ParamError("validation_examples", f"--validation-examples must be at least --shards {p['shards']}: "
                             f"each replica validates its share (got {p['validation_examples']})")
        if p["dataset"] == "fashion-mnist" and not p["download"]:
            try:
                find(p["data_dir"] or None)
            except DataError as e:
                raise ParamError("data_dir", str(e)) from None


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


FASHION_MNIST = FashionMnist()
