"""The convolution in TensorFlow: every mode is timed by the same step timer (`StepTimes`).

`sharded` is a one-layer Keras model whose output is the sum of the convolution, iterated
with `predict`: the sum depends on every output element, so nothing can be pruned, and the
timer fetches it before stopping the clock. The images live on the devices (each replica its
own slice of the batch), so what is timed is the convolution, not a host copy.
"""

from __future__ import annotations

from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from tpulab.backends import Placement, Runtime
from tpulab.base.step_times import StepTimes
from tpulab.callbacks import StepTimer
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.keras_runner import StepAnnotations
from tpulab.workloads.running import CancelToken, Sink, begin, profile_calls, profiled, profiling


class ConvSum(keras.layers.Layer):
    """Holds the images and kernels; returns the sum of their convolution, one row per input row."""

    def __init__(self, images_shape, kernel_shape, stride, padding, dtype_name, seed, **kwargs):
        super().__init__(**kwargs)
        self.images_shape, self.kernel_shape = tuple(images_shape), tuple(kernel_shape)
        self.stride, self.padding, self.data_dtype, self.seed = stride, padding, dtype_name, seed

    def build(self, input_shape):
        init = keras.initializers.RandomNormal(seed=self.seed)
        self.images = self.add_weight(shape=self.images_shape, initializer=init, trainable=False,
                                      dtype=self.data_dtype, name="images")
        self.kernel = self.add_weight(shape=self.kernel_shape, initializer=init, trainable=False,
                                      dtype=self.data_dtype, name="kernel")

    def call(self, x):
        y = tf.nn.conv2d(self.images.value, self.kernel.value, self.stride, self.padding)
        total = tf.cast(tf.reduce_sum(y), tf.float32)
        return tf.zeros_like(x[:, :1], dtype=tf.float32) + total


def still() -> tf.data.Options:
    """No autotuning for a dataset of one repeated row: tearing its iterator down after the last batch waited on
    the autotuner's threads for up to 30 s (under load) before `predict` returned."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


STILL = still()


def shapes(p: Params) -> tuple[tuple[int, ...], tuple[int, ...]]:
    per_replica = p["batch_size"] // p["shards"]
    return ((per_replica, p["image_size"], p["image_size"], p["channels"]),
            (p["kernel_size"], p["kernel_size"], p["channels"], p["filters"]))


def build_model(p: Params, placement: Placement) -> keras.Model:
    images, kernel = shapes(p)
    with placement.scope():
        inputs = keras.Input((1,))
        outputs = ConvSum(images, kernel, p["stride"], p["padding"], p["dtype"], p["seed"])(inputs)
        return keras.Model(inputs, outputs)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    if p["mode"] == "naive":
        step = naive(p, placement.devices)
        timed(step, timer, cancel, w.total_steps(p))
        profile_calls(p, sink, cancel, runtime, step)
    elif p["mode"] == "batch-parallel":
        run_batch_parallel(p, timer, cancel, placement, w.total_steps(p), lambda step: profile_calls(
            p, sink, cancel, runtime, step))
    else:
        model = build_model(p, placement)
        # One dummy row per replica: each replica convolves the images it holds.
        rows = tf.data.Dataset.from_tensors(tf.zeros((p["shards"], 1))).repeat().with_options(STILL)
        model.predict(rows, steps=w.total_steps(p), callbacks=[StepTimer.of(timer)], verbose=0)
        if profiled(p, cancel):  # more calls of the same predict step, traced (its first left out)
            graph = tf.function(model).get_concrete_function(tf.TensorSpec((p["shards"], 1), tf.float32))
            with profiling(p, sink, runtime, lambda profiler: [graph]) as profiler:
                model.predict(rows, steps=int(p["profile_steps"]) + 1, callbacks=[StepAnnotations(profiler)],
                              verbose=0)


def timed(step: Callable[[], np.ndarray], timer: StepTimes, cancel: CancelToken, steps: int) -> None:
    for i in range(steps):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": step()})
        if cancel.is_set():
            break


def naive(p: Params, devices: list[str]) -> Callable[[], np.ndarray]:
    """The article's first attempt: numpy arrays in, the whole output copied back, every time.

    With shards, each device gets its slice in turn: eager ops placed by hand run one after
    another, which is the lesson of this mode, not a parallel run.
    """
    rng = np.random.default_rng(p["seed"])
    np_dtype = tf.dtypes.as_dtype(p["dtype"]).as_numpy_dtype
    images_shape, kernel_shape = shapes(p)
    slices = [rng.standard_normal(images_shape, dtype=np.float32).astype(np_dtype) for _ in devices]
    kernel = rng.standard_normal(kernel_shape, dtype=np.float32).astype(np_dtype)

    def step() -> np.ndarray:
        first = []
        for device, images in zip(devices, slices):
            with tf.device(device):
                first.append(tf.nn.conv2d(images, kernel, p["stride"], p["padding"]).numpy().flat[0])
        return np.array(first)

    return step


def batch_parallel_graph(p: Params) -> tuple[tf.Graph, tf.Tensor]:
    """The article's `batch_parallel` call, fixed: each shard returns the sum of its convolution.

    The article's `conv_op` returned nothing, so the TPU program had no outputs and no work ran.
    """
    graph = tf.Graph()
    images_shape, kernel_shape = shapes(p)
    dtype = tf.dtypes.as_dtype(p["dtype"])
    with graph.as_default():
        def shard():
            images = tf.random.stateless_normal(images_shape, seed=[p["seed"], 0], dtype=dtype)
            kernel = tf.random.stateless_normal(kernel_shape, seed=[p["seed"], 1], dtype=dtype)
            return [tf.cast(tf.reduce_sum(tf.nn.conv2d(images, kernel, p["stride"], p["padding"])), tf.float32)]

        outputs = tf.compat.v1.tpu.batch_parallel(shard, [], num_shards=p["shards"])
        total = tf.add_n(outputs)
    return graph, total


def run_batch_parallel(p: Params, timer: StepTimes, cancel: CancelToken, placement: Placement, steps: int,
                       then: Callable[[Callable[[], Any]], None]) -> None:
    """The timed calls, then `then` (the profiled ones) of the same step, inside the TPU's session."""
    graph, total = batch_parallel_graph(p)
    with graph.as_default(), tf.compat.v1.Session(placement.master, graph=graph) as session:
        session.run(tf.compat.v1.tpu.initialize_system())
        try:
            timed(lambda: session.run(total), timer, cancel, steps)
            then(lambda: session.run(total))
        finally:
            session.run(tf.compat.v1.tpu.shutdown_system())
