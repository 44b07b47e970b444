"""What XLA counts a step to cost, before it runs: the bytes it accesses give a run its arithmetic intensity."""

from __future__ import annotations

from typing import Any, Callable

import jax


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
