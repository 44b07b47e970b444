"""FLOPs of a Keras model's training step from XLA's cost analysis (JAX only; in a worker)."""

from __future__ import annotations

from typing import Any

import jax
import keras
import numpy as np

from tpulab.workloads.keras_inputs import widen


def train_step_flops(model: Any, x: Any, y: Any) -> float | None:
    """The step `fit` runs (forward, loss, gradients, the optimizer's update) lowered for one global batch and
    counted before optimisation: the whole program, every replica's share. None when XLA does not say, or the
    step (a custom `train_step`, say) does not lower on these shapes: `fit` then shows why."""
    x, y = widen(x, np.float32), widen(y, np.int32)
    try:
        model._symbolic_build(data_batch=(x, y))  # builds the optimizer's and the metrics' variables
        state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                     optimizer_variables=True, metrics_variables=True)
        data = keras.tree.map_structure(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (x, y))
        cost = jax.jit(model.train_step).lower(state, data).cost_analysis()
    except Exception:  # noqa: BLE001 - an estimate only: the run goes on without it
        return None
    if isinstance(cost, list):  # older JAX: one per computation
        cost = cost[0] if cost else None
    flops = (cost or {}).get("flops")
    return float(flops) if flops and flops > 0 else None
