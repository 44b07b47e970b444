"""One run in its own process, its events streamed as JSON lines; and the parent's handle on it.

Why a process per run: TensorFlow fixes the logical-device split at its first op and clashes
on a second strategy with another replica count, so each run needs a fresh runtime; the
parent (CLI or TUI) never imports TensorFlow; a crash or out-of-memory kills the worker, not
the app. Cancel is graceful first (SIGINT: stop after this step), then firm (kill).

Child side: ``python -m tpulab.worker '{"workload": "conv", "params": {...}}'`` or ``--probe``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator

from .workloads import get_workload
from .workloads.base import CancelToken, Event, Params

EXIT_CANCELLED = 130


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The worker must import this very tpulab, wherever the parent found it.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else root
    return env


class RunHandle:
    """A running worker: iterate `events()`, `cancel()` to stop it after its current step."""

    def __init__(self, args: list[str]) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tpulab.worker", *args], stdout=subprocess.PIPE, stderr=self._stderr,
            stdin=subprocess.DEVNULL, env=child_env(), start_new_session=True)
        self.cancel_requested = False

    @classmethod
    def start(cls, workload: str, params: Params) -> "RunHandle":
        return cls([json.dumps({"workload": workload, "params": params})])

    def events(self) -> Iterator[Event]:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                yield {"event": "log", "text": line}
        self.proc.wait()

    def cancel(self) -> None:
        """First call: ask for a stop after the current step. A second call kills the worker."""
        if self.proc.poll() is not None:
            return
        if self.cancel_requested:
            self.kill()
        else:
            self.cancel_requested = True
            self.proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def stderr_tail(self, lines: int = 15) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        return "\n".join(text.strip().splitlines()[-lines:])


def probe_tensorflow(timeout_s: float = 120.0) -> dict[str, Any]:
    """TensorFlow's view of the machine, from a worker; {'error': ...} when it could not be had.

    A TPU held by another process can make initialisation block: the probe is killed after
    `timeout_s` rather than hang the caller.
    """
    handle = RunHandle(["--probe"])
    watchdog = threading.Timer(timeout_s, handle.kill)
    watchdog.start()
    try:
        for event in handle.events():
            if event.get("event") == "probe":
                return event["tensorflow"]
    finally:
        watchdog.cancel()
        handle.kill()
    if handle.returncode == -signal.SIGKILL:  # only the watchdog kills a probe that is still talking
        return {"error": f"TensorFlow did not answer within {timeout_s:.0f} s (is another process holding the TPU?)"}
    return {"error": handle.stderr_tail(5) or "the TensorFlow probe produced nothing"}


# --- child side ----------------------------------------------------------------------------
def _event_writer():
    """Events go to the real stdout; anything else printed (TensorFlow, Keras) goes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def emit(event: Event) -> None:
        event.setdefault("t", time.time())
        out.write(json.dumps(event) + "\n")
        out.flush()

    return emit


def main(argv: list[str]) -> int:
    emit = _event_writer()
    if argv[:1] == ["--probe"]:
        from .runtime.strategy import probe
        emit({"event": "probe", "tensorflow": probe()})
        return 0
    spec = json.loads(argv[0])
    cancel = CancelToken()
    signal.signal(signal.SIGINT, lambda *_: cancel.set())
    try:
        get_workload(spec["workload"]).run(spec["params"], emit, cancel)
    except Exception as e:  # noqa: BLE001 - reported as the run's failure, with its traceback on stderr
        traceback.print_exc()
        emit({"event": "failed", "error": _one_line(e), "type": type(e).__name__})
        return 1
    if cancel.is_set():
        emit({"event": "cancelled"})
        return EXIT_CANCELLED
    emit({"event": "finished"})
    return 0


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    first = next((line for line in text.splitlines() if line.strip()), "") if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
