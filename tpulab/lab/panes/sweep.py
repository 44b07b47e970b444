"""The sweep pane: a grid's points streaming in, throughput against the first swept parameter, the best marked.

The sweep runs point after point in a thread worker (each point its own run, as in the CLI); a
message per started and finished point keeps the chart, the table and the findings current.
`o` opens the best configuration in the form; `x` stops after the current point, again stops it.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import DataTable, ProgressBar, Static
from textual.worker import Worker, WorkerState

from tpulab.base import fmt, safe
from tpulab.base.events import RunRecord
from tpulab.engine.estimate import Estimate
from tpulab.engine.sweep import Point, PointFinished, PointStarted, Sweep, Unkept
from tpulab.lab.panes import lab
from tpulab.views.sweep import (
    FIGURES,
    curve_title,
    axis_text,
    chart_series,
    curve_series,
    chart_title,
    figures,
    findings_lines,
    label,
    marks,
    marks_legend,
    point_count,
    ranked,
    rate_prefix,
    value_text,
    x_axis,
    x_values,
)

SWEEP_OPTIONAL = ("ceiling", "peak", "GFLOP/s", "median", "flags")  # left out of a narrow table, the first first


class SweepPane(Vertical):
    BINDINGS = [Binding("o", "open_best", "Open best in form", show=False, id="sweep.open_best")]  # said in its status

    class PointDone(Message):
        def __init__(self, point: Point, record: RunRecord) -> None:
            super().__init__()
            self.point, self.record = point, record

    class PointBegun(Message):
        def __init__(self, point: Point, index: int, of: int) -> None:
            super().__init__()
            self.point, self.index, self.of = point, index, of

    class Done(Message):
        def __init__(self, sweep: Sweep) -> None:
            super().__init__()
            self.sweep = sweep

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sweep: Sweep | None = None
        self._starting = False  # no point begun yet: the header still shows the estimate

    def compose(self) -> ComposeResult:
        from tpulab.lab.widgets.charts import SeriesPlot  # plotext loads after the first paint (this pane is lazy)

        yield Static("No sweep yet: in Workloads, tick sweep, give fields lists (8,16,32), then Sweep (ctrl+r).",
                     id="sweep-header")
        bar = ProgressBar(id="sweep-progress", show_eta=False)
        bar.display = False  # an empty bar would say that something runs: shown once something does
        yield bar
        with Horizontal(id="sweep-body"):
            yield SeriesPlot("throughput against the first swept parameter", id="sweep-chart")
            with Vertical(id="sweep-side"):
                yield DataTable(id="sweep-table", cursor_type="row", zebra_stripes=True, header_height=2)
                yield Static(id="sweep-findings")

    @property
    def running(self) -> bool:
        return self.sweep is not None and self.sweep.status == "running"

    def on_unmount(self) -> None:
        """The app is closing: stop after nothing more, and leave no worker behind."""
        if self.sweep is not None and self.running:
            self.sweep.stop("the lab closed")
            if self.sweep.run is not None:
                for handle in self.sweep.run.handles:
                    handle.kill()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "sweep" and event.state == WorkerState.ERROR and self.sweep is not None:
            self.sweep.status = "failed"
            self._header(f"[red]the sweep could not go on: {event.worker.error}[/]")
            lab(self).keep_sweep(self.sweep)

    @property
    def axes(self) -> list[str]:
        return list(self.sweep.grid.axes) if self.sweep else []

    def start(self, sweep: Sweep) -> None:
        from tpulab.lab.widgets.charts import SeriesPlot

        self.sweep = sweep
        axes = self.axes
        chart = self.query_one("#sweep-chart", SeriesPlot)
        chart.configure(chart_title(axes, "examples/s"))
        table = self.query_one("#sweep-table", DataTable)
        table.clear(columns=True)
        table.add_columns("", *(safe.text(axis_text(a).replace(" ", "\n", 1)) for a in axes), *FIGURES)
        self.query_one("#sweep-findings", Static).update("")
        bar = self.query_one("#sweep-progress", ProgressBar)
        bar.update(total=len(sweep.points) * sweep.repeat, progress=0)
        bar.display = True
        self._starting = True
        self._header(f"starting: {point_count(sweep.points)}, estimate …")
        lab(self).estimate_in_background(sweep.estimate, lambda guess: self._estimated(sweep, guess))
        self._run(sweep)

    def _estimated(self, sweep: Sweep, guess: Estimate) -> None:
        """Shown while the header still says the sweep is starting (a point's progress replaces it)."""
        if self.sweep is sweep and self._starting:
            self._header(f"starting: {point_count(sweep.points)}, estimate {guess}")

    def _header(self, status: str) -> None:
        assert self.sweep is not None
        grid = self.sweep.grid
        self.query_one("#sweep-header", Static).update(
            f"[b]sweep {self.sweep.id[:8]}[/b] " + safe.markup(
                f"of {grid.workload.title} over " + (", ".join(f"{a} ({len(v)})" for a, v in grid.axes.items())
                                                     or "one point") + f" | {status}"))

    def stop(self) -> None:
        if self.sweep is None or not self.running:
            return
        if self.sweep.stopping is None:
            self.sweep.stop()
            self.notify("stopping after the current point (x again: stop the point now)", severity="warning")
        else:
            self.sweep.cancel_point()

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep")
    def _run(self, sweep: Sweep) -> None:
        """Driven as the command line drives one: each point's run, then the sweep, kept in the lab's store."""
        for event in sweep.drive(lab(self).store):
            if isinstance(event, PointStarted):
                self.post_message(self.PointBegun(event.point, event.index, event.of))
            elif isinstance(event, PointFinished):
                self.post_message(self.PointDone(event.point, event.record))
            elif isinstance(event, Unkept):
                self.app.call_from_thread(self.notify, event.error, title="not kept", severity="error", timeout=15)
        self.post_message(self.Done(sweep))

    @on(PointBegun)
    def _begun(self, message: PointBegun) -> None:
        self._starting = False
        self._header(f"point {message.index}/{message.of}: {label(message.point, self.axes)}")

    @on(PointDone)
    def _done(self, message: PointDone) -> None:
        lab(self).list_record(message.record)
        bar = self.query_one("#sweep-progress", ProgressBar)
        bar.advance(1)
        self._show()

    def _show(self) -> None:
        """Chart, table and findings from the points so far."""
        from tpulab.lab.widgets.charts import SeriesPlot

        assert self.sweep is not None
        axes = self.axes
        found = self.sweep.findings()
        chart = self.query_one("#sweep-chart", SeriesPlot)
        chart.series.clear()
        curve = found.latency is not None  # throughput against latency (a token's), the knee marked
        chart.title = curve_title(found, axes) if curve else chart_title(axes, found.by)
        chart.xticks, chart.xlog = x_axis(self.sweep.points, axes[0]) if axes and not curve else (None, False)
        for name, pts in (curve_series(self.sweep.points) if curve
                          else chart_series(self.sweep.points, axes, by=found.by)).items():
            for x, y in pts:
                chart.add(name, x, y)
        best = found.best
        if curve and found.knee is not None:
            for pts in curve_series([found.knee]).values():
                chart.add("knee", *pts[0])
        elif best is not None and best.rate(found.by) and axes:
            for pts in chart_series([best], axes, x_values(self.sweep.points, axes[0]), found.by).values():
                chart.add("best", *pts[0])
        chart.replot()
        listed = ranked([p for p in self.sweep.points if p.records], found.by)
        prefix = rate_prefix(listed)
        header = ("", *(axis_text(a) for a in axes), *FIGURES)
        rows = [(marks(p, found), *(value_text(p.values[a]) for a in axes), *(cells[f] for f in FIGURES))
                for p in listed for cells in (figures(p, prefix),)]
        self._table(header, rows)
        legend = marks_legend(found)  # what the first column's marks mean
        self.query_one("#sweep-findings", Static).update(
            "\n".join(([f"[dim]{legend}[/]"] if legend else []) + [safe.markup(line) for line in
                                                                   findings_lines(found, axes)]))

    def _table(self, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        """The points' rows, fitted to the table's width as the results listing is: a parameter's name on two
        lines, the flags shortened, then the figures a rate needs least left out (the ceiling's fraction first), so
        no figure is cut and the table never scrolls sideways (at 80 columns the table has about half of them)."""
        table = self.query_one("#sweep-table", DataTable)
        names = tuple(h.replace(" ", "\n", 1) for h in header)  # 'batch\nsize': the header is two lines high
        widest = tuple(max(n.split("\n"), key=len) for n in names)  # what a column's header needs
        region = table.scrollable_content_region.width or self.size.width // 2 - 2
        room = region - (2 * table.cell_padding - 1) * len(header) - 1  # `fit` counts one space between columns
        fitted = fmt.fit([widest, *rows], room, widest, optional=SWEEP_OPTIONAL, shrinkable=("flags",))
        table.clear(columns=True)
        table.add_columns(*(safe.text(names[widest.index(w)]) for w in fitted[0]))
        for cells in fitted[1:]:
            table.add_row(*map(safe.text, cells))

    @on(Done)
    def _finished(self, message: Done) -> None:
        sweep = message.sweep
        done = sum(p.status == "finished" for p in sweep.points)
        self._header(f"{sweep.status}: {done}/{len(sweep.points)} point(s) finished"
                     + (f" ({sweep.stopping})" if sweep.stopping else "") + " | o: open the best in the form")
        self._show()

    async def action_open_best(self) -> None:
        found = self.sweep.findings() if self.sweep else None
        if self.sweep is None or found is None or found.best is None:
            self.notify("no finished point yet", severity="warning")
            return
        params = {**self.sweep.grid.base, **found.best.values}
        await lab(self).open_configuration(self.sweep.grid.workload, params)
        near = f"; not detectably slower: {', '.join(label(p, self.axes) for p in found.near)}" if found.near else ""
        self.notify(f"the best configuration: {label(found.best, self.axes)} "
                    f"({fmt.rate(found.best.throughput, 'examples/s')}){near}", markup=False)
