"""The one runner of every Keras workload, on every Keras backend: place, build, feed, `fit`, timed.

The backend brings what differs (its distribution scope, its input pipeline, its answer to
`--xla`); the workload brings its model and data; the `StepTimer` times each completed step.
Then, where the workload asks for it, the inference phase: `predict` over batches of the same
size, timed by a fresh `StepTimer` (its first call is a compile of its own), its events marked
phase "predict" so that the record keeps inference apart from training.
"""

from __future__ import annotations


import keras

from tpulab.backends import Runtime
from tpulab.backends.keras_inputs import rows
from tpulab.base.errors import TpulabError, out_of_memory
from tpulab.base.events import from_dicts
from tpulab.callbacks import StepTimer
from tpulab.workloads.base import Params
from tpulab.workloads.keras_hooks import KerasHooks
from tpulab.workloads.keras_params import EPOCHS, PIPELINE, PREDICT_STEPS, SEED, STEPS_PER_EPOCH, VALIDATION, XLA
from tpulab.workloads.running import CancelToken, Sink, place, started



def run(w: KerasHooks, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement = place(w, p, runtime)  # before any other framework op
    if w.compute_dtype(p) != "float32":
        keras.mixed_precision.set_global_policy(p["precision"])  # before the model is built
    keras.utils.set_random_seed(p[SEED.name])
    with runtime.keras_scope(placement):
        model = w.build_model(p)
        w.compile_model(model, p, runtime.keras_jit(p.get(XLA.name, False)))
    data = w.data_for(model, p)
    one_batch = slice(w.batch_size(p))
    flops, nbytes = runtime.keras_step_cost(model, rows(data.x_train, one_batch),
                                            rows(data.y_train, one_batch))
    first = started(w, p, placement, runtime.versions(), data.source, data.synthetic, nbytes)
    measured = w.measured_flops(flops)
    if measured is not None:
        first.flops_per_step = measured
    first.model = {"parameters": int(model.count_params())}
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
    except Exception as e:
        if out_of_memory(e):
            raise TpulabError(f"the model does not fit in the device's memory at --batch-size {batch}: try a "
                              f"smaller batch (--batch-size {max(shards, batch // 2)})") from e
        raise
