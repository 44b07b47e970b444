"""One run in its own process, its events streamed as JSON lines; and the parent's handle on it.

Why a process per run: TensorFlow fixes the logical-device split at its first op and clashes
on a second strategy with another replica count, Keras fixes its backend at import and JAX its
device count at start-up, so each run needs a fresh runtime; the parent (CLI or TUI) never
imports a framework; a crash or out-of-memory kills the worker, not the app. Cancel is graceful
first (SIGINT: stop after this step), then firm (kill).

Child side: ``python -m tpulab.engine.worker JOB`` (`RunJob.to_json`: ``{"workload": "conv", "backend": "jax",
"params": {...}, "trace_folder": ..., "knows": {...}}``) or ``--probe BACKEND``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tpulab import backends
from tpulab.backends import Cluster, Runtime
from tpulab.base.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, one_line
from tpulab.base.events import Allocated, Cancelled, Compiled, Event, Failed, Finished, Started, Step, parse_line
from tpulab.base.hidden import UNUSED_BY_RUNS, hidden
from tpulab.engine.telemetry import RunSampling
from tpulab.engine.telemetry import enabled as telemetry_enabled
from tpulab.machine.detect import detect
from tpulab.workloads import get_workload
from tpulab.workloads.running import CancelToken, Handed, Sink, hand

if TYPE_CHECKING:
    from tpulab.engine.job import RunJob

FATAL_LINE = re.compile(r"^F\d{4} [\d:.]+\s+\d+ [^\]]+\] (.+)$", re.M)  # absl's "F1130 09:19:44.06 27587 x.h:80] ..."
# What every worker says, never why it died: absl's information and warning lines (TensorFlow's oneDNN notice), and
# the error lines of a CUDA build on a machine without a GPU (cuInit failing, a cuDNN/cuFFT/cuBLAS factory registered twice)
NOTICE_LINE = re.compile(r"^[IW]\d{4} [\d:.]+\s+\d+ [^\]]+\] |^WARNING: All log messages before absl"
                         r"|^E\d{4} [\d:.]+\s+\d+ [^\]]+\] (failed call to cuInit|Unable to register cu)")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env.setdefault("PYTHONUNBUFFERED", "1")
    # The worker must import this very tpulab, wherever the parent found it: the folder holding the package.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else root
    return env


def allocator_peak(stats: list[dict[str, Any]] | None) -> Allocated | None:
    """The framework allocator's peaks on the fullest device (`Runtime.memory_stats`: a CUDA or TPU allocator's
    keys), kept in the record; None where it counts none (a CPU)."""
    read = [(i, st) for i, st in enumerate(stats or []) if st.get("peak_bytes_in_use") is not None]
    if not read:
        return None
    i, st = max(read, key=lambda found: found[1]["peak_bytes_in_use"])
    return Allocated(device=i, allocated=float(st["peak_bytes_in_use"]), reserved=st.get("peak_bytes_reserved"),
                     limit=st.get("bytes_limit"))


def worker_env(backend: str, device: str, replicas: int) -> dict[str, str]:
    """What a worker's environment holds before its framework is imported: also what a standby must match."""
    return backends.get(backend).worker_env(device, replicas, os.environ)


