"""Your own `model.fit`, timed in your notebook: the one run that happens outside a worker (declaration only).

Its runner is the notebook's `FitTimer` callback, not a function a worker calls, so it is not
registered (the CLI cannot start it). Its FLOPs are unknown: its records carry no FLOP/s and no
fraction of peak, only times and examples/s.
"""

from __future__ import annotations

from tpulab.base.charts import METRICS, STEP_TIME, THROUGHPUT
from tpulab.workloads.base import Limits, Params, ParamSpec, Workload

NAME = "fit"


class NotebookFit(Workload):
    name = NAME
    title = "Your model.fit"
    summary = "Your own Keras model, timed step by step in your notebook by tpulab's StepTimer."
    params = (ParamSpec("model", str, "my model", "what you call your model, shown in the results"),
              ParamSpec("batch_size", int, 0, "examples per step (0: unknown, no examples/s)", 0, None,
                        unit="examples", term="batch"),
              ParamSpec("epochs", int, 0, "epochs fit was asked for", 0, None),
              ParamSpec("steps_per_epoch", int, 0, "steps per epoch, as Keras counted them", 0, None))
    trains = True
    shared = ()  # timed in the notebook's own process: no worker traces it (--profile)
    charts = (STEP_TIME, THROUGHPUT, METRICS)

    def flops_per_step(self, p: Params) -> float | None:
        return None  # the user's model: unknown, so no FLOP/s and no fraction of peak

    def total_steps(self, p: Params) -> int:
        return int(p["epochs"] * p["steps_per_epoch"])

    def check(self, p: Params, limits: Limits) -> None:
        """Nothing to check: the model and its data are the user's."""


NOTEBOOK_FIT = NotebookFit()
