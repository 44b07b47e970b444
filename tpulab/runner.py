"""One run from the parent's side: choose its backend, start the worker, feed its events to the record.

Shared by the headless CLI and the TUI, so both record and judge a run the same way.
"""

from __future__ import annotations

import signal
from typing import Iterator

from .backends import choose
from .events import Event
from .record import RunRecorder
from .runtime.detect import RuntimeReport
from .worker import EXIT_CANCELLED, RunHandle
from .workloads import get_workload
from .workloads.base import Params

EXIT_CODES = {"finished": 0, "failed": 1, "cancelled": EXIT_CANCELLED}


class Run:
    def __init__(self, workload: str, params: Params, runtime: RuntimeReport, sweep: str | None = None) -> None:
        """Raises `BackendError` (naming the install command) when the backend cannot run here."""
        self.workload = get_workload(workload)
        self.params = params
        self.device = "cpu"
        if "device" in params:
            self.device = runtime.default_device if params["device"] == "auto" else params["device"]
        self.backend, self.backend_reason = choose(params.get("backend", "auto"), runtime, params.get("device", "auto"))
        self.recorder = RunRecorder(self.workload, params, runtime, self.backend, self.backend_reason, sweep)
        self.handle: RunHandle | None = None

    def events(self) -> Iterator[Event]:
        """Start the worker and yield its events, each already fed to the record."""
        self.handle = RunHandle.start(self.workload.name, self.params, self.backend, self.device)
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
