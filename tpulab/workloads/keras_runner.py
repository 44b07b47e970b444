"""The one runner of every Keras workload, on every Keras backend: place, build, feed, `fit`, timed.

The backend brings what differs (its distribution scope, its input pipeline, its answer to
`--xla`); the workload brings its model and data; the `StepTimer` times each completed step.
Then, where the workload asks for it, the inference phase: `predict` over batches of the same
size, timed by a fresh `StepTimer` (its first call is a compile of its own), its events marked
phase "predict" so that the record keeps inference apart from training. Last, with `--profile`,
a few extra training steps, traced and never timed (`profile_fit`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import keras
import numpy as np

from tpulab.backends import Profiler, Runtime
from tpulab.backends.keras_inputs import rows
from tpulab.base.errors import TpulabError, UsageError, out_of_memory
from tpulab.base.events import Parallel, from_dicts
from tpulab.callbacks import StepTimer
from tpulab.workloads.base import BATCH_SIZE, COMPILE, Params
from tpulab.workloads.keras_hooks import KerasHooks
from tpulab.workloads.keras_params import (
    EPOCHS,
    KERAS_COMPILES_ONCE,
    KERAS_TORCH_COMPILE,
    PIPELINE,
    PREDICT_STEPS,
    SEED,
    STEPS_PER_EPOCH,
    STEPS_PER_EXECUTION,
    VALIDATION,
    XLA,
)
from tpulab.workloads.running import CancelToken, Sink, place, profiled, profiling, started


def run(w: KerasHooks, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    if p.get(COMPILE.name) == "both":
        raise UsageError(f"--compile both: {KERAS_COMPILES_ONCE}")  # a user's file: known to be Keras only now
    placement = place(w, p, runtime)  # before any other framework op
    if w.compute_dtype(p) != "float32":
        keras.mixed_precision.set_global_policy(p["precision"])  # before the model is built
    keras.utils.set_random_seed(p[SEED.name])
    with runtime.keras_scope(placement):
        model = w.build_model(p)
        w.compile_model(model, p, runtime.keras_jit(p.get(XLA.name, False) or p.get(COMPILE.name) == "on"))
    runtime.keras_parallel(model, placement)  # across the joined processes, where the scope did not (DDP on torch)
    data = w.data_for(model, p)
    one_batch = slice(w.batch_size(p))
    flops, nbytes = runtime.keras_step_cost(model, rows(data.x_train, one_batch),
                                            rows(data.y_train, one_batch))
    first = started(w, p, placement, runtime.versions(), data.source, data.synthetic, nbytes)
    measured = w.measured_flops(flops)
    if measured is not None:
        first.flops_per_step = measured
    first.model = {**described(model), **w.model_words(model)}
    if p.get(BATCH_SIZE) != w.batch_size(p):  # none given (a user's model): the workload's own, said as decided
        first.decided = {BATCH_SIZE: w.batch_size(p)}
        first.model["batch_from"] = "tpulab's default (--batch-size sets it)"
    if p.get(COMPILE.name) == "on":  # (only a backend that compiles with torch.compile takes --compile)
        first.note = "; ".join(n for n in (first.note, KERAS_TORCH_COMPILE) if n)
    sink(first)
    batch, seed, pipeline, shards = w.batch_size(p), p[SEED.name], p.get(PIPELINE, ""), w.replicas(p)
    timer = StepTimer(from_dicts(sink, data.synthetic), batch_size=batch, cancel=cancel)
    validation = (runtime.keras_inputs(data.x_test, data.y_test, batch, seed, False, pipeline, shards)
                  if p.get(VALIDATION.name) else None)
    train = runtime.keras_inputs(data.x_train, data.y_train, batch, seed, True, pipeline, shards)
    try:
        model.fit(train, epochs=p[EPOCHS.name], steps_per_epoch=p[STEPS_PER_EPOCH.name], validation_data=validation,
                  callbacks=[timer], verbose=0, shuffle=False)
        if p.get(PREDICT_STEPS.name) and not cancel.is_set():
            inference = StepTimer(from_dicts(sink, data.synthetic), batch_size=batch, cancel=cancel)
            model.predict(train, steps=p[PREDICT_STEPS.name], callbacks=[inference], verbose=0)
        if not cancel.is_set():  # (every process agrees on it): a run over several processes measures them
            said = runtime.parallel_figures(batch, lambda n: one_step(model, data.x_train, data.y_train, n))
            if said:
                sink(Parallel(figures=said))
        if profiled(p, cancel):
            profile_fit(model, train, p, sink, runtime, rows(data.x_train, one_batch), rows(data.y_train, one_batch))
    except Exception as e:
        if out_of_memory(e):
            raise TpulabError(f"the model does not fit in the device's memory at --batch-size {batch}: try a "
                              f"smaller batch (--batch-size {max(shards, batch // 2)})") from e
        raise


def one_step(model: Any, x: Any, y: Any, n: int) -> Any:
    """One training step on the first `n` examples of `x`, `y` (as tensors, made once), with no callback: what a
    run over several processes times in one process alone."""
    xs, ys = keras.tree.map_structure(keras.ops.convert_to_tensor, (rows(x, slice(n)), rows(y, slice(n))))
    return lambda: model.train_on_batch(xs, ys)


def described(model: Any) -> dict[str, Any]:
    """What a compiled Keras model trains with, for the record and the summary: its parameters (all, and those
    trained), its loss and its optimizer, as Keras names them."""
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return {"parameters": int(model.count_params()), "trainable_parameters": trainable,
            "loss": loss_words(getattr(model, "loss", None)), "optimizer": optimizer_words(model.optimizer),
            "inference": "model.predict (training=False)"}


def loss_words(loss: Any) -> str:
    """'sparse_categorical_crossentropy', 'out_a: mse, out_b: binary_crossentropy'; '-' where none is set."""
    if loss is None:
        return "-"
    if isinstance(loss, dict):
        return ", ".join(f"{k}: {loss_words(v)}" for k, v in loss.items())
    if isinstance(loss, (list, tuple)):
        return ", ".join(loss_words(v) for v in loss)
    return loss if isinstance(loss, str) else str(getattr(loss, "name", None) or type(loss).__name__)


def optimizer_words(optimizer: Any) -> str:
    """'Adam(lr=0.001)', or the optimizer's class alone where its rate is a schedule."""
    name = type(optimizer).__name__
    try:
        return f"{name}(lr={float(np.asarray(optimizer.learning_rate)):.3g})"
    except (TypeError, ValueError, AttributeError):
        return name


