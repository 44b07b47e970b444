"""A Keras workload: a model, its data and `fit`, declared once and run on every Keras backend.

Subclass `KerasWorkload`, declare the parameters (the shared ones below included), and write
`build_model`, `compile_model` and `data`; the shared runner (`keras_runner.py`) places the
replicas, sets the precision and the seed, builds the model in the backend's scope, feeds the
data through the backend's pipeline and times `fit` with the `StepTimer`. No framework is
imported here: the hooks import Keras when a worker calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tpulab.workloads.base import COMPILE, COMPUTE_DTYPES, PRECISION, ParamError, Params, check_shards
from tpulab.workloads.keras_hooks import KerasHooks
from tpulab.workloads.keras_params import (
    EPOCHS,
    KERAS_COMPILES_ONCE,
    PREDICT_STEPS,
    STEPS_PER_EPOCH,
    STEPS_PER_EXECUTION,
    VALIDATION,
)
from tpulab.workloads.running import Runner

__all__ = ["KerasWorkload"]

if TYPE_CHECKING:
    from tpulab.backends import Backend
    from tpulab.workloads.base import Limits


def _keras_runner() -> Runner:
    from tpulab.workloads.keras_runner import run

    return run


class KerasWorkload(KerasHooks):
    """A model trained with `fit` on any Keras backend; declare the shared parameters above, and write
    the hooks (`KerasHooks`)."""

    trains = True
    how: tuple[str, ...] = ("precision", "xla", "steps_per_execution")

    # --- the contract's hooks, for every Keras workload -----------------------------------------
    def runner(self, backend: Backend) -> Callable[[], Runner] | None:
        """The shared Keras runner on every backend Keras 3 runs on."""
        return _keras_runner if backend.keras else super().runner(backend)

    def total_steps(self, p: Params) -> int:
        return int(p[EPOCHS.name] * p[STEPS_PER_EPOCH.name] + p.get(PREDICT_STEPS.name, 0))

    def compute_dtype(self, p: Params) -> str:
        return COMPUTE_DTYPES[p.get(PRECISION.name, "float32")]

    def shorten(self, p: Params, steps: int) -> Params:
        """A sweep point: one epoch of `steps` steps without validation or inference (training throughput is the objective)."""
        inference = {PREDICT_STEPS.name: 0} if PREDICT_STEPS.name in p else {}
        return {**p, **inference, EPOCHS.name: 1, STEPS_PER_EPOCH.name: steps, VALIDATION.name: False,
                STEPS_PER_EXECUTION.name: min(p.get(STEPS_PER_EXECUTION.name, 1), steps)}

    def check(self, p: Params, limits: Limits) -> None:
        check_shards(p, limits)
        self.check_compile(p)
        if p.get(STEPS_PER_EXECUTION.name, 1) > p[STEPS_PER_EPOCH.name]:
            raise ParamError(STEPS_PER_EXECUTION.name, f"--steps-per-execution must be an integer from 1 to "
                             f"--steps-per-epoch {p[STEPS_PER_EPOCH.name]} (got {p[STEPS_PER_EXECUTION.name]})")

    def check_compile(self, p: Params) -> None:
        """`--compile both` is refused here: a Keras model compiles once per run (a user's file may hold an nn.Module)."""
        if p.get(COMPILE.name) == "both":
            raise ParamError(COMPILE.name, f"--compile both: {KERAS_COMPILES_ONCE}")
