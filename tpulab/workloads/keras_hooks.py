"""The hooks a Keras workload writes, as the shared runner (`keras_runner.py`) calls them; a
`KerasWorkload` (keras.py) declares the rest. Declared apart so that the runner, which the
declaration imports in a worker, does not import the declaration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpulab.workloads.base import Params, Workload

if TYPE_CHECKING:
    from tpulab.workloads.data import Dataset


class KerasHooks(Workload):
    """What a Keras workload builds and feeds; each is called in the worker."""

    def build_model(self, p: Params) -> Any:
        """The Keras model, uncompiled (called inside the backend's distribution scope)."""
        raise NotImplementedError

    def compile_model(self, model: Any, p: Params, jit_compile: bool | str) -> None:
        """`model.compile(...)` with the workload's optimizer, loss and metrics; `jit_compile` is the backend's."""
        raise NotImplementedError

    def data(self, p: Params) -> Dataset:
        """The training and validation arrays (numpy; bytes are widened per batch) and where they came from."""
        raise NotImplementedError

    def data_for(self, model: Any, p: Params) -> Dataset:
        """The data, once the model is built (a model of unknown shapes gets inputs that fit it)."""
        return self.data(p)

    def measured_flops(self, counted: float | None) -> float | None:
        """The FLOPs of a training step, for a model whose FLOPs no formula gives, from what XLA `counted` (on
        JAX; None elsewhere). None: the declared `flops_per_step` stand."""
        return None

    def model_words(self, model: Any) -> dict[str, Any]:
        """What the record should say of the built model beyond its parameters, loss and optimizer (whose loss it
        is, what built it); none by default."""
        return {}
