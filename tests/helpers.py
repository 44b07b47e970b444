"""What several test modules build: fake machine trees, IDX files, records, the real command."""

from __future__ import annotations

import dataclasses
import fcntl
import gzip
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, RenderableType
from textual import events
from textual.widgets import DataTable, Input, Static

from tpulab.base.events import Compiled, Device, Event, Finished, Profile, Profiled, RunRecord, Sample, Started, Step
from tpulab.engine.job import RunJob
from tpulab.engine.record import RunRecorder
from tpulab.engine.runner import Run
from tpulab.engine.spec import RunSpec
from tpulab.engine.sweep import Grid, Point, Sweep
from tpulab.lab.panes.run import RunPane
from tpulab.lab.panes.sweep import SweepPane
from tpulab.lab.widgets.charts import SeriesPlot
from tpulab.lab.widgets.param_form import ParamForm
from tpulab.machine.detect import CpuInfo, RuntimeReport, detect
from tpulab.workloads import registry
from tpulab.workloads.base import Limits
from tpulab.workloads.data import FILES

ROOT = Path(__file__).resolve().parent.parent

CPUINFO = "".join(
    f"processor\t: {i}\nmodel name\t: AMD EPYC 7B12\ncpu MHz\t\t: 2250.000\n"
    "flags\t\t: fpu sse4_2 avx avx2 fma\n\n" for i in range(4))
TF = {"tensorflow": "2.21.0", "keras": "3.15.1"}


def run_cli(*args: str, timeout: float = 300, env: dict | None = None,
            input: str | None = None) -> subprocess.CompletedProcess:
    """The real command in a child process, as a user would run it, in a wide terminal (a variable given as None
    in `env` is left out)."""
    env = {k: v for k, v in {**os.environ, "COLUMNS": "200", **(env or {})}.items() if v is not None}
    return subprocess.run([sys.executable, "-m", "tpulab", *args], capture_output=True, text=True, input=input,
                          timeout=timeout, cwd=ROOT, env=env)


def rest_of(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """What a process still writes until it ends (stdout, stderr), after its stdout was read line by line:
    `communicate` would read the pipe itself and lose what the line iterator had already buffered."""
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read() if proc.stderr else ""))
    reader.start()
    try:
        out = proc.stdout.read() if proc.stdout else ""
        proc.wait()
        reader.join()
    finally:
        killer.cancel()
    return out, err[0] if err else ""


def json_events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


# --- fake machines ---------------------------------------------------------------------------
def tree(root: Path, files: dict[str, str] | None = None, dirs: tuple[str, ...] = ()) -> Path:
    """A /proc, /sys and /dev of a 4-core AVX2 machine, plus `files` and `dirs`."""
    base = {"proc/cpuinfo": CPUINFO, "proc/meminfo": "MemTotal:       16384000 kB\n"}
    for rel, text in {**base, **(files or {})}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in dirs:
        (root / rel).mkdir(parents=True, exist_ok=True)
    return root


def pci(address: str, vendor: str, device: str, cls: str) -> dict[str, str]:
    d = f"sys/bus/pci/devices/{address}"
    return {f"{d}/vendor": vendor + "\n", f"{d}/device": device + "\n", f"{d}/class": cls + "\n"}


def gpu_tree(root: Path) -> Path:
    return tree(root, {
        **pci("0000:00:04.0", "0x10de", "0x1eb8", "0x030200"),
        "proc/driver/nvidia/gpus/0000:00:04.0/information": "Model: \t\t Tesla T4\nIRQ: 34\n",
        "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n",
    })


def v5e_tree(root: Path) -> Path:
    return tree(root, pci("0000:00:05.0", "0x1ae0", "0x0063", "0x120000"), dirs=("dev/vfio/0",))


def caches(l3: str, shared: dict[int, str] | None = None) -> dict[str, str]:
    """sysfs's caches of the CPUs in `shared` (default: CPU 0, its L3 shared by CPUs 0-3): a 48K L1
    data cache, a 2048K L2 and an L3 of `l3` ('32768K', sysfs's form) shared by the CPUs listed."""
    out = {}
    for cpu, group in (shared or {0: "0-3"}).items():
        for i, (level, kind, size, sharing) in enumerate(((1, "Data", "48K", str(cpu)), (2, "Unified", "2048K", str(cpu)),
                                                          (3, "Unified", l3, group))):
            d = f"sys/devices/system/cpu/cpu{cpu}/cache/index{i}"
            out |= {f"{d}/level": f"{level}\n", f"{d}/type": f"{kind}\n", f"{d}/size": f"{size}\n",
                    f"{d}/shared_cpu_list": f"{sharing}\n"}
    return out


