"""The run pane: live charts, progress and ETA, an event log, cancel, and the summary at the end.

The run streams in a thread worker that batches events into messages (at most ~10 a second),
and the charts redraw on a timer, one chart per tick and only when new points arrived, so
the UI keeps its pace however fast the steps are.
"""

from __future__ import annotations

import time
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import ProgressBar, RichLog, Static
from textual.worker import Worker, WorkerState

from .. import fmt
from ..console import summary_table
from ..runner import Run
from ..runtime.detect import RuntimeReport
from ..workloads.base import Event, Params, Workload

POST_EVERY_S = 0.1
REDRAW_EVERY_S = 0.15  # one chart per tick: a plotext redraw takes ~20 ms, three at once would stall the UI


class RunPane(Vertical):
    class Progress(Message):
        """A batch of events, with the figures derived so far."""

        def __init__(self, events: list[Event], done: int, total: int | None, eta: float | None,
                     peak_flops: float | None) -> None:
            super().__init__()
            self.events, self.done, self.total, self.eta, self.peak_flops = events, done, total, eta, peak_flops

    class Finished(Message):
        def __init__(self, record: dict[str, Any]) -> None:
            super().__init__()
            self.record = record

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.run: Run | None = None
        self.workload: Workload | None = None
        self.step_x = 0
        self.next_chart = 0

    def compose(self) -> ComposeResult:
        from ..widgets.charts import SeriesPlot  # plotext loads after the first paint (this pane is lazy)

        yield Static("No run yet: pick a workload, then Run.", id="run-header")
        yield ProgressBar(id="run-progress", show_eta=False)
        with Horizontal(id="charts"):
            yield SeriesPlot(id="chart-time", classes="chart")
            yield SeriesPlot(id="chart-rate", classes="chart")
            yield SeriesPlot(id="chart-metrics", classes="chart")
        with Horizontal(id="run-bottom"):
            yield RichLog(id="run-log", wrap=True, markup=True)
            with VerticalScroll(id="run-summary-box"):
                yield Static(id="run-summary")

    def on_mount(self) -> None:
        self.set_interval(REDRAW_EVERY_S, self._redraw)

    def on_unmount(self) -> None:
        if self.run is not None and self.run.handle is not None:
            self.run.handle.kill()  # the app is closing: no worker is left behind

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.recorder.status == "running"

    def start(self, workload: Workload, params: Params, report: RuntimeReport) -> Run:
        self.workload = workload
        self.run = Run(workload.name, params, report)
        self.step_x = 0
        training = workload.unit == "step"
        unit = workload.unit
        self.query_one("#chart-time").configure(f"ms per {unit}")
        self.query_one("#chart-rate").configure("examples/s" if training else "GFLOP/s")
        self.query_one("#chart-metrics").configure("loss, accuracy")
        self.query_one("#chart-metrics").display = training
        self.query_one("#run-summary", Static).update("")
        log = self.query_one("#run-log", RichLog)
        log.clear()
        changed = ", ".join(f"{k}={v}" for k, v in params.items() if v != workload.spec(k).default)
        log.write(f"starting {workload.name}: {changed or 'defaults'}")
        self.query_one("#run-progress", ProgressBar).update(total=None, progress=0)
        self.query_one("#run-header", Static).update(f"{workload.title}: starting a worker (TensorFlow imports)...")
        self._stream(self.run)
        return self.run

    def cancel(self) -> None:
        if self.running:
            first = not (self.run.handle and self.run.handle.cancel_requested)
            self.run.cancel()
            self.query_one("#run-log", RichLog).write(
                "[yellow]cancel: stopping after the current step (cancel again to kill)[/]" if first
                else "[red]killing the run[/]")

    @work(thread=True, exclusive=True, exit_on_error=False, group="run")
    def _stream(self, run: Run) -> None:
        batch: list[Event] = []
        last = 0.0
        for event in run.events():
            batch.append(event)
            now = time.monotonic()
            if event.get("event") != "step" or now - last >= POST_EVERY_S:
                self._post(run, batch)
                batch, last = [], now
        self._post(run, batch)
        self.post_message(self.Finished(run.recorder.record()))

    def _post(self, run: Run, batch: list[Event]) -> None:
        rec = run.recorder
        if batch:
            self.post_message(self.Progress(batch, rec.steps_done(), rec.info.get("steps_total"), rec.eta_seconds(),
                                             rec.summary()["peak_flops"] if batch[0].get("event") == "started" else None))

    @on(Progress)
    def _progress(self, message: Progress) -> None:
        log = self.query_one("#run-log", RichLog)
        for e in message.events:
            self._apply(e, log, message.peak_flops)
        bar = self.query_one("#run-progress", ProgressBar)
        bar.update(total=message.total, progress=message.done)
        if self.run is not None:
            info = self.run.recorder.info
            d = info.get("device") or {}
            self.query_one("#run-header", Static).update(
                f"[b]{self.workload.title}[/b] on {d.get('kind', '?').upper()} {d.get('name', '')} | "
                f"{d.get('replicas', 1)} shard(s), {info.get('per_replica_batch')} per replica, {info.get('dtype')} | "
                f"{message.done}/{message.total or '?'} {self.workload.unit}s | ETA {fmt.duration(message.eta)}"
                + (" | [yellow]SYNTHETIC DATA[/]" if info.get("synthetic") else ""))

    def _apply(self, e: Event, log: RichLog, peak_flops: float | None) -> None:
        kind = e.get("event")
        time_plot = self.query_one("#chart-time")
        rate_plot = self.query_one("#chart-rate")
        if kind == "started":
            if e.get("note"):
                log.write(f"[yellow]note: {e['note']}[/]")
            if peak_flops and self.workload.unit != "step":
                rate_plot.lines["peak"] = peak_flops / 1e9
                rate_plot.dirty = True
        elif kind == "compiled":
            log.write(f"first call (trace + compile): {fmt.seconds(e['seconds'])}, reported apart")
        elif kind == "step":
            self.step_x = e["step"]
            name = "warm-up" if e.get("warmup") else self.workload.unit
            time_plot.add(name, e["step"], e["seconds"] * 1e3)
            flops = self.run.recorder.info.get("flops_per_step") if self.run else None
            if self.workload.unit == "step":
                rate_plot.add("examples/s", e["step"], e.get("examples_per_s", 0))
                metrics = self.query_one("#chart-metrics")
                for key, label in (("loss", "loss"), ("sparse_categorical_accuracy", "accuracy")):
                    if key in (e.get("metrics") or {}):
                        metrics.add(label, e["step"], e["metrics"][key])
            elif flops:
                rate_plot.add(name, e["step"], flops / e["seconds"] / 1e9)
        elif kind == "epoch":
            m = e.get("metrics", {})
            metrics = self.query_one("#chart-metrics")
            for key, label in (("val_loss", "val loss"), ("val_sparse_categorical_accuracy", "val accuracy")):
                if key in m:
                    metrics.add(label, self.step_x, m[key])
            log.write(f"epoch {e['epoch']}: {fmt.duration(e['seconds'])}, " +
                      ", ".join(f"{k} {v:.4f}" for k, v in m.items()) +
                      (" [yellow](synthetic data)[/]" if e.get("synthetic") else ""))
        elif kind == "failed":
            log.write(f"[red]failed: {e.get('error')}[/]")
        elif kind == "cancelled":
            log.write("[yellow]cancelled: what was measured is kept[/]")
        elif kind == "log":
            log.write(e.get("text", ""))

    def _redraw(self, everything: bool = False) -> None:
        plots = [p for p in self.query(".chart") if p.display]
        for i in range(len(plots)):
            plot = plots[(self.next_chart + i) % len(plots)]
            if plot.dirty:
                plot.replot()
                self.next_chart = (self.next_chart + i + 1) % len(plots)
                if not everything:
                    return

    @on(Finished)
    def _finished(self, message: Finished) -> None:
        record = message.record
        self._redraw(everything=True)
        self.query_one("#run-summary", Static).update(summary_table(record, self.workload.unit))
        log = self.query_one("#run-log", RichLog)
        for flag in record["summary"]["flags"]:
            colour = "red" if flag["code"] == "beats-peak" else "yellow"
            log.write(f"[{colour}]flag {flag['code']}: {flag['message']}[/]")
        log.write(f"run {record['id'][:8]} {record['status']}" + (f": {record['error']}" if record["error"] else ""))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "run" and event.state == WorkerState.ERROR:
            self.query_one("#run-log", RichLog).write(f"[red]the run could not be streamed: {event.worker.error}[/]")
            if self.run is not None:
                self.run.recorder.finish("failed", str(event.worker.error))
                self.post_message(self.Finished(self.run.recorder.record()))
