"""`FitTimer`: tpulab's instrument on your own `model.fit`, drawn live in the cell and kept as a run.

    timer = tpulab.FitTimer(batch_size=64, name="my cnn")
    model.fit(x, y, batch_size=64, epochs=2, callbacks=[timer])
    timer.result                  # a RunResult, also in `tpulab results`, comparable with tpulab's runs

The one run that happens in the notebook's own process, not a worker: the public `StepTimer`
times each step, and its events go to the same `RunRecorder` as any run's, under the "fit"
workload (FLOPs unknown: no FLOP/s and no fraction of peak are claimed). Importing this module
imports Keras, as using it in a notebook already has.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import keras

from tpulab.base.events import Cancelled, Device, Event, Finished, Started, event_from_json
from tpulab.callbacks import StepTimer
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.store import Store, default_path
from tpulab.machine.detect import RuntimeReport, detect
from tpulab.notebook.live import LiveRun
from tpulab.notebook.results import RunResult
from tpulab.workloads.notebook_fit import NOTEBOOK_FIT


class FitTimer(StepTimer):
    """A Keras callback: each step timed, a live chart in the cell, the run kept in tpulab's results."""

    def __init__(self, batch_size: int | None = None, name: str = "my model", warmup: int = 0, live: bool = True,
                 save: bool = True, db: str | Path | None = None) -> None:
        super().__init__(self._from_timer, batch_size=batch_size, warmup=warmup)
        self.name = name
        self.live = live
        self.store = Store(Path(db) if db else default_path()) if save else None
        self.recorder: RunRecorder | None = None
        self.view: LiveRun | None = None
        self.result: RunResult | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._executions, self._steps_done, self.compile_seconds, self.step_seconds = 0, 0, None, []  # a new fit
        report = detect()
        epochs, steps = int(self.params.get("epochs") or 0), int(self.params.get("steps") or 0)
        params = {"model": self.name, "batch_size": self.batch_size or 0, "epochs": epochs, "steps_per_epoch": steps}
        backend = keras.backend.backend()
        device = device_of(backend, report)
        spec = RunSpec(NOTEBOOK_FIT, params, backend, "the notebook's Keras backend", device.kind)
        self.recorder = RunRecorder(spec, report)
        self.view = LiveRun(self.recorder) if self.live else None
        self.result = None
        self._feed(Started(workload=NOTEBOOK_FIT.name, device=device,
                           dtype=keras.config.dtype_policy().compute_dtype, flops_per_step=None,
                           steps_total=epochs * steps, per_replica_batch=self.batch_size or 0,
                           versions=versions(backend), backend=backend, dataset=f"{self.name}'s own data"))

    def on_train_end(self, logs: dict | None = None) -> None:
        stopped = self.model is not None and getattr(self.model, "stop_training", False)
        self._feed(Cancelled() if stopped else Finished())
        self.keep()

    def keep(self) -> RunResult | None:
        """End the display and keep the run as measured so far (after an interrupted fit, call it yourself)."""
        if self.recorder is None:
            return None
        self.recorder.finish("cancelled")  # no-op when the fit already ended
        record = self.recorder.record()
        if self.view is not None:
            self.view.close(record)
        if self.store is not None:
            self.store.save(record)
        self.result = RunResult(record)
        self.recorder = None
        return self.result

    def _from_timer(self, data: dict[str, Any]) -> None:
        self._feed(event_from_json(data))

    def _feed(self, event: Event) -> None:
        if self.recorder is None:
            return
        event.t = event.t or time.time()
        self.recorder.feed(event)
        if self.view is not None:
            self.view(event)


def device_of(backend: str, report: RuntimeReport) -> Device:
    """Where Keras runs the model in this process, as Keras sees it ('gpu:0'), named from the detected hardware."""
    first = (keras.distribution.list_devices() or ["cpu:0"])[0]
    kind = first.split(":")[0].lower()
    names = {"cpu": report.cpu.model, "gpu": report.gpus[0].name if report.gpus else "GPU",
             "tpu": report.tpu.generation if report.tpu and report.tpu.generation else "TPU"}
    return Device(kind=kind if kind in names else "cpu", name=names.get(kind, report.cpu.model))


def versions(backend: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"keras": keras.__version__}
    try:
        out[backend] = version(backend)
    except PackageNotFoundError:
        pass
    return out
