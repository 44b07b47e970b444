"""hello on TensorFlow: the product as a tf.function, its sum fetched (the fetch waits for the work)."""

import numpy as np
import tensorflow as tf

from tpulab.workloads.running import begin


def run(w, p, sink, cancel, runtime):
    _, timer = begin(w, p, sink, cancel, runtime, f"a random {p['size']}x{p['size']} matrix (seed {p['seed']})")
    a = tf.constant(np.random.default_rng(p["seed"]).standard_normal((p["size"], p["size"]), np.float32))
    product_sum = tf.function(lambda a: tf.reduce_sum(a @ a))
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": product_sum(a).numpy()})
        if cancel.is_set():
            break
