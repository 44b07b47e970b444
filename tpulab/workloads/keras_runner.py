"""The one runner of every Keras workload, on every Keras backend: place, build, feed, `fit`, timed.

The backend brings what differs (its distribution scope, its input pipeline, its answer to
`--xla`); the workload brings its model and data; the `StepTimer` times each completed step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras

from tpulab.backends import Runtime
from tpulab.workloads.base import CancelToken, Params, Sink
from tpulab.workloads.keras_params import EPOCHS, PIPELINE, SEED, STEPS_PER_EPOCH, VALIDATION, XLA

if TYPE_CHECKING:
    from tpulab.workloads.keras import KerasWorkload


def run(w: KerasWorkload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    data = w.data(p)
    placement, timer = w.begin(p, sink, cancel, runtime, data.source, data.synthetic)
    if w.compute_dtype(p) != "float32":
        keras.mixed_precision.set_global_policy(p["precision"])
    keras.utils.set_random_seed(p[SEED.name])
    with runtime.keras_scope(placement):
        model = w.build_model(p)
        w.compile_model(model, p, runtime.keras_jit(p.get(XLA.name, False)))
    batch, seed, pipeline, shards = w.batch_size(p), p[SEED.name], p.get(PIPELINE, ""), w.replicas(p)
    validation = (runtime.keras_inputs(data.x_test, data.y_test, batch, seed, False, pipeline, shards)
                  if p.get(VALIDATION.name) else None)
    model.fit(runtime.keras_inputs(data.x_train, data.y_train, batch, seed, True, pipeline, shards),
              epochs=p[EPOCHS.name], steps_per_epoch=p[STEPS_PER_EPOCH.name], validation_data=validation,
              callbacks=[timer], verbose=0, shuffle=False)