def free_port() -> int:
    """A port no one listens on now: process 0's, for a run over several processes to join at."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RunHandle:
    """A running worker: iterate `events()`, `cancel()` to stop it after its current step."""

    def __init__(self, args: list[str], env: dict[str, str], standby: bool = False) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tpulab.engine.worker", *args], stdout=subprocess.PIPE, stderr=self._stderr,
            stdin=subprocess.PIPE if standby else subprocess.DEVNULL, env=child_env(env), start_new_session=True)
        self.env = env
        self.cancel_requested = False
        self.ready = threading.Event()  # a standby worker has imported its framework
        self._waiting: threading.Thread | None = None
        if standby:
            self._waiting = threading.Thread(target=self._await_ready, daemon=True)
            self._waiting.start()

    @classmethod
    def start(cls, job: RunJob, cluster: Cluster | None = None, local_devices: int | None = None) -> RunHandle:
        """A worker for one run (or one process of it), on the devices of the kind its spec names."""
        spec = job.spec
        env = worker_env(spec.backend, spec.device, local_devices or spec.workload.replicas(spec.params))
        return cls([json.dumps(job.to_json())], {**env, **(cluster.env() if cluster else {})})

    @classmethod
    def standby(cls, backend: str, device: str, replicas: int) -> RunHandle:
        """A worker that imports its framework now (no device opened) and waits, idle, to be handed a run."""
        return cls(["--standby", backend], worker_env(backend, device, replicas), standby=True)

    def _await_ready(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline():
            self.ready.set()

    def hand(self, job: RunJob) -> RunHandle:
        """Give a standby worker its run: it starts at once, its framework already imported."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(job.to_json()) + "\n").encode())
        self.proc.stdin.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> Iterator[Event]:
        assert self.proc.stdout is not None
        if self._waiting is not None:
            self._waiting.join()  # a standby's first line is its ready signal, read by that thread
        for raw in self.proc.stdout:
            event = parse_line(raw.decode(errors="replace"))
            if event is not None:
                yield event
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

    lost: str | None = None  # a worker here ends by its own exit: no launcher lost it (`ray_processes.Follower`)

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stderr_tail(self, lines: int = 15) -> str:
        return "\n".join(self.stderr_text().strip().splitlines()[-lines:])

    def last_words(self) -> str:
        """What a dead worker said last: a fatal log line's message (a native abort prints a stack
        after it, which says nothing to a user), else the last lines it wrote that are not a
        framework's routine notices ('' when it said nothing else)."""
        text = self.stderr_text()
        fatal = FATAL_LINE.findall(text)
        if fatal:
            status = re.search(r"absl::Status: ([^\n]+)", text)
            return fatal[-1].split(". ")[0].strip() + (f" ({status.group(1).strip()})" if status else "")
        said = [line for line in text.strip().splitlines() if line.strip() and not NOTICE_LINE.match(line)]
        return "\n".join(said[-3:])


