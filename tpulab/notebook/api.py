"""tpulab from Python: run, sweep, results, compare, detect.

Every run takes the CLI's path: the workload's declarations check the values and every `auto` is
decided (`engine.spec.resolve` against `detect()`), a worker process runs it (`engine.runner.Run`), its events build the record
(`RunRecorder`) and the store keeps it. Only the display differs: the notebook's cell, updated in
place. Interrupting the cell stops the run after its current step, keeps what was measured, and
raises KeyboardInterrupt again, so a loop of runs stops too.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from tpulab.base import safe
from tpulab.base.errors import AcceleratorBusy, did_you_mean
from tpulab.base.events import Event, RunRecord, Started, Step
from tpulab.engine.store import Store, default_path
from tpulab.notebook.results import ComparisonResult, RunList, RunResult, RuntimeResult, SweepResult
from tpulab.workloads.base import ParamError, Workload

if TYPE_CHECKING:
    from tpulab.engine.spec import RunSpec
    from tpulab.machine.detect import RuntimeReport


def workload_named(name: str) -> Workload:
    from tpulab.workloads import registry

    found = registry()
    if name not in found:
        near = did_you_mean(name, found)  # the command line's words for a typo
        raise ParamError("workload", f"unknown workload {name!r}{near}" if near else
                         f"workload must be one of {', '.join(found)} (got {name!r})")
    return found[name]


def resolve(workload: str, preset: str | None, values: Mapping[str, Any], repeat: int = 1) -> tuple[RunSpec, RuntimeReport]:
    """The run's spec, as the CLI resolves its flags (`engine.spec.resolve`), and this machine's report.

    Raises `ParamError` (a ValueError) naming the parameter and what it allows, `BackendError` naming
    the install command.
    """
    from tpulab.engine.spec import resolve as resolve_spec
    from tpulab.machine.detect import detect as detect_report

    w = workload_named(workload)
    check_names(w, values)
    report = detect_report()
    try:
        return resolve_spec(w, values, report, preset, repeat=repeat), report
    except ParamError as e:
        raise pythonic(e) from None


def check_names(w: Workload, values: Iterable[str]) -> None:
    known = [p.name for p in w.params]
    for name in values:
        if name not in known:
            raise ParamError(name, f"{w.name} has no parameter {name!r}"
                             + (did_you_mean(name, known) or f": it takes {', '.join(known)}"))


def pythonic(e: ParamError) -> ParamError:
    """The CLI's words for Python: '--batch-size must be...' reads 'batch_size must be...'."""
    return ParamError(e.param, re.sub(r"--([a-z][a-z0-9-]*)", lambda m: m.group(1).replace("-", "_"), str(e)))


def kernel_holds(device: str) -> str | None:
    """Why this process keeps a worker from opening `device`, or None.

    Only one process may hold a TPU: once the notebook's kernel initialised a framework on it, a
    worker would wait for the chip forever. Each backend says whether its framework holds it here.
    GPUs are shared between processes.
    """
    from tpulab.backends import registry

    if device != "tpu":
        return None
    found = registry().values()
    who = next((b.title for b in found if b.holds_device()), None)
    if who is None:
        return None
    frameworks = ", ".join(b.title for b in found)
    return (f"this notebook's own process has initialised {who}, which now holds the TPU (only one process may): "
            "a tpulab worker could not open it. Restart the session (Colab: Runtime > Restart session) and run "
            f"tpulab before using {frameworks} or Keras in this notebook, or pass device='cpu'")


# --- running -------------------------------------------------------------------------------------------
class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


def pump(events: Iterator[Any], each: Callable[[Any], None], stop: Callable[[], None]) -> bool:
    """Consume `events` in a thread and hand each to `each` here; True when the user interrupted.

    The events are read in a thread so that an interrupt (KeyboardInterrupt in this thread) never
    lands inside the run's generator: `stop()` asks the run to end after its step (again: kill
    it), and the events that follow are still read, so the record is whole.
    """
    q: queue.Queue[Any] = queue.Queue()

    def produce() -> None:
        try:
            for event in events:
                q.put(event)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, raised there
            q.put(_Raised(e))
        finally:
            q.put(_DONE)

    threading.Thread(target=produce, name="tpulab-events", daemon=True).start()
    interrupted = False
    while True:
        try:
            item = q.get(timeout=0.2)
            if item is _DONE:
                return interrupted
            if isinstance(item, _Raised):
                raise item.error
            each(item)
        except queue.Empty:
            continue
        except KeyboardInterrupt:
            interrupted = True
            stop()
        except Exception:
            stop()  # the caller's own error ends the run: asked to stop, then killed, never left running
            stop()
            raise


