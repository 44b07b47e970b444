"""hello on JAX: the product jitted, its sum fetched (the fetch waits for the work)."""

import jax
import jax.numpy as jnp
import numpy as np

from tpulab.workloads.running import begin


def run(w, p, sink, cancel, runtime):
    _, timer = begin(w, p, sink, cancel, runtime, f"a random {p['size']}x{p['size']} matrix (seed {p['seed']})")
    a = jnp.asarray(np.random.default_rng(p["seed"]).standard_normal((p["size"], p["size"]), np.float32))
    product_sum = jax.jit(lambda a: jnp.sum(a @ a))
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": np.asarray(product_sum(a))})
        if cancel.is_set():
            break
