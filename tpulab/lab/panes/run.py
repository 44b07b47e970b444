"""The run pane: live charts, progress and ETA, an event log, cancel, the workload's own words for its latest step
where it has them (in the summary's place, empty till the end), and the summary at the end.

The run streams in a thread worker that batches events into messages (at most ~10 a second),
and the charts redraw on a timer, one chart per tick and only when new points arrived, so
the UI keeps its pace however fast the steps are. Events are worded by `narrate`, as headless.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rich.console import Group
from textual import events, on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import ProgressBar, RichLog, Static
from textual.worker import Worker, WorkerState
from typing_extensions import Self

from tpulab.base import fmt, safe
from tpulab.base.charts import Chart, ChartContext
from tpulab.base.events import Event, RunRecord, Sample, Started, Step
from tpulab.base.timing import median
from tpulab.engine.runner import Run
from tpulab.lab.panes import lab
from tpulab.lab.widgets.status_line import StatusLine
from tpulab.views.console import summary_table
from tpulab.views.narrate import Cell, describe, packed, step_words, unavailable_lines
from tpulab.views.profile import ops_table
from tpulab.views.roofline import roofline_view

if TYPE_CHECKING:
    from tpulab.lab.widgets.charts import SeriesPlot


POST_EVERY_S = 0.25  # a run's events reach the pane in batches, four a second: each batch redraws its header and bar
ZOOM_HINT = "the run's summary, zoomed: z or escape shows the charts and the log again"
# One chart per tick: a plotext redraw takes ~20 ms (three at once would stall the UI), of a core a run on this CPU
# is measured on; a conv's five charts each move every 1.25 s.
REDRAW_EVERY_S = 0.25
CHART_IDS = ("chart-a", "chart-b", "chart-c", "chart-d")  # as many as any workload declares (a Keras model: 4)
TELEMETRY_TITLES = {"tele-util": "busy %", "tele-mem": "memory GiB"}  # x: the step, as the timings


class RunLog(RichLog):
    """The run's log, wrapped to its width again whenever that changes (the run ended, a zoom)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(wrap=True, markup=True, min_width=1, **kwargs)
        self.written: list[object] = []
        self.wrapped_at = 0

    def write(self, content: object, *args: Any, **kwargs: Any) -> Self:
        if self._size_known:  # before its size is known RichLog defers a write, then writes it again through here
            self.written.append(content)
        return super().write(content, *args, **kwargs)

    def clear(self) -> Self:
        self.written = []
        return super().clear()

    def on_resize(self, event: events.Resize) -> None:
        if self.wrapped_at and event.size.width != self.wrapped_at:
            super().clear()
            for content in self.written:
                super().write(content)
        self.wrapped_at = event.size.width


