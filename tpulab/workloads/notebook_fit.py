"""Your own `model.fit`, timed in your notebook: the one run that happens outside a worker (declaration only).

Its runner is the notebook's `FitTimer` callback, not a module a worker imports, so it is not in
`WORKLOADS` (the CLI cannot start it). Its FLOPs are unknown: its records carry no FLOP/s and no
fraction of peak, only times and examples/s.
"""

from __future__ import annotations

import math

from tpulab.workloads.base import Chart, Limits, Params, ParamSpec, Workload

NAME = "fit"


def unknown_flops(p: Params) -> float:
    """Never shown: the record's Started event carries None, so no FLOP/s is derived."""
    return math.nan


def check(p: Params, limits: Limits) -> None:
    """Nothing to check: the model and its data are the user's."""


NOTEBOOK_FIT = Workload(
    name=NAME,
    title="Your model.fit",
    summary="Your own Keras model, timed step by step in your notebook by tpulab's StepTimer.",
    params=(ParamSpec("model", str, "my model", "what you call your model, shown in the results"),
            ParamSpec("batch_size", int, 0, "examples per step (0: unknown, no examples/s)", 0, None,
                      unit="examples", term="batch"),
            ParamSpec("epochs", int, 0, "epochs fit was asked for", 0, None),
            ParamSpec("steps_per_epoch", int, 0, "steps per epoch, as Keras counted them", 0, None)),
    runners={},
    flops_per_step=unknown_flops,
    check=check,
    total_steps=lambda p: p["epochs"] * p["steps_per_epoch"],
    compute_dtype=lambda p: "float32",
    shorten=lambda p, steps: p,
    trains=True,
    charts=(Chart("time", "ms per step"), Chart("throughput", "examples/s"), Chart("metrics", "loss, accuracy")),
)
