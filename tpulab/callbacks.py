"""`StepTimer`: a Keras callback that streams the wall time of each completed step.

Attach it to any `model.fit` (or `predict`) to get tpulab's timings on your own model::

    from tpulab.callbacks import StepTimer

    timer = StepTimer(print, batch_size=256)      # any callable that takes a dict
    model.fit(dataset, epochs=2, callbacks=[timer])
    print(timer.compile_seconds, timer.step_seconds[:5])

Its events and what it times are `tpulab.base.step_times.StepTimes`'s: Keras hands `fit`
callbacks Python floats, and for `predict` the timer fetches the outputs, so only completed work
is timed. With ``steps_per_execution`` above 1, Keras calls the hooks once per execution; the timer
divides by the number of steps it covered.
"""

from __future__ import annotations

import keras

from tpulab.base.step_times import StepTimes


class StepTimer(StepTimes, keras.callbacks.Callback):
    @classmethod
    def of(cls, times: StepTimes) -> StepTimer:
        """A runner's step timer (nothing timed yet) as a Keras callback, for a `fit` or `predict` of its own."""
        return cls(times.sink, times.batch_size, times.warmup, times.cancel, times.clock, times.predict_phase)

    def _stop(self) -> None:
        if self.model is not None:
            self.model.stop_training = True
            self.model.stop_predicting = True

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.cancel is not None and self.cancel.is_set() and self.model is not None:
            self.model.stop_evaluating = True  # a cancelled fit skips the rest of its validation
