"""ResNet-50, the benchmark everyone quotes (tf_cnn_benchmarks, MLPerf), trained on synthetic images.

Declaration only: `keras.applications.ResNet50(weights=None)` is built in the worker. Its FLOPs are
counted layer by layer from the architecture (the convolutions and the classifier), so their
fraction of the peak is its MFU, as for the transformer.
"""

from __future__ import annotations

from typing import Any

from tpulab.base.charts import GFLOPS, METRICS, STEP_TIME, THROUGHPUT
from tpulab.workloads.base import Metric, Params, ParamSpec, batch_size
from tpulab.workloads.data import Dataset
from tpulab.workloads.keras import KerasWorkload
from tpulab.workloads.keras_params import EPOCHS, HOW_IT_RUNS, PREDICT_STEPS, STEPS_PER_EPOCH

PARAMS = (
    batch_size(64, 4096, unit="images", what="images per training step"),
    ParamSpec("image_size", int, 224, "height and width of each synthetic image (ImageNet's: 224)", 32, 1024,
              unit="px"),
    ParamSpec("classes", int, 1000, "labels of the classifier (ImageNet's: 1000)", 2, 100000),
    EPOCHS,
    STEPS_PER_EPOCH,
    PREDICT_STEPS,
    ParamSpec("learning_rate", float, 0.1, "SGD's step size (momentum 0.9, as the published runs use)", 1e-6, 10.0,
              term="learning rate"),
    *HOW_IT_RUNS,
)
SYNTHETIC_BATCHES = 2  # distinct batches of random images, kept as bytes
STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))  # (blocks, bottleneck width, first stride)


def _out(size: int, stride: int) -> int:
    return -(-size // stride)  # every strided layer of ResNet-50 keeps ceil(size / stride)


def forward_macs(image: int, classes: int) -> int:
    """Multiply-adds of one image's forward pass: the 7x7 stem, the bottleneck blocks' convolutions
    (their projection shortcuts included) and the classifier; normalisation and pooling left out."""
    size = _out(image, 2)
    macs = size * size * 7 * 7 * 3 * 64
    size, cin = _out(size, 2), 64  # max pooling
    for blocks, width, first_stride in STAGES:
        for b in range(blocks):
            stride = first_stride if b == 0 else 1
            out = _out(size, stride)
            macs += out * out * (cin * width + 9 * width * width + width * 4 * width)
            if b == 0:
                macs += out * out * cin * 4 * width  # the projection shortcut
            size, cin = out, 4 * width
    return macs + cin * classes


class ResNet50(KerasWorkload):
    name = "resnet50"
    title = "ResNet-50"
    summary = ("keras.applications.ResNet50 (25.6M weights at 1000 classes) trained with fit on synthetic "
               "images, as tf_cnn_benchmarks and MLPerf quote it: images/s, then inference (predict).")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 2, "image_size": 32, "classes": 10, "epochs": 1, "steps_per_epoch": 2,
                  "predict_steps": 2},
        "tf_cnn_benchmarks": {"batch_size": 64, "image_size": 224, "classes": 1000, "steps_per_epoch": 100},
    }
    throughput_unit = "images/s"
    sizes = ("image_size", "classes")
    synthetic_data = "random images and labels"
    model_flops = True
    metrics = (Metric("loss", "loss", higher_is_better=False, headline=True),)
    charts = (STEP_TIME, THROUGHPUT, GFLOPS, METRICS)

    def flops_per_step(self, p: Params) -> float:
        # Training costs about three forward passes: forward, then gradients for inputs and weights.
        return float(3 * 2 * forward_macs(p["image_size"], p["classes"]) * p["batch_size"])

    def describe_data(self, p: Params) -> str:
        return "synthetic"

    def build_model(self, p: Params) -> Any:
        import keras

        size = p["image_size"]
        return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=p["classes"],
                                           classifier_activation=None)

    def compile_model(self, model: Any, p: Params, jit_compile: bool | str) -> None:
        import keras

        model.compile(optimizer=keras.optimizers.SGD(learning_rate=p["learning_rate"], momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=jit_compile, steps_per_execution=p["steps_per_execution"])

    def data(self, p: Params) -> Dataset:
        """Random images (bytes, widened per batch) with random labels: timing only."""
        import numpy as np

        rng = np.random.default_rng(p["seed"])
        n, size = SYNTHETIC_BATCHES * p["batch_size"], p["image_size"]
        x = rng.integers(0, 256, size=(n, size, size, 3), dtype=np.uint8)
        y = rng.integers(0, p["classes"], size=(n,), dtype=np.int32)
        return Dataset(x, y, x[:0], y[:0], "synthetic")


RESNET50 = ResNet50()
