"""`StepTimes`: the step timer's logic, free of any framework.

A runner that drives its own loop (the convolution on every backend) calls the Keras-named hooks
itself; `tpulab.callbacks.StepTimer` is the same logic as a Keras callback, for `fit` and `predict`.
Keras stays out of every worker that never builds a Keras model: importing it costs about a second
on JAX and four on PyTorch (its torch backend imports torch._dynamo).

Each event is a plain dict: ``{"event": "compiled", "seconds": ...}`` for the first execution
(trace and compile, reported apart), then ``{"event": "step", "step", "steps", "seconds",
"examples_per_s", "metrics"}`` per completed step, and ``{"event": "epoch", ...}`` per epoch.
A step is timed from its batch-begin hook to its batch-end hook, after its values reached the
host (for `predict` the timer fetches the outputs), so only completed work is timed. When a hook
covers several steps (Keras's ``steps_per_execution``), the timer divides by their number.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from tpulab.base.events import PHASE_PREDICT, PHASE_TRAIN

Sink = Callable[[dict[str, Any]], None]


class StepTimes:
    def __init__(self, sink: Sink, batch_size: int | None = None, warmup: int = 0,
                 cancel: Any = None, clock: Callable[[], float] = time.perf_counter,
                 predict_phase: str = PHASE_PREDICT) -> None:
        """`predict_phase`: what the predict hooks time: a training run's inference phase, or "" where a runner times
        its one phase through them (the convolution: its steps are no `predict`, whatever the hooks are named)."""
        super().__init__()  # cooperative: the Keras callback's own state, where it is one
        self.sink = sink
        self.predict_phase = predict_phase
        self.batch_size = batch_size
        self.warmup = warmup
        self.cancel = cancel  # anything with is_set(): the run stops after the current step
        self.clock = clock
        self.compile_seconds: float | None = None
        self.step_seconds: list[float] = []
        self._executions = 0
        self._steps_done = 0
        self._last_end = -1
        self._t0 = 0.0
        self._epoch_t0 = 0.0

    # --- the timed interval -------------------------------------------------------
    def _begin(self, batch: int) -> None:
        self._t0 = self.clock()

    def _end(self, batch: int, phase: str, metrics: dict[str, float], value: float | None = None) -> None:
        seconds = self.clock() - self._t0
        steps = max(1, batch - self._last_end)
        self._last_end = batch
        self._executions += 1
        self._steps_done += steps
        if self._executions == 1:
            self.compile_seconds = seconds
            self.sink({"event": "compiled", "phase": phase, "seconds": seconds, "steps": steps})
        else:
            per_step = seconds / steps
            warm = self._executions - 1 <= self.warmup
            if not warm:
                self.step_seconds.extend([per_step] * steps)
            event: dict[str, Any] = {"event": "step", "phase": phase, "step": self._steps_done, "steps": steps,
                                     "seconds": per_step, "warmup": warm}
            if self.batch_size:
                event["examples_per_s"] = self.batch_size / per_step
            if metrics:
                event["metrics"] = metrics
            if value is not None:
                event["value"] = value
            self.sink(event)
        if self.cancel is not None and self.cancel.is_set():
            self._stop()

    def _stop(self) -> None:
        """A cancel was asked for: a loop of one's own reads the token itself; Keras's loop is told here."""

    # --- the hooks, named as Keras's ------------------------------------------------------
    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._last_end = -1
        self._epoch_t0 = self.clock()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.sink({"event": "epoch", "epoch": epoch + 1, "seconds": self.clock() - self._epoch_t0,
                   "metrics": floats(logs)})

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._begin(batch)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._end(batch, PHASE_TRAIN, floats(logs))

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._last_end = -1

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._begin(batch)

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # Fetching the outputs to the host waits for the step's work to finish.
        import numpy as np  # here: the front ends import this module, and a worker has numpy in already

        outputs = list(leaves((logs or {}).get("outputs")))
        value = float(sum(np.sum(np.asarray(o, dtype=np.float64)) for o in outputs)) if outputs else None
        self._end(batch, self.predict_phase, {}, value)


def leaves(tree: Any) -> Iterator[Any]:
    """The arrays of a nest of dicts, lists and tuples (what a step returns), in order."""
    if tree is None:
        return
    if isinstance(tree, dict):
        for v in tree.values():
            yield from leaves(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from leaves(v)
    else:
        yield tree


def floats(logs: dict | None) -> dict[str, float]:
    import numpy as np

    return {k: float(v) for k, v in (logs or {}).items() if np.ndim(v) == 0}
