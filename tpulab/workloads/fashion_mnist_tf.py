"""The article's CNN in Keras 3, trained with `fit` and timed by the public `StepTimer`."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from ..callbacks import StepTimer
from ..data import Dataset, load
from ..runtime.strategy import place, to_tpu_model, versions
from .base import CancelToken, Params, Sink
from .fashion_mnist import FASHION_MNIST


def build_model() -> keras.Sequential:
    """Layer for layer the article's model: 1,619,470 parameters."""
    layers = [keras.Input((28, 28, 1))]
    for filters in (64, 128, 256):
        layers += [keras.layers.BatchNormalization(),
                   keras.layers.Conv2D(filters, (5, 5), padding="same", activation="elu"),
                   keras.layers.MaxPooling2D(pool_size=(2, 2), strides=(2, 2)),
                   keras.layers.Dropout(0.25)]
    layers += [keras.layers.Flatten(), keras.layers.Dense(256), keras.layers.Activation("elu"),
               keras.layers.Dropout(0.5), keras.layers.Dense(10),
               keras.layers.Activation("softmax", dtype="float32")]  # float32 output under mixed precision
    return keras.Sequential(layers)


def compile_model(model: keras.Model, p: Params) -> None:
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=p["learning_rate"]),
                  loss="sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"],
                  jit_compile=p["xla"], steps_per_execution=p["steps_per_execution"])


def _as_float_images(x, y):
    return tf.cast(tf.expand_dims(x, -1), tf.float32), y


def training_input(data: Dataset, p: Params):
    batch = p["batch_size"]
    if p["pipeline"] == "generator":
        return random_slices(data.x_train, data.y_train, batch, p["seed"])
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    return (ds.shuffle(10000, seed=p["seed"]).repeat().batch(batch, drop_remainder=True)
            .map(_as_float_images, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def random_slices(x: np.ndarray, y: np.ndarray, batch: int, seed: int):
    """The article's generator: a random contiguous slice of `batch` examples, forever."""
    rng = np.random.default_rng(seed)
    while True:
        offset = int(rng.integers(0, len(x) - batch + 1))
        yield np.expand_dims(x[offset:offset + batch], -1).astype(np.float32), y[offset:offset + batch]


def validation_input(data: Dataset, p: Params):
    n = min(p["validation_examples"], len(data.x_test))
    ds = tf.data.Dataset.from_tensor_slices((data.x_test[:n], data.y_test[:n]))
    return ds.batch(p["batch_size"]).map(_as_float_images).prefetch(tf.data.AUTOTUNE)


def labelled(sink: Sink) -> Sink:
    return lambda event: sink({**event, "synthetic": True})


def run(p: Params, sink: Sink, cancel: CancelToken) -> None:
    placement = place(p["device"], p["shards"])
    if p["precision"] != "float32":
        keras.mixed_precision.set_global_policy(p["precision"])
    keras.utils.set_random_seed(p["seed"])
    data = load(p["dataset"], p["data_dir"] or None, p["download"])
    if data.synthetic:  # every event says so, so no figure travels without the warning
        sink = labelled(sink)
    sink({"event": "started", "workload": FASHION_MNIST.name, "device": placement.describe(),
          "dtype": FASHION_MNIST.compute_dtype(p), "flops_per_step": FASHION_MNIST.flops_per_step(p),
          "steps_total": FASHION_MNIST.total_steps(p),
          "per_replica_batch": p["batch_size"] // p["shards"], "dataset": data.source,
          "synthetic": data.synthetic, "versions": versions(), "note": placement.note})
    if placement.kind == "tpu":
        model = to_tpu_model(build_model(), placement.strategy)  # the article's keras_to_tpu_model step
        with placement.strategy.scope():
            compile_model(model, p)
    else:
        with placement.strategy.scope():
            model = build_model()
            compile_model(model, p)
    timer = StepTimer(sink, batch_size=p["batch_size"], cancel=cancel)
    model.fit(training_input(data, p), epochs=p["epochs"], steps_per_epoch=p["steps_per_epoch"],
              validation_data=validation_input(data, p) if p["validation"] else None,
              callbacks=[timer], verbose=0, shuffle=False)
