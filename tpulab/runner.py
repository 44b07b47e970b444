"""One run from the parent's side: start the worker, feed its events to the record, cancel it.

Shared by the headless CLI and the TUI, so both record and judge a run the same way.
"""

from __future__ import annotations

import signal
from typing import Iterator

from .record import RunRecorder
from .runtime.detect import RuntimeReport
from .worker import EXIT_CANCELLED, RunHandle
from .workloads.base import Event, Params

EXIT_CODES = {"finished": 0, "failed": 1, "cancelled": EXIT_CANCELLED}


class Run:
    def __init__(self, workload: str, params: Params, runtime: RuntimeReport) -> None:
        self.workload = workload
        self.params = params
        self.recorder = RunRecorder(workload, params, runtime)
        self.handle: RunHandle | None = None

    def events(self) -> Iterator[Event]:
        """Start the worker and yield its events, each already fed to the record."""
        self.handle = RunHandle.start(self.workload, self.params)
        for event in self.handle.events():
            self.recorder.feed(event)
            yield event
        if self.recorder.status == "running":  # the worker died without a last word
            self.recorder.finish(*self._death())

    def _death(self) -> tuple[str, str]:
        assert self.handle is not None
        code = self.handle.returncode
        if self.handle.cancel_requested:
            return "cancelled", "stopped by the user"
        if code is not None and code < 0:
            name = signal.Signals(-code).name
            hint = " (out of memory? try a smaller batch or image size)" if name == "SIGKILL" else ""
            why = f"the worker was killed by {name}{hint}"
        else:
            why = f"the worker exited with code {code}"
        tail = self.handle.stderr_tail(3)
        return "failed", why + (f"; its last words: {tail}" if tail else "")

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.recorder.status, 1)
