"""The article's CNN on TensorFlow: its tf.data input pipeline and its placement; `train` does the rest."""

from __future__ import annotations

import tensorflow as tf

from tpulab.backends.tensorflow import place, to_tpu_model, versions
from tpulab.workloads.data import Dataset, random_slices
from tpulab.workloads.base import CancelToken, Params, Sink
from tpulab.workloads.fashion_mnist import train


def _as_float_images(x, y):
    return tf.cast(tf.expand_dims(x, -1), tf.float32), y


def training_input(data: Dataset, p: Params):
    batch = p["batch_size"]
    if p["pipeline"] == "generator":
        return random_slices(data.x_train, data.y_train, batch, p["seed"])
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    return (ds.shuffle(10000, seed=p["seed"]).repeat().batch(batch, drop_remainder=True)
            .map(_as_float_images, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def validation_input(data: Dataset, p: Params):
    n = min(p["validation_examples"], len(data.x_test))
    ds = tf.data.Dataset.from_tensor_slices((data.x_test[:n], data.y_test[:n]))
    return ds.batch(p["batch_size"]).map(_as_float_images).prefetch(tf.data.AUTOTUNE)


def run(p: Params, sink: Sink, cancel: CancelToken) -> None:
    placement = place(p["device"], p["shards"])
    # On a TPU, the article's keras_to_tpu_model step: the model rebuilt with its weights under the strategy.
    adopt = (lambda model: to_tpu_model(model, placement.handle)) if placement.kind == "tpu" else None
    train(p, sink, cancel, placement, versions(), "tensorflow", training_input, validation_input,
          jit_compile=p["xla"], adopt=adopt)