class RunPane(Vertical):
    class Advanced(Message):
        """A batch of one run's events, with the figures derived so far."""

        def __init__(self, run: Run, events: list[Event], done: int, total: int | None, eta: float | None,
                     peak_flops: float | None, words: list[Cell] | None = None) -> None:
            super().__init__()
            self.run, self.events, self.done, self.total, self.eta = run, events, done, total, eta
            self.peak_flops = peak_flops
            self.words = words  # the latest step its workload words itself (a serve run's load so far), if any

    class Ended(Message):
        """A run's last word, posted once its worker processes have all ended."""

        def __init__(self, run: Run, record: RunRecord) -> None:
            super().__init__()
            self.run, self.record = run, record

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run: Run | None = None
        self.ended = True
        self.charts: list[tuple[Chart, SeriesPlot]] = []  # the current workload's, as it declares them
        self.context: ChartContext | None = None
        self.telemetry_charts: dict[str, SeriesPlot] = {}  # beside the workload's, on the same step axis
        self.next_chart = 0
        self.killing = False  # a second cancel came: the run is being killed

    def compose(self) -> ComposeResult:
        from tpulab.lab.widgets.charts import SeriesPlot  # the chart widgets load after the first paint (this pane is lazy)

        yield StatusLine("No run yet: pick a workload, then Run.", id="run-header")
        yield Static(id="run-cancel")
        bar = ProgressBar(id="run-progress", show_eta=False)
        bar.display = False  # an empty bar would say that something runs: shown once something does
        yield bar
        with Horizontal(id="charts"):
            for chart_id in CHART_IDS:  # untitled until a run says what its workload plots: hidden till then
                plot = SeriesPlot(id=chart_id, classes="chart")
                plot.display = False
                yield plot
        with Horizontal(id="telemetry"):
            for chart_id, title in TELEMETRY_TITLES.items():
                yield SeriesPlot(title, id=chart_id, classes="chart")
        with Horizontal(id="run-bottom"):
            yield RunLog(id="run-log")
            with VerticalScroll(id="run-summary-box"):
                yield Static(ZOOM_HINT, id="run-summary-hint")  # shown only while it is true: the summary zoomed
                yield StatusLine(id="run-summary")  # its own words as it goes (a serve run: twice a second), then its summary

    def on_mount(self) -> None:
        self.set_interval(REDRAW_EVERY_S, self._redraw)
        self.watch(self.screen, "maximized", self._zoomed)

    def _zoomed(self, maximized: object) -> None:
        self.query_one("#run-summary-hint").display = maximized is self.query_one("#run-summary-box")

    def on_unmount(self) -> None:
        if self.run is not None:
            for handle in self.run.handles:
                handle.kill()  # the app is closing: no worker is left behind

    @property
    def log_view(self) -> RunLog:
        return self.query_one("#run-log", RunLog)

    @property
    def running(self) -> bool:
        """Until the run's worker processes have all ended, not merely until its last event."""
        return self.run is not None and not self.ended

    def chart(self, title: str) -> SeriesPlot | None:
        """The chart of that title: one the current workload declares, or a telemetry chart."""
        found = next((plot for chart, plot in self.charts if chart.title == title), None)
        return found or next((self.telemetry_charts[i] for i, t in TELEMETRY_TITLES.items()
                              if t == title and i in self.telemetry_charts), None)

    def start(self, run: Run) -> Run:
        from tpulab.lab.widgets.charts import SeriesPlot

        self.run = run
        self.ended = False
        self.killing = False
        self.remove_class("-ended")
        workload = run.workload
        self.context = ChartContext(workload)
        self.charts = []
        for chart_id, spec in zip(CHART_IDS, (*workload.charts, *[None] * len(CHART_IDS))):
            plot = self.query_one(f"#{chart_id}", SeriesPlot)
            plot.display = spec is not None
            if spec is not None:
                plot.configure(spec.title, spec.right(self.context))
                self.charts.append((spec, plot))
        self.telemetry_charts = {}
        for chart_id, title in TELEMETRY_TITLES.items():
            plot = self.query_one(f"#{chart_id}", SeriesPlot)
            plot.configure(title)
            self.telemetry_charts[chart_id] = plot
        self.query_one("#run-summary", Static).update("")
        self.log_view.clear()
        self.log_view.write(safe.markup(f"starting {workload.name}: {workload.changed(run.params) or 'defaults'}"))
        bar = self.query_one("#run-progress", ProgressBar)
        bar.update(total=None, progress=0)
        bar.display = True
        self.query_one("#run-header", Static).update(
            safe.markup(f"{workload.title}: starting a worker ({run.backend} imports)..."))
        self._stream(run)
        return run

    def cancel(self) -> None:
        if self.run is not None and self.running:
            self.killing = bool(self.run.handle and self.run.handle.cancel_requested)
            self.run.cancel()
            self._show_cancel()

    def abandon(self, why: str) -> RunRecord | None:
        """The lab is failing: the run in flight is killed now, and what it measured is its record, cancelled."""
        if self.run is None or not self.running:
            return None
        self.ended = True
        self.run.recorder.finish("cancelled", why)  # first: the stream's thread, seeing the worker die, then says no more
        for handle in self.run.handles:
            handle.kill()
        return self.run.recorder.record()

    def _show_cancel(self) -> None:
        """While a cancel waits: the step it waits for and how long a step takes; gone when the run ends."""
        line = self.query_one("#run-cancel", Static)
        line.display = True
        if self.killing:
            line.update("[red]cancel: killing the run[/]")
            return
        assert self.run is not None
        rec = self.run.recorder
        step = median([s.seconds for s in rec.steps[-20:]])
        waiting = (f"step {rec.steps_done() + 1} (each ~{fmt.seconds(step)})" if step is not None
                   else "its first call (it compiles)")
        line.update(f"[yellow]cancel: stopping after {waiting}; x again kills it[/]")

    @work(thread=True, exclusive=True, exit_on_error=False, group="run")
    def _stream(self, run: Run) -> None:
        batch: list[Event] = []
        last = 0.0
        words: list[Cell] | None = None
        for event in run.events():
            batch.append(event)
            if isinstance(event, Step):  # worded here, as the record has taken it last (a workload reads the steps)
                words = step_words(event, run.recorder) or words
            now = time.monotonic()
            if not isinstance(event, (Step, Sample)) or now - last >= POST_EVERY_S:
                self._post(run, batch, words)
                batch, last, words = [], now, None
        self._post(run, batch, words)
        self.post_message(self.Ended(run, run.recorder.record()))

    def _post(self, run: Run, batch: list[Event], words: list[Cell] | None = None) -> None:
        rec = run.recorder
        if batch:
            peak = rec.summary().peak_flops if isinstance(batch[0], Started) else None
            self.post_message(self.Advanced(run, batch, rec.steps_done(), rec.steps_total, rec.eta_seconds(), peak,
                                            words))

    @on(Advanced)
    def _progress(self, message: Advanced) -> None:
        if message.run is not self.run:
            return  # a late word of an earlier run
        rec = self.run.recorder
        for e in message.events:
            self._chart(e, message.peak_flops)
            if isinstance(e, Sample):
                self._sample(e)
                continue
            line = None if isinstance(e, Step) else describe(e, rec)  # steps are charted, not logged
            if line is not None:
                self.log_view.write(line)
        self.query_one("#run-progress", ProgressBar).update(total=message.total, progress=message.done)
        if message.words and not self.ended:  # the summary's place is empty till the end
            said = self.query_one("#run-summary", StatusLine)
            said.say(packed(message.words, max(20, said.content_size.width)))
        if self.run.handle and self.run.handle.cancel_requested:
            self._show_cancel()
        info = rec.info
        if info is not None:
            d = info.device
            self.query_one("#run-header", StatusLine).say(
                f"[b]{safe.markup(rec.workload.title)}[/b] "
                + safe.markup(f"on {d.label()} via {info.backend} | {d.replicas} shard(s), "
                              f"{info.per_replica_batch} per replica{f', {info.dtype}' if info.dtype else ''} | "
                              f"{message.done}/{message.total or '?'} {rec.workload.unit}s | "
                              f"ETA {fmt.duration(message.eta)}")
                + (" | [yellow]SYNTHETIC DATA[/]" if info.synthetic else ""))

    def _chart(self, e: Event, peak_flops: float | None) -> None:
        """Points for the workload's declared charts: each chart says what it plots; nothing is worded here."""
        ctx = self.context
        if ctx is None:
            return
        if isinstance(e, Started):
            ctx.flops_per_step, ctx.peak_flops = e.flops_per_step, peak_flops
        for chart, plot in self.charts:
            if isinstance(e, Started):
                plot.lines.update(chart.lines(ctx))
                plot.dirty = True
            for series, x, y in chart.points(e, ctx):
                plot.add(series, x, y)
        if isinstance(e, Step):
            ctx.last_step = e.step

    def _sample(self, s: Sample) -> None:
        """Telemetry on the steps' axis: what was busy, and how much memory the worker and devices held."""
        for line in unavailable_lines(s.unavailable):
            self.log_view.write(line)
        util, mem = self.telemetry_charts["tele-util"], self.telemetry_charts["tele-mem"]
        x = self.context.last_step if self.context else 0
        if s.cpu is not None:
            util.add("CPU", x, s.cpu)
        if s.process is not None and s.cores:
            util.add("worker", x, s.process / len(s.cores))  # as a share of all cores, like CPU
        if s.rss is not None:
            mem.add("worker", x, s.rss / 2**30)
        for d in s.devices:
            name = f"{d.kind.upper()}{d.index}"
            if d.util is not None:
                util.add(name, x, d.util)
            if d.mem_used is not None:
                mem.add(name, x, d.mem_used / 2**30)

    def _redraw(self, everything: bool = False) -> None:
        """The next chart with new points, of those in sight: a plotext build takes ~20 ms of a core that the run
        may be measuring. A chart out of sight (another tab, a zoom) is drawn as it comes back (its Resize)."""
        plots = [plot for _, plot in self.charts] + list(self.telemetry_charts.values())
        for i in range(len(plots)):
            plot = plots[(self.next_chart + i) % len(plots)]
            if plot.dirty and plot.is_on_screen:
                plot.replot()
                self.next_chart = (self.next_chart + i + 1) % len(plots)
                if not everything:
                    return

    @on(Ended)
    def _finished(self, message: Ended) -> None:
        if message.run is not self.run:
            return
        self.ended = True
        self.query_one("#run-cancel", Static).display = False
        self.add_class("-ended")
        record = message.record
        self._redraw(everything=True)
        summary: Any = summary_table(record)
        if record.device is not None and (record.workload == "roofline" or record.summary.intensity is not None):
            chart = roofline_view([record, *lab(self).records], record.device, self.size.width, height=16)
            summary = Group(summary, chart)
        if record.summary.profile is not None:
            summary = Group(summary, ops_table(record.summary.profile, "where a step's time went: its ops"))
        self.query_one("#run-summary", Static).update(summary)
        for flag in record.summary.flags:
            colour = "red" if flag.code == "beats-peak" else "yellow"  # above a measured ceiling: not a win
            self.log_view.write(f"[{colour}]{safe.markup(f'flag {flag.code}: {flag.message}')}[/]")
        s = record.summary
        for verdict in [*(s.telemetry.verdicts if s.telemetry else ()), *(s.profile.verdicts if s.profile else ())]:
            self.log_view.write(f"[cyan]{safe.markup(f'why {verdict.code}: {verdict.message}')}[/]")
        self.log_view.write(safe.markup(f"run {record.short_id} {record.status}"
                                        + (f": {record.error}" if record.error else "")))
        box = self.query_one("#run-summary-box")
        focused = self.app.focused
        if focused is None or self in focused.ancestors:  # the user is here: the answer opens zoomed, taking the keys
            box.focus()
            self.screen.maximized = box

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "run" and event.state == WorkerState.ERROR:
            self.log_view.write(f"[red]the run could not be streamed: {event.worker.error}[/]")
            if self.run is not None:
                self.run.recorder.finish("failed", str(event.worker.error))
                self.post_message(self.Ended(self.run, self.run.recorder.record()))