def probe(backend: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """A framework's view of the machine, from a worker; {'error': ...} when it could not be had.

    A TPU held by another process can make initialisation block: the probe is killed after
    `timeout_s` rather than hang the caller.
    """
    info = backends.get(backend)
    title = info.title
    handle = RunHandle(["--probe", backend], info.worker_env("auto", 1, os.environ))
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        handle.kill()

    watchdog = threading.Timer(timeout_s, expire)
    watchdog.start()
    try:
        assert handle.proc.stdout is not None
        for raw in handle.proc.stdout:
            try:
                return dict(json.loads(raw)["probe"])
            except (ValueError, KeyError, TypeError):
                continue
    finally:
        watchdog.cancel()
        handle.kill()
        handle.proc.wait()
    if timed_out.is_set():
        return {"error": f"{title} did not answer within {timeout_s:.0f} s (is another process holding the TPU?)"}
    tail = handle.stderr_tail(1)
    return {"error": tail or f"the {title} probe ended with code {handle.returncode} and said nothing"}


def probe_installed(packages: dict[str, str | None],
                    probing: Callable[[str], None] = lambda title: None) -> dict[str, dict[str, Any]]:
    """Every installed framework's view, probed one after another (only one may hold a TPU); `probing` is
    told each framework's title as its probe starts (each takes seconds: a front end says so)."""
    views = {}
    for name, info in backends.registry().items():
        if info.installed(packages) and info.framework:
            probing(info.title)
            views[name] = probe(name)
    return views


# --- child side ----------------------------------------------------------------------------
def _stdout_writer() -> Any:
    """Events go to the real stdout; anything else printed (TensorFlow, Keras) goes to stderr."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    return out


def main(argv: list[str]) -> int:
    out = _stdout_writer()
    if argv[:1] == ["--standby"]:  # import the framework now, then wait (idle) for the run on stdin
        try:
            backends.get(argv[1]).load()
            detect()  # what a run reads first (package metadata, plugins), read once and cached now
        except Exception:  # noqa: BLE001 - it fails again, and is reported, when a run is handed to it
            traceback.print_exc()
        out.write(json.dumps({"standby": argv[1]}) + "\n")
        line = sys.stdin.readline()
        if not line.strip():
            return 0  # nobody handed it a run: the lab closed or chose another backend
        argv = [line]
    if argv[:1] == ["--probe"]:
        try:
            view = backends.get(argv[1]).load().probe()
        except Exception as e:  # noqa: BLE001 - the probe's answer is then the reason, in one line
            traceback.print_exc()
            view = {"error": one_line(e)}
        out.write(json.dumps({"probe": view}) + "\n")
        return 0

    spec = json.loads(argv[0])
    lock = threading.Lock()  # the telemetry sampler writes from its own thread

    def emit(event: Event) -> None:
        if event.t is None:
            event.t = time.time()
        if isinstance(event, Started):
            event.backend = spec["backend"]
        with lock:
            out.write(json.dumps(event.to_json()) + "\n")
            out.flush()

    cluster = Cluster.from_env(os.environ)
    requested = CancelToken()  # Ctrl+C or the lab's x reached this process
    signal.signal(signal.SIGINT, lambda *_: requested.set())
    # On one process a request is the decision; across processes they decide together (see `shared`).
    cancel = requested if cluster is None else CancelToken()
    sampling = RunSampling(emit, cluster.process_id if cluster else 0) if telemetry_enabled() else None
    try:
        info = backends.get(spec["backend"])
        runtime = info.load()  # first: its framework, and none that would compete with it
        sink: Sink = marked(emit, runtime)
        if cluster is not None:
            runtime.join(cluster)
            sink = marked(shared(emit, runtime, requested, cancel, leader=cluster.process_id == 0), runtime)
        if sampling is not None:
            sampling.memory_stats = runtime.memory_stats  # where only the backend can read them
            sink = sampling.wrap(sink)
        workload = get_workload(spec["workload"])
        load = workload.runner(info)
        if load is None:
            raise backends.BackendError(f"{workload.name} does not run on --backend {info.name}")
        with hidden(*UNUSED_BY_RUNS):  # a runner's module may be what imports Keras (on JAX, on PyTorch)
            run = load()
        hand(handed(spec, cluster))
        run(workload, spec["params"], sink, cancel, runtime)
        peak = allocator_peak(runtime.memory_stats())
        if peak is not None:
            sink(peak)
    except Exception as e:  # noqa: BLE001 - reported as the run's failure, with its traceback on stderr
        traceback.print_exc()
        if sampling is not None:
            sampling.stop()
        where = f"process {cluster.process_id}: " if cluster is not None and cluster.process_id else ""
        said = str(e) if getattr(e, "whole", False) else one_line(e)  # the user's traceback keeps its lines
        emit(Failed(error=where + said, type=type(e).__name__))
        return EXIT_FAILED
    if sampling is not None:
        sampling.stop()
    emit(Cancelled() if cancel.is_set() else Finished())
    if cluster is not None:
        runtime.leave()
    return EXIT_CANCELLED if cancel.is_set() else EXIT_OK


def handed(job: dict[str, Any], cluster: Cluster | None) -> Handed:
    """What the runner reads beside its parameters (`RunJob.to_json`'s own part): each process of a run over
    several traces into a folder of its own."""
    folder = job.get("trace_folder")
    if folder and cluster is not None:
        folder = str(Path(folder) / f"process-{cluster.process_id}")
    return Handed(folder, dict(job.get("knows") or {}))


def marked(emit: Sink, runtime: Runtime) -> Sink:
    """The first call says whether its programs were compiled or loaded from the persistent cache."""
    def sink(event: Event) -> None:
        if isinstance(event, Compiled):
            event.cache_hit = runtime.cache_hit()
        emit(event)

    return sink


def shared(emit: Sink, backend: Runtime, requested: CancelToken, agreed: CancelToken,
           leader: bool) -> Sink:
    """A run over several processes: every host's time for each step, one decision to stop, one stream.

    Each timed step gathers [seconds, cancel requested] from every process (all processes time the
    same steps, in lockstep), so the record gets per-host times, and `agreed` is set on every process
    at the same step when any process was asked to stop: the workloads read only `agreed`, so no
    process leaves the others waiting in a collective. A step took as long as its slowest host.
    Only process 0 writes events.
    """
    def sink(event: Event) -> None:
        if isinstance(event, (Compiled, Step)):
            table = backend.gather([event.seconds, 1.0 if requested.is_set() else 0.0])
            if any(row[1] for row in table):
                agreed.set()
            slowest = max(row[0] for row in table)
            if isinstance(event, Step):
                event.host_seconds = [row[0] for row in table]
                if event.examples_per_s:
                    event.examples_per_s *= event.seconds / slowest
            event.seconds = slowest
        if leader:
            emit(event)

    return sink


def leave_now(code: int) -> None:
    """End the process once everything is said, skipping the interpreter's teardown: a framework's
    (TensorFlow's, PyTorch's thread pools) takes 0.7-1.5 s that the caller would wait for, and that
    would overlap the next run of a sweep. Nothing is left to write by then: each event was flushed
    as it was said, a trace was read back, a multi-host run left its cluster."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave_now(main(sys.argv[1:]))