def profile_fit(model: Any, train: Any, p: Params, sink: Sink, runtime: Runtime, x: Any, y: Any) -> None:
    """The profiled steps of a `fit` workload: extra steps at the end, a short `fit` of its own after the timed
    ones, traced, each in a step annotation, none timed (no `StepTimer` listens). Its first step is left
    out of the table (it refills the input pipeline's buffers). Keras reuses the step it compiled: no
    recompile. `x`, `y`: one batch, from which the profiler knows the compiled step's FLOPs and bytes."""
    per_call = int(p.get(STEPS_PER_EXECUTION.name, 1))
    with profiling(p, sink, runtime, lambda profiler: profiler.keras_programs(model, x, y), per_call) as profiler:
        model.fit(train, epochs=1, steps_per_epoch=(int(p["profile_steps"]) + 1) * per_call,
                  callbacks=[StepAnnotations(profiler)], verbose=0, shuffle=False)


class StepAnnotations(keras.callbacks.Callback):
    """Each call into the device of a `fit` or `predict` (a step, or steps_per_execution of them) inside the
    profiler's step annotation, after the first; it closes once the call's values reached the host (Keras
    hands `fit` callbacks Python floats; `predict`'s outputs are fetched), so it holds the whole work."""

    def __init__(self, profiler: Profiler) -> None:
        super().__init__()
        self.profiler = profiler
        self.calls = 0
        self.open: AbstractContextManager[None] | None = None

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self.calls:
            self.open = self.profiler.step(self.calls - 1)
            self.open.__enter__()
        self.calls += 1

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.open is not None:
            self.open.__exit__(None, None, None)
            self.open = None

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.on_train_batch_begin(batch, logs)

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        keras.tree.map_structure(np.asarray, (logs or {}).get("outputs"))  # the outputs on the host: work done
        self.on_train_batch_end(batch, logs)
