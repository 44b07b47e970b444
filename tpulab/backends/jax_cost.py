"""What XLA counts a step to cost, before it runs: the bytes it accesses give a run its arithmetic intensity,
and the FLOPs of a model no formula counts (the user's own)."""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np


def bytes_accessed(f: Callable[..., Any], *args: Any) -> float | None:
    """XLA's "bytes accessed" for `f` on arguments of these shapes (arrays or ShapeDtypeStructs), or None.

    From the lowered program (no compile): the estimate XLA's own cost model makes, before fusion
    decisions a backend may still take. None when this JAX or backend does not say.
    """
    try:
        cost = jax.jit(f).lower(*args).cost_analysis()
    except Exception:  # noqa: BLE001 - an estimate only: a run goes on without it
        return None
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else None
    value = (cost or {}).get("bytes accessed")
    return float(value) if value else None


def _train_step(model: Any, x: Any, y: Any, **jit: Any) -> Any:
    """`model.train_step` jitted with `jit`'s options and lowered for one global batch `x`, `y`, with the
    optimizer's and the metrics' variables built. (Keras is imported here only: conv on JAX never loads it.)"""
    import keras

    from tpulab.backends.keras_inputs import widen

    x, y = widen(x, np.float32), widen(y, np.int32)
    model._symbolic_build(data_batch=(x, y))  # builds the optimizer's and the metrics' variables
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                 optimizer_variables=True, metrics_variables=True)
    data = keras.tree.map_structure(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (x, y))
    return jax.jit(model.train_step, **jit).lower(state, data)


def train_step_cost(model: Any, x: Any, y: Any) -> tuple[float | None, float | None]:
    """(FLOPs, bytes accessed) of the step `fit` runs (forward, loss, gradients, the optimizer's update),
    lowered for one global batch and counted before optimisation: the whole program, every replica's share.
    None for a figure XLA does not give, or both when the step (a custom `train_step`, say) does not lower
    on these shapes: `fit` then shows why."""
    try:
        cost = _train_step(model, x, y).cost_analysis()
    except Exception:  # noqa: BLE001 - an estimate only: the run goes on without it
        return None, None
    if isinstance(cost, (list, tuple)):  # older JAX: one per computation
        cost = cost[0] if cost else None
    flops, nbytes = ((cost or {}).get(k) for k in ("flops", "bytes accessed"))
    return (float(flops) if flops and flops > 0 else None), (float(nbytes) if nbytes and nbytes > 0 else None)


def train_step_program(model: Any, x: Any, y: Any) -> str | None:
    """The optimized HLO of the step `fit` compiled (its state donated, as Keras jits it: the same program,
    so its instruction names are the trace's; JAX's compilation cache gives it back), or None where it
    does not lower on these shapes."""
    try:
        return str(_train_step(model, x, y, donate_argnums=0).compile().as_text())
    except Exception:  # noqa: BLE001 - the op table goes on without FLOPs, saying so
        return None
