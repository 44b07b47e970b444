"""The calibration step on TensorFlow: one batched product and its sum as a tf.function, fetched to the host
(which waits for the work)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tpulab.backends import Runtime
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.calibration.workload import padded
from tpulab.workloads.running import CancelToken, Sink, begin


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    rng = np.random.default_rng(p["seed"])
    with tf.device(placement.devices[0]):
        a = tf.constant(rng.standard_normal((padded(p), p["size"], p["size"]), np.float32))
        b = tf.constant(rng.standard_normal((p["size"], p["size"]), np.float32))
    product_sum = tf.function(lambda a, b: tf.reduce_sum(a @ b))
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": float(product_sum(a, b).numpy())})
        if cancel.is_set():
            break