def cpu_only(root: Path, packages: dict[str, str | None] | None = None, files: dict[str, str] | None = None) -> RuntimeReport:
    """A machine with no accelerator, whatever this host has (plus `files` in its fake tree)."""
    return detect(tree(root, files), {}, {**TF, **(packages or {})})


# --- data ------------------------------------------------------------------------------------
def write_idx(path: Path, array: np.ndarray, *, truncate: int = 0) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    data = header + array.astype(np.uint8).tobytes()
    with gzip.open(path, "wb") as f:
        f.write(data[:len(data) - truncate] if truncate else data)


def write_set(folder: Path, n_train: int = 12, n_test: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """The four Fashion-MNIST files, tiny: random images whose label is their brightness decile."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"x_train": rng.integers(0, 256, (n_train, 28, 28)), "y_train": rng.integers(0, 10, n_train),
              "x_test": rng.integers(0, 256, (n_test, 28, 28)), "y_test": rng.integers(0, 10, n_test)}
    for key, name in FILES.items():
        write_idx(folder / name, arrays[key])
    return arrays


# --- records ---------------------------------------------------------------------------------
EIGHT_CPUS = Limits({"cpu": 8, "gpu": 0, "tpu": 0}, "cpu")  # what a workload resolves against


def recorder(workload: str, params: dict, flops: float | None, model: dict | None = None) -> RunRecorder:
    """A recorder of a JAX run on this host's CPU, told it started."""
    w = registry()[workload]
    rec = RunRecorder(RunSpec(w, {**w.defaults(), **params, "device": "cpu"}, "jax", "asked for", "cpu"), detect())
    rec.feed(Started(workload=workload, device=Device(kind="cpu", name="test CPU"), dtype="float32",
                     flops_per_step=flops, steps_total=6, per_replica_batch=params["batch_size"], model=model))
    return rec


# A 2-core AVX2 CPU at 2 GHz: what records built for a test ran on, whatever this host is (a record's peak
# fraction is set against its machine's spec, and a snapshot must not change with the CPU that draws it)
FIXED_CPU = CpuInfo(model="test CPU", logical_cores=2, features=["sse4_2", "avx", "avx2", "fma"],
                   memory_bytes=16 << 30, mhz=2000.0, max_mhz=None, llc_bytes=32 << 20)


def fixed_machine() -> RuntimeReport:
    """FIXED_CPU with no accelerator and TensorFlow installed."""
    return dataclasses.replace(detect(Path("/nonexistent"), {}, TF), cpu=FIXED_CPU)


def make_record(shards: int = 1, median: float = 1.0, batch: int = 8, status: str = "finished",
                flops: float = 1e9, backend: str = "tensorflow", workload: str = "conv",
                report: RuntimeReport | None = None, profile: Profile | None = None,
                steps: list[float] | None = None) -> RunRecord:
    """A record built the way every run builds it: events fed to the recorder (with `profile`, the worker's
    op table of its traced steps), on `report`'s machine (by default `fixed_machine()`); its steady steps four
    about `median`, or `steps`' times."""
    w = registry()[workload]
    params = {**w.defaults(), "batch_size": batch, "shards": shards, "device": "cpu", "backend": backend}
    rec = RunRecorder(RunSpec(w, params, backend, "asked for", "cpu"), report or fixed_machine())
    events: list[Event] = [
        Started(workload=workload, device=Device(kind="cpu", name="test CPU", replicas=shards), dtype="float32",
                flops_per_step=flops, steps_total=5, per_replica_batch=batch // shards, backend=backend),
        Compiled(seconds=2.0)]
    times = steps or (median * 0.9, median, median * 1.1, median)
    events += [Step(step=i, seconds=s) for i, s in enumerate(times, 2)]
    events += [Profiled(profile=profile)] if profile is not None else []
    for e in events:
        rec.feed(e)
    rec.finish(status)
    return rec.record()




class ReplayedWorker:
    """A worker that gives fixed events: what no real one can (the same timings twice, for a snapshot)."""

    cancel_requested = False
    returncode = 0
    alive = False

    def __init__(self, events: list[Event]) -> None:
        self.replayed = events

    def events(self) -> list[Event]:
        return self.replayed

    def cancel(self) -> None:
        pass

    def kill(self) -> None:
        pass


class HeldWorker(ReplayedWorker):
    """A replayed worker that, its events given, holds until it is cancelled: a run in flight for as long as a test
    needs one, on no CPU."""

    def __init__(self, events: list[Event]) -> None:
        super().__init__(events)
        self.released = threading.Event()

    def events(self):  # type: ignore[override]
        yield from self.replayed
        self.released.wait(120)

    def cancel(self) -> None:
        self.cancel_requested = True
        self.released.set()

    def kill(self) -> None:
        self.released.set()  # killed (the lab closing kills its run): it says no more, at once


class PacedWorker(ReplayedWorker):
    """A replayed worker that gives each event at its time, as a worker streams them: a run in flight for as long
    as its events last, on no CPU of its own."""

    def events(self):  # type: ignore[override]
        start, t0 = time.monotonic(), self.replayed[0].t
        for event in self.replayed:
            time.sleep(max(0.0, event.t - t0 - (time.monotonic() - start)))
            if self.cancel_requested:
                return
            yield event

    def cancel(self) -> None:
        self.cancel_requested = True

    kill = cancel


class PacedHeldWorker(HeldWorker):
    """A replayed worker that gives each event at its time, then holds until cancelled: a run in flight as a worker
    streams it."""

    def events(self):  # type: ignore[override]
        yield from PacedWorker.events(self)  # type: ignore[arg-type]
        self.released.wait(120)


class Replay(Run):
    """A run of `workload` whose worker is replayed: every event fixed, its id and times too; with `held`, the
    worker holds after them until cancelled; with `paced`, it gives each event at its time (both: then holds)."""

    def __init__(self, workload: str, report: RuntimeReport, events: list[Event], run_id: str = "5eed" * 8,
                 held: bool = False, paced: bool = False) -> None:
        w = registry()[workload]
        super().__init__(RunJob(RunSpec(w, {**w.defaults(), "device": "cpu", "backend": "jax"}, "jax", "you chose jax",
                                        "cpu")), report)
        self.recorder.id, self.recorder.started_at = run_id, "2026-03-01T09:30:00"
        self.replayed = events
        self.held, self.paced = held, paced

    @staticmethod
    def control() -> float:
        return 0.002  # the control probe, fixed as every event is

    def _start(self, first: bool = True) -> None:
        worker = (PacedHeldWorker if self.paced else HeldWorker) if self.held else \
            PacedWorker if self.paced else ReplayedWorker
        self.handles = [worker(self.replayed)]  # type: ignore[list-item]


def conv_events(steps: int = 12, t0: float = 1.77e9, step_s: float = 0.002, sample_every: int = 3) -> list[Event]:
    """A small conv run as a worker tells it: started, the first call (step 0), a warm-up step and steady ones of
    about `step_s`, telemetry every `sample_every` steps, finished."""
    events: list[Event] = [
        Started(t=t0, workload="conv", device=Device(kind="cpu", name="test CPU", replicas=1), dtype="float32",
                flops_per_step=4.9e6, steps_total=steps + 1, per_replica_batch=8, backend="jax"),
        Sample(t=t0, phase="compile", mark="start", cpu=None, cores=[], process=None, rss=8.0e8, mem_used=4e9,
               mem_total=2.4e10),
        Compiled(t=t0 + 0.5, seconds=0.5)]
    t = t0 + 0.5
    for i in range(steps):
        seconds = step_s * (1.5 if i % 5 == 0 else 1.0)
        t += seconds
        events.append(Step(t=t, step=i + 1, seconds=seconds, warmup=i == 0, examples_per_s=8 / seconds))
        if i % sample_every == sample_every - 1:
            events.append(Sample(t=t, phase="steady", cpu=50.0 + i, cores=[90.0 + i / 2, 10.0 + i], process=99.0,
                                 rss=8.5e8 + i * 1e6, mem_used=4.1e9, mem_total=2.4e10))
    events.append(Sample(t=t, phase="steady", mark="end", cpu=60.0, cores=[97.0, 23.0], process=98.0, rss=8.6e8,
                         mem_used=4.1e9, mem_total=2.4e10))
    return [*events, Finished(t=t)]


def cancel_after(run: Run, steps: int = 3) -> RunRecord:
    """Stream a run and cancel it once `steps` timed steps arrived, as Ctrl+C or the lab's x would."""
    seen = 0
    for event in run.events():
        if isinstance(event, Step):
            seen += 1
            if seen == steps:
                run.cancel()
    return run.recorder.record()


def copies(record: RunRecord, n: int, backends: tuple[str, ...] = ("tensorflow",)) -> list[dict]:
    """`n` copies of a record as an export holds them: new ids, one a minute back from its start, the
    backend taken in turn from `backends` (a large history made fast, for the store's import)."""
    import uuid
    from datetime import datetime, timedelta

    base = record.to_json()
    start = datetime.fromisoformat(record.started_at)
    return [{**base, "id": uuid.uuid4().hex, "backend": backends[i % len(backends)],
             "started_at": (start - timedelta(minutes=i)).isoformat(timespec="seconds")} for i in range(n)]


CALIBRATION_ITERATIONS = 40  # the timed steps of `calibration`'s runs, unless its flags say others


def tpulab(*args: str, db: Path) -> subprocess.CompletedProcess[str]:
    """The real command on the store at `db`, which must succeed."""
    out = subprocess.run([sys.executable, "-m", "tpulab", *args, "--db", str(db)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    return out


def calibration(db: Path, *flags: str) -> RunRecord:
    """A run of the calibration workload on JAX (the framework that starts fastest here), kept at `db`."""
    out = tpulab("run", "calibration", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", "--iterations",
                 str(CALIBRATION_ITERATIONS), *flags, db=db)
    last = json.loads(out.stdout.splitlines()[-1])
    last.pop("event")
    return RunRecord.from_json(last)


# --- what is shown ---------------------------------------------------------------------------
def text(shown: Static | RenderableType, width: int = 200) -> str:
    """A Rich renderable, or what a Static shows, as plain text `width` columns wide (by default
    wide enough that no line wraps)."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(shown.content if isinstance(shown, Static) else shown)
    return console.export_text()


# --- the lab under pilot ---------------------------------------------------------------------
SIZE = (120, 40)


async def type_into(pilot, app, name: str, value: str) -> None:
    field = app.query_one(f"#param-{name}", Input)
    field.focus()
    field.clear()
    await pilot.press(*value)


async def paste_into(pilot, app, name: str, value: str) -> None:
    """`value` pasted into a field, as a terminal sends a paste: one event (typed, a path is a key and a
    validation per character)."""
    field = app.query_one(f"#param-{name}", Input)
    field.focus()
    field.clear()
    app.post_message(events.Paste(value))
    await pilot.pause()


def notes(app) -> list[str]:
    """What the app has notified, oldest first."""
    return [n.message for n in app._notifications]


async def form_open(pilot):
    """The Workloads tab's form, once its parameters are read."""
    from tpulab.lab.widgets.param_form import ParamForm

    await pilot.press("2")
    await wait_for(pilot, lambda: bool(pilot.app.query(ParamForm)) and pilot.app.query_one(ParamForm).params, 5)
    return pilot.app.query_one(ParamForm)


async def wait_for(pilot, condition, timeout: float = 120.0) -> None:
    """Until `condition()` holds; a widget it asks for that is not there (yet) is "not yet": a form being replaced
    is, for a moment, removed and not yet mounted (under load, a wait met that moment and raised)."""
    from textual.css.query import NoMatches

    def holds() -> bool:
        try:
            return bool(condition())
        except NoMatches:
            return False

    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.1)


def chart(app, title: str) -> SeriesPlot:
    plot = app.query_one(RunPane).chart(title)
    assert plot is not None, title
    return plot


async def run_tiny_conv(pilot, app, shards: str = "1") -> RunRecord:
    await pilot.press("2")
    for name, value in (("batch_size", "8"), ("image_size", "32"), ("filters", "16"), ("iterations", "4"),
                        ("warmup", "1"), ("shards", shards)):
        await type_into(pilot, app, name, value)
    await pilot.pause()
    assert app.query_one(ParamForm).params is not None
    finished = len(app.records)
    await pilot.press("ctrl+r")
    await wait_for(pilot, lambda: len(app.records) > finished)
    return app.records[0]


class ReplayedSweep(Sweep):
    """A sweep whose points' runs are the records `record_of(point)` makes (through the real recorder, or
    by hand): no worker starts."""

    def __init__(self, grid: Grid, report: RuntimeReport, record_of: Callable[[Point], RunRecord]) -> None:
        super().__init__(grid, report)
        self.record_of = record_of

    def _run_point(self, point: Point):
        yield from ()
        return self.record_of(point)


async def sweep_tab(pilot, sweep: Sweep) -> SweepPane:
    """The lab's Sweep tab, once `sweep` (a `ReplayedSweep`) ran there to its end."""
    await pilot.press("5")
    await wait_for(pilot, lambda: bool(pilot.app.query(SweepPane)), 5)
    pane = pilot.app.query_one(SweepPane)
    pane.start(sweep)
    await wait_for(pilot, lambda: pane.sweep is not None and pane.sweep.status == "finished", 10)
    await pilot.pause()
    return pane


async def results_tab(pilot, count: int) -> DataTable:
    """The lab's Results tab, once its table lists `count` runs."""
    await pilot.press("4")
    await wait_for(pilot, lambda: bool(pilot.app.query("#results-table"))
                   and pilot.app.query_one("#results-table", DataTable).row_count == count, 10)
    await pilot.pause()
    return pilot.app.query_one("#results-table", DataTable)


def decode_events(prefill_s: float, token_s: list[float], copy_s: float | None = None, batch: int = 2,
                  name: str = "test CPU") -> list[Event]:
    """A decode run's events as its runner says them: (a copy timed first, where no ceiling is kept,) the
    compiles, the prefill that makes token 0, then one step per later token (index from 1), and the end."""
    from tpulab.workloads.decode.figures import PHASE_DECODE, PHASE_PREFILL
    from tpulab.workloads.shared.kernels import Kernel

    copy = Kernel("copy", "float32", 64)
    events: list[Event] = [Started(workload="decode", device=Device(kind="cpu", name=name), dtype="float32",
                                   flops_per_step=1e6, steps_total=2 + len(token_s) + 1, per_replica_batch=batch)]
    if copy_s is not None:
        events += [Step(step=i, seconds=copy_s, phase="bandwidth", kernel=copy.to_json()) for i in range(3)]
    events += [Compiled(seconds=1.0, phase=PHASE_PREFILL), Compiled(seconds=0.5, phase=PHASE_DECODE),
               Step(step=0, seconds=prefill_s, phase=PHASE_PREFILL, examples_per_s=batch / prefill_s)]
    events += [Step(step=i, seconds=s, phase=PHASE_DECODE, examples_per_s=batch / s) for i, s in enumerate(token_s, 1)]
    return [*events, Finished()]


def in_a_terminal(*args: str, env: dict[str, str], size: tuple[int, int] = (80, 24)) -> tuple[int, str]:
    """`python -m tpulab ARGS` on a pseudo-terminal `size` wide and high (a user's xterm): its exit code, and all it
    wrote (the terminal's codes too)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=ROOT, env=env, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # still running past the deadline: the test fails on its exit code
            proc.kill()
            proc.wait()
    return proc.returncode, b"".join(chunks).decode("utf-8", errors="replace")


# A sitecustomize that hides distributions' metadata from a child Python (HIDDEN_DISTRIBUTIONS, comma-separated):
# a backend that is "not installed" there, faked at the edge.
HIDING = """import importlib.metadata as m, os
hidden, real = set(os.environ["HIDDEN_DISTRIBUTIONS"].split(",")), m.version
def version(name):
    if name in hidden:
        raise m.PackageNotFoundError(name)
    return real(name)
m.version = version
"""


def one_run_over_two_hosts(result: dict) -> None:
    """A run joined over two processes of 4 shards, as its JSON result says: one device of two hosts, each timed
    step as long as its slowest host's, and each host's own telemetry."""
    assert result["device"]["hosts"] == 2 and result["device"]["replicas"] == 4 and result["device"]["machines"] == 1
    steady = [s for s in result["steps"] if not s["warmup"]]
    assert steady and all(len(s["host_seconds"]) == 2 and s["seconds"] == max(s["host_seconds"]) for s in steady)
    assert len(result["summary"]["host_seconds"]) == 2
    assert {s["host"] for s in result["telemetry"]} == {0, 1}  # each process sampled its own host, kept per host
    assert len(result["summary"]["telemetry"]["host_cpu_mean"]) == 2


# Loaded at start-up by every Python process whose path holds it; in a worker (`python -m tpulab.engine.worker`),
# its end (`os._exit`, past the interpreter's teardown; or a normal exit) first writes which TensorFlow modules
# it imported, and whether it loaded Keras, JAX and matplotlib: on a TPU the first framework to initialise it wins,
# so a JAX worker must leave TensorFlow alone; a run of an nn.Module needs no Keras (seconds of imports); a run
# draws nothing (tpulab.base.hidden).
WATCH = """
import atexit, json, os, sys

if sys.orig_argv[1:3] == ["-m", "tpulab.engine.worker"]:
    _exit = os._exit

    def _report(code=0):
        imported = sorted(m for m in sys.modules if (m == "tensorflow" or m.startswith("tensorflow."))
                          and sys.modules[m] is not None)
        with open(os.path.join(os.environ["TPULAB_TEST_WATCH"], f"{os.getpid()}.json"), "w") as f:
            json.dump({"code": code, "tensorflow": imported, "keras": "keras" in sys.modules,
                       "jax": sys.modules.get("jax") is not None,
                       "matplotlib": sys.modules.get("matplotlib") is not None}, f)

    def _exit_saying(code):
        _report(code)
        _exit(code)

    os._exit = _exit_saying
    atexit.register(_report)
"""


def watched(home: Path) -> dict[str, str]:
    """The environment of a run whose workers say, in `home`/watch, what they imported (WATCH)."""
    (home / "watch").mkdir(parents=True)
    (home / "site").mkdir()
    (home / "site" / "sitecustomize.py").write_text(WATCH)
    path = os.pathsep.join(p for p in (str(home / "site"), os.environ.get("PYTHONPATH")) if p)
    return {"TPULAB_HOME": str(home), "PYTHONPATH": path, "TPULAB_TEST_WATCH": str(home / "watch")}


def worker_imports(home: Path) -> list[dict]:
    """What each worker of the run kept in `home` said at its end (one report per worker)."""
    return [json.loads(f.read_text()) for f in sorted((home / "watch").iterdir())]


async def streaming(app, pilot, steps: int) -> RunPane:
    """The lab's Run tab showing a conv of `steps` replayed at its own pace (200 steps a second, telemetry twice a
    second), past its 50th step."""
    await pilot.press("3")
    await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
    pane = app.query_one(RunPane)
    pane.start(Replay("conv", app.report, conv_events(steps, step_s=0.005, sample_every=100), paced=True))
    await wait_for(pilot, lambda: pane.run is not None and pane.run.recorder.steps_done() > 50, 10)
    return pane


def run_model_here(model: str, **values: object) -> list:
    """The model workload's torch runner in this process, as a worker calls it, at the smoke preset: its events."""
    from tpulab.backends.torch import TorchRuntime
    from tpulab.workloads.running import CancelToken
    from tpulab.workloads.user_model.torch import run

    w = registry()["model"]
    p = w.parse({"model": model, "backend": "torch", "device": "cpu", **values}, "smoke")
    events: list = []
    run(w, p, events.append, CancelToken(), TorchRuntime())
    return events


def kept_roofline(backend: str, version: str | None, python: str, cpu: str = "test CPU") -> RunRecord:
    """A roofline kept on this machine's CPU by `backend` at `version` that set both ceilings (100 GFLOP/s float32,
    20 GB/s): what `--quick` reuses rather than measuring again (`cpu`: the CPU model its device is named by)."""
    from tpulab.base.events import KernelFigure, Summary, Telemetry

    figures = [KernelFigure(kind="matmul", dtype="float32", size=n, median_s=0.1, count=5, flops_per_s=100e9)
               for n in (1024, 2048)]
    figures.append(KernelFigure(kind="copy", dtype="float32", size=256, median_s=0.1, count=5, bytes_per_s=20e9))
    return RunRecord(id="f" * 32, workload="roofline", params={}, status="finished", started_at="2026-12-01T00:00:00",
                     device=Device(kind="cpu", name=cpu), backend=backend,
                     versions={backend: version or "", "python": python}, runtime={"cpu": {"llc_bytes": 32 * 2**20}},
                     summary=Summary(kernels=figures, telemetry=Telemetry(cores=2, cpu_mean=10.0, process_mean=15.0)))


# --- serve: stub OpenAI-compatible servers on 127.0.0.1 -------------------------------------------------------
Behave = Callable[[BaseHTTPRequestHandler, int, dict[str, Any], int], None]  # (handler, request number, body, in flight)


def tokens(h: BaseHTTPRequestHandler, n: int, gap: float = 0.0, done: bool = True) -> None:
    """An SSE stream of `n` one-token chunks `gap` apart, its usage, then [DONE] (where `done`)."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Connection", "close")
    h.end_headers()
    for i in range(n):
        if gap:
            time.sleep(gap)
        h.wfile.write(b'data: {"choices": [{"index": 0, "text": "t%d"}]}\n\n' % i)
        h.wfile.flush()
    if done:
        h.wfile.write(b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": %d}}\n\n' % n)
        h.wfile.write(b"data: [DONE]\n\n")


class Stub:
    """A server on 127.0.0.1 whose answer to each request `behave` decides; it counts what it was asked."""

    def __init__(self, behave: Behave) -> None:
        self.asked = 0
        self.flight = 0
        lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    stub.asked += 1
                    stub.flight += 1
                    number, flight = stub.asked, stub.flight
                try:
                    behave(self, number, body, flight)
                finally:
                    with lock:
                        stub.flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_events(requests: int = 24, every_s: float = 0.1, until: float | None = None, t0: float = 1.77e9
                 ) -> list[Event]:
    """A serve run as its client says it, at fixed times, on a server falling behind: `requests` sent `every_s`
    apart, each with a first token after 40 ms plus 20 ms a request before it, and 7 more tokens 20 ms apart plus
    1 ms a request before it; the load so far every half second (`live.Tally`, the client's own), each event at
    `t0` plus its time. Up to `until` seconds (no end: a run in flight), else with its totals and end."""
    from tpulab.workloads.serve.figures import PHASE_REQUEST, PHASE_TOTALS
    from tpulab.workloads.serve.live import EVERY_S, Tally

    sends = [i * every_s for i in range(requests)]
    ttft, tpot = [0.04 + 0.02 * i for i in range(requests)], [0.02 + 0.001 * i for i in range(requests)]
    ends = {i: sent + ttft[i] + 7 * tpot[i] for i, sent in enumerate(sends)}
    moments = sorted([(t, "sent", i) for i, t in enumerate(sends)] + [(t, "ended", i) for i, t in ends.items()]
                     + [(k * EVERY_S, "tick", -1) for k in range(1, int(max(ends.values()) / EVERY_S) + 1)])
    tally = Tally()
    events: list[Event] = [Started(t=t0, workload="serve", device=Device(kind="cpu", name="test CPU",
                                                                   strategy="your server at http://127.0.0.1:8080/v1"),
                                   dtype="", flops_per_step=None, steps_total=requests, per_replica_batch=1,
                                   backend="jax", synthetic=True)]
    for t, what, i in moments:
        if until is not None and t > until:
            return events
        if what == "sent":
            tally.sent(t)
        elif what == "tick":
            events.append(dataclasses.replace(tally.step(t), t=t0 + t))
        else:
            step = Step(t=t0 + t, step=i, seconds=ends[i] - sends[i], phase=PHASE_REQUEST,
                        metrics={"ttft_s": ttft[i], "tpot_s": tpot[i], "e2e_s": ends[i] - sends[i], "output_tokens": 8.0,
                                 "due_s": sends[i], "sent_s": sends[i], "prompt_tokens": 16.0})
            tally.ended(step)
            events.append(step)
    end = max(ends.values())
    totals = Step(t=t0 + end, step=requests, seconds=end, steps=0, phase=PHASE_TOTALS,
                  metrics={"sent": float(requests), "end_s": end, "achieved_rate": 1 / every_s})
    return [*events, dataclasses.replace(tally.step(end), t=t0 + end), totals, Finished(t=t0 + end)]