def _store(save: bool, db: str | Path | None) -> Store | None:
    return Store(Path(db) if db else default_path()) if save else None


def _stopped(what: str) -> KeyboardInterrupt:
    print(f"tpulab: stopped by the user; {what}", file=sys.stderr, flush=True)
    return KeyboardInterrupt(what)


def run(workload: str, preset: str | None = None, *, live: bool = True, save: bool = True,
        db: str | Path | None = None, on_event: Callable[[Event], None] | None = None, repeat: int = 1,
        **params: Any) -> RunResult:
    """Run a workload in a worker process and return its record; kept in the results unless `save=False`.

    `params` are the workload's parameters by name (`batch_size=8`, `device="cpu"`), checked as the
    CLI checks its flags; a bad one raises ValueError naming it. `on_event` sees every event. `repeat=N` runs it
    in N fresh processes, one after another, kept as one run (`--repeat`).
    """
    from tpulab.engine.runner import run_job
    from tpulab.notebook.live import LiveRun

    spec, report = resolve(workload, preset, params, repeat)
    why = kernel_holds(spec.device)
    if why:
        raise AcceleratorBusy(why)
    store = _store(save, db)
    job = run_job(spec, report, Path(db) if db else default_path(), kept=save)
    view = LiveRun(job.recorder) if live else None

    def each(event: Event) -> None:
        if view is not None:
            view(event)
        if on_event is not None:
            on_event(event)

    try:
        interrupted = pump(job.events(), each, job.cancel)
    finally:
        record = job.recorder.record()
        if view is not None:
            view.close(record)
    if store is not None:
        store.save(record)
    if interrupted:
        raise _stopped(f"run {record.short_id} is kept as {record.status} with its {len(record.steps)} measured "
                       f"step(s)" + (" (tpulab.results()[0])" if store else ""))
    return RunResult(record)


def sweep(workload: str, preset: str | None = None, *, steps: int | None = None, repeat: int = 1,
          max_minutes: float | None = None, live: bool = True, save: bool = True, db: str | Path | None = None,
          **lists: Any) -> SweepResult:
    """Run a grid of a workload's parameters, a worker per point; the best is `.best`.

    Each parameter takes a value, a list (`batch_size=[32, 64, 128]`) or the CLI's text
    (`batch_size="16..1024"`). Combinations that cannot run are named and left out.
    """
    from tpulab.engine.sweep import PointFinished, PointStarted, Unkept, plan
    from tpulab.machine.detect import detect as detect_report
    from tpulab.notebook.live import LiveSweep
    from tpulab.views import html
    from tpulab.views.sweep import impossible_lines, label, live_header, live_line

    w = workload_named(workload)
    check_names(w, lists)
    raw = {name: _as_text(value) for name, value in lists.items()}
    try:
        job, impossible = plan(w, raw, detect_report(), preset, steps, repeat, max_minutes,
                               Path(db) if db else default_path())
    except ParamError as e:
        raise pythonic(e) from None
    for point in job.points:
        why = kernel_holds(point.spec.device if point.spec else "")
        if why:
            raise AcceleratorBusy(why)
    for line in impossible_lines(impossible):
        print(f"tpulab: {safe.visible(pythonic(ParamError('', line)))}", file=sys.stderr)
    store = _store(save, db)
    grid = job.grid
    axes = list(grid.axes)
    view = LiveSweep() if live else None
    if view is not None and not view.notebook:
        print(live_header(grid.axes), flush=True)

    def kept() -> dict[str, RunRecord]:
        return {r.id: r for p in job.points for r in p.records}

    def each(event: Any) -> None:
        if isinstance(event, Unkept):
            print(f"tpulab: {safe.visible(event.error)}", file=sys.stderr)
        elif isinstance(event, PointFinished):
            if view is not None:
                view.finished(html.sweep_body(job.record(), kept()), live_line(event.point, grid.axes))
        elif view is not None and isinstance(event, PointStarted):
            view.point(f"sweep {job.id[:8]} of {w.name}: point {event.index} of {event.of}: "
                       f"{label(event.point, axes) or 'one point'}", None)
        elif view is not None and isinstance(event, Started) and job.run is not None:
            view.run = job.run.recorder
        elif view is not None and isinstance(event, Step):
            view.step(event)

    def stop() -> None:
        job.stop()
        job.cancel_point()

    interrupted = pump(job.drive(store), each, stop)
    result = SweepResult(job.record(), kept())
    if view is not None:
        view.head = f"sweep {job.id[:8]} of {w.name}: {job.status}"
        view.finished(html.sweep_body(result.sweep, result.records), "")
    if interrupted:
        done = sum(p.status == "finished" for p in job.points)
        raise _stopped(f"sweep {job.id[:8]} is kept with its {done} finished point(s)")
    return result


