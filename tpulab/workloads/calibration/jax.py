"""The calibration step on JAX: one jitted batched product and its sum, fetched to the host (which waits for the
work)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tpulab.backends import Runtime
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.calibration.workload import padded
from tpulab.workloads.running import CancelToken, Sink, begin


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    rng = np.random.default_rng(p["seed"])
    device = placement.devices[0]
    a = jax.device_put(rng.standard_normal((padded(p), p["size"], p["size"]), np.float32), device)
    b = jax.device_put(rng.standard_normal((p["size"], p["size"]), np.float32), device)
    product_sum = jax.jit(lambda a, b: jnp.sum(a @ b))
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": float(product_sum(a, b))})
        if cancel.is_set():
            break