def _as_text(value: Any) -> str:
    """A value or a list of them as the sweep's text: [32, 64] -> '32,64'; '16..1024' stays."""
    if isinstance(value, (list, tuple, range)):
        return ",".join(str(v) for v in value)
    return str(value)


# --- kept results ----------------------------------------------------------------------------------------
def results(workload: str | None = None, *, status: str | None = None, sweep: str | None = None, limit: int = 20,
            offset: int = 0, db: str | Path | None = None) -> RunList:
    """Kept runs, newest first: `limit` of them after `offset`, of one workload, status or sweep if given."""
    from tpulab.base.events import STATUSES

    if status is not None and status not in STATUSES:
        raise ParamError("status", f"status must be one of {', '.join(STATUSES)} (got {status!r})")
    if limit < 1 or offset < 0:
        raise ParamError("limit", f"limit must be at least 1 and offset at least 0 (got {limit}, {offset})")
    from tpulab.engine.runindex import RunFilter

    store = Store(Path(db) if db else default_path())
    filt = RunFilter(workload=workload, status=status, sweep=sweep)  # the CLI's filters, on the indexed columns
    shown = store.page(filt, limit=offset + limit).rows[offset:]
    total = store.count(filt)
    more = f" ({offset + 1}-{offset + len(shown)} of {total})" if len(shown) < total else ""
    runs = [RunResult(store.get(r.id)) for r in shown]
    swept = {r.record.sweep for r in runs}
    sweeps = [s for s in store.sweeps() if s.id in swept]  # each the parent of its runs in MLflow (`to_mlflow`)
    return RunList(runs, f"runs in {store.path}, newest first{more}", sweeps)


def record_of(run: RunResult | RunRecord | str, store: Store) -> RunRecord:
    if isinstance(run, RunResult):
        return run.record
    if isinstance(run, RunRecord):
        return run
    return store.get(str(run))


def compare(*runs: RunResult | RunRecord | str, db: str | Path | None = None) -> ComparisonResult:
    """Runs side by side (results, records or ids), with speedups against the first.

    Runs of different workloads (your `FitTimer` run against tpulab's CNN) are set side by side by examples/s.
    """
    from tpulab.engine.store import compare as compare_records

    if len(runs) == 1 and isinstance(runs[0], (list, tuple)):
        runs = tuple(runs[0])
    store = Store(Path(db) if db else default_path())
    records = [record_of(r, store) for r in runs]
    return ComparisonResult(compare_records(records, across_workloads=True, floor=store.floor_for(records)))


def detect(probe: bool = False) -> RuntimeResult:
    """This machine: CPU, GPUs, TPU, frameworks, and what to fix. `probe=True` asks each framework, in a worker."""
    from tpulab.engine.doctor import diagnose
    from tpulab.machine.detect import detect as detect_report

    report = detect_report()
    if probe:
        from tpulab.engine.worker import probe_installed

        report.frameworks = probe_installed(report.packages)
    return RuntimeResult(report, diagnose(report))
