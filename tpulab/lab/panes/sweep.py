"""The sweep pane: a grid's points streaming in, throughput against the first swept parameter, the best marked.

The sweep runs point after point in a thread worker (each point its own run, as in the CLI); a
message per started and finished point keeps the chart, the table and the findings current.
`o` opens the best configuration in the form; `x` stops after the current point, again stops it. With no sweep
running, the tab lists the kept sweeps (the command line's too, `tpulab sweep`), newest first: Enter opens one as
`tpulab results sweep ID` shows it, `l` lists them again.
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
from tpulab.base.events import RunRecord, SweepRecord
from tpulab.engine.estimate import Estimate
from tpulab.engine.store import StoreError
from tpulab.engine.sweep import Findings, Point, PointFinished, PointStarted, Sweep, Unkept, kept_points
from tpulab.lab.panes import lab
from tpulab.lab.widgets.rows import RowTable
from tpulab.views.sweep import (
    FIGURES,
    capacity_legend,
    capacity_rows,
    capacity_series,
    capacity_title,
    curve_title,
    axis_text,
    chart_series,
    curve_series,
    chart_title,
    figures,
    findings_lines,
    kept_findings,
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

CAPACITY_OPTIONAL = ("flags", "offered")  # left out of a narrow capacity table, the first first
SWEEP_OPTIONAL = ("ceiling", "peak", "GFLOP/s", "median", "flags")  # left out of a narrow table, the first first
KEPT_COLUMNS = ("id", "started", "workload", "status", "points", "swept")  # the kept sweeps, as `results sweep` lists them
KEPT_OPTIONAL = ("started", "status")
NO_SWEEP = "in Workloads, tick sweep, give fields lists (8,16,32), then Sweep (ctrl+r)"


class SweepPane(Vertical):
    BINDINGS = [Binding("o", "open_best", "Open best in form", show=False, id="sweep.open_best"),  # said in its status
                Binding("l", "list_kept", "The kept sweeps (the command line's too): Enter opens one", show=False,
                        id="sweep.list")]

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
        self.kept: list[SweepRecord] | None = None  # listed in the table (no sweep shown), newest first
        self.opened: tuple[SweepRecord, list[Point]] | None = None  # a kept sweep shown again, its points' runs read

    def compose(self) -> ComposeResult:
        from tpulab.lab.widgets.charts import SeriesPlot  # the chart widgets load after the first paint (this pane is lazy)

        yield Static(f"No sweep yet: {NO_SWEEP}.", id="sweep-header")
        bar = ProgressBar(id="sweep-progress", show_eta=False)
        bar.display = False  # an empty bar would say that something runs: shown once something does
        yield bar
        with Horizontal(id="sweep-body"):
            yield SeriesPlot("throughput against the first swept parameter", id="sweep-chart")
            with Vertical(id="sweep-side"):
                yield RowTable(id="sweep-table", header_height=2)
                yield Static(id="sweep-findings")

    def on_mount(self) -> None:
        self.action_list_kept()

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
        if self.opened is not None:
            return list(self.opened[0].axes)
        return list(self.sweep.grid.axes) if self.sweep else []

    def shown(self) -> tuple[list[Point], Findings] | None:
        """The points of the sweep on show (running here, or kept and opened) and what they found."""
        if self.opened is not None:
            record, points = self.opened
            return points, kept_findings(record, points)
        return (self.sweep.points, self.sweep.findings()) if self.sweep is not None else None

    # --- the kept sweeps -------------------------------------------------------------------------
    def action_list_kept(self) -> None:
        """The kept sweeps in the table, newest first (a running sweep keeps the tab until it ends)."""
        if self.running:
            self.notify("a sweep is running: its points show here until it ends (x stops it)", severity="warning")
            return
        self.sweep = self.opened = None  # (a sweep run here is kept: it is listed too)
        self._read_kept()

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-kept")
    def _read_kept(self) -> None:
        try:
            kept = lab(self).store.sweeps()
        except StoreError as e:
            self.app.call_from_thread(self._header_text, f"[red]{safe.markup(e)}[/]")
            return
        self.app.call_from_thread(self._list, kept)

    def _list(self, kept: list[SweepRecord]) -> None:
        from tpulab.lab.widgets.charts import SeriesPlot

        if self.sweep is not None or self.opened is not None:  # a sweep began (or one opened) meanwhile: it is shown
            return
        self.kept = kept
        self.query_one("#sweep-progress", ProgressBar).display = False
        chart = self.query_one("#sweep-chart", SeriesPlot)
        chart.series.clear()
        chart.lines.clear()
        chart.right = ()
        chart.title = "throughput against the first swept parameter"
        chart.replot()
        self.query_one("#sweep-findings", Static).update("")
        rows = [tuple(map(safe.visible, (k.short_id, k.started_at[5:16].replace("T", " "), k.workload, k.status,
                                         str(len(k.points)), ", ".join(f"{a} {len(v)}" for a, v in k.axes.items()))))
                for k in kept]
        if kept:
            self._table(KEPT_COLUMNS, rows, KEPT_OPTIONAL)
        else:  # no header over no rows: the words above say how to make one
            self.query_one("#sweep-table", DataTable).clear(columns=True)
        self._header_text(f"[b]{len(kept)} kept sweep(s)[/b], newest first: Enter opens one | a new one: "
                          f"{NO_SWEEP}" if kept else f"No sweep yet: {NO_SWEEP}.")

    @on(RowTable.RowSelected, "#sweep-table")
    def _chosen(self, event: RowTable.RowSelected) -> None:
        if self.kept is not None and self.sweep is None and self.opened is None and event.cursor_row < len(self.kept):
            self._open_kept(self.kept[event.cursor_row].id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="sweep-kept")
    def _open_kept(self, sweep_id: str) -> None:
        store = lab(self).store
        try:
            record = store.get_sweep(sweep_id)
            runs = store.sweep_runs(record)
        except StoreError as e:
            self.app.call_from_thread(self.notify, safe.visible(e), severity="error", markup=False)
            return
        self.app.call_from_thread(self._show_kept, record, kept_points(record, runs))

    def _show_kept(self, record: SweepRecord, points: list[Point]) -> None:
        if self.sweep is not None:  # a sweep began meanwhile: it has the tab
            return
        self.opened, self.kept = (record, points), None
        done = sum(p.status == "finished" for p in points)
        self._header_text(f"[b]sweep {record.short_id}[/b] " + safe.markup(
            f"of {record.workload} over " + (", ".join(f"{a} ({len(v)})" for a, v in record.axes.items()) or "one point")
            + f" | kept {record.started_at[:16].replace('T', ' ')}, {record.status}: {done}/{len(points)} point(s) "
              "finished | o: open the best in the form, l: the kept sweeps"))
        self._show()

    def start(self, sweep: Sweep) -> None:
        from tpulab.lab.widgets.charts import SeriesPlot

        self.sweep, self.opened, self.kept = sweep, None, None
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
        self._header_text(
            f"[b]sweep {self.sweep.id[:8]}[/b] " + safe.markup(
                f"of {grid.workload.title} over " + (", ".join(f"{a} ({len(v)})" for a, v in grid.axes.items())
                                                     or "one point") + f" | {status}"))

    def _header_text(self, markup: str) -> None:
        self.query_one("#sweep-header", Static).update(markup)

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

        on_show = self.shown()
        assert on_show is not None
        points, found = on_show
        axes = self.axes
        chart = self.query_one("#sweep-chart", SeriesPlot)
        chart.series.clear()
        chart.lines.clear()
        chart.right = ()
        if found.capacity:
            self._show_capacity(points, found)
            return
        curve = found.latency is not None  # throughput against latency (a token's), the knee marked
        chart.title = curve_title(found, axes) if curve else chart_title(axes, found.by)
        chart.xticks, chart.xlog = x_axis(points, axes[0]) if axes and not curve else (None, False)
        for name, pts in (curve_series(points) if curve else chart_series(points, axes, by=found.by)).items():
            for x, y in pts:
                chart.add(name, x, y)
        best = found.best
        if curve and found.knee is not None:
            for pts in curve_series([found.knee]).values():
                chart.add("knee", *pts[0])
        elif best is not None and best.rate(found.by) and axes:
            for pts in chart_series([best], axes, x_values(points, axes[0]), found.by).values():
                chart.add("best", *pts[0])
        chart.replot()
        listed = ranked([p for p in points if p.records], found.by)
        prefix = rate_prefix(listed)
        header = ("", *(axis_text(a) for a in axes), *FIGURES)
        rows = [(marks(p, found), *(value_text(p.values[a]) for a in axes), *(cells[f] for f in FIGURES))
                for p in listed for cells in (figures(p, prefix),)]
        self._table(header, rows)
        legend = marks_legend(found)  # what the first column's marks mean
        self.query_one("#sweep-findings", Static).update(
            "\n".join(([f"[dim]{legend}[/]"] if legend else []) + [safe.markup(line) for line in
                                                                   findings_lines(found, axes)]))

    def _show_capacity(self, points: list[Point], found: Findings) -> None:
        """A capacity sweep: its bounded figures as shares of their bounds (the bound a line at 100%) and, on the
        right axis, the load offered and served, against the load; its points by load; what it found."""
        from tpulab.lab.widgets.charts import SeriesPlot

        chart = self.query_one("#sweep-chart", SeriesPlot)
        bounded, rates = capacity_series(found)
        chart.title, chart.right = capacity_title(found), tuple(rates)
        chart.lines = {"SLO": 100.0}
        chart.xticks, chart.xlog = x_axis(points, found.capacity[0].capacity.load)
        for name, pts in {**bounded, **rates}.items():
            for x, y in sorted(pts):
                chart.add(name, x, y)
        chart.replot()
        header, rows = capacity_rows(found, self.axes)
        self._table(tuple(header), [tuple(r) for r in rows], CAPACITY_OPTIONAL)
        legend = capacity_legend(found)
        self.query_one("#sweep-findings", Static).update(
            "\n".join(([f"[dim]{safe.markup(legend)}[/]"] if legend else []) + [safe.markup(line) for line in
                                                                             findings_lines(found, self.axes)]))

    def _table(self, header: tuple[str, ...], rows: list[tuple[str, ...]],
               optional: tuple[str, ...] = SWEEP_OPTIONAL) -> None:
        """The points' rows, fitted to the table's width as the results listing is: a parameter's name on two
        lines, the flags shortened, then the figures a rate needs least left out (the ceiling's fraction first), so
        no figure is cut and the table never scrolls sideways (at 80 columns the table has about half of them)."""
        table = self.query_one("#sweep-table", DataTable)
        names = tuple(h.replace(" ", "\n", 1) for h in header)  # 'batch\nsize': the header is two lines high
        widest = tuple(max(n.split("\n"), key=len) for n in names)  # what a column's header needs
        region = table.scrollable_content_region.width or self.size.width // 2 - 2
        room = region - (2 * table.cell_padding - 1) * len(header) - 1  # `fit` counts one space between columns
        fitted = fmt.fit([widest, *rows], room, widest, optional=optional, shrinkable=("flags", "swept"))
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
        from tpulab.workloads import registry

        on_show = self.shown()
        found = on_show[1] if on_show else None
        if found is None or found.best is None:
            self.notify("no finished point yet", severity="warning")
            return
        if self.opened is None:
            assert self.sweep is not None
            base, workload = self.sweep.grid.base, self.sweep.grid.workload
        elif (found_workload := registry().get(self.opened[0].workload)) is None:
            self.notify(f"its workload, {self.opened[0].workload}, is not installed here", severity="warning",
                        markup=False)
            return
        else:
            base, workload = self.opened[0].base, found_workload
        await lab(self).open_configuration(workload, {**base, **found.best.values})
        near = f"; not detectably slower: {', '.join(label(p, self.axes) for p in found.near)}" if found.near else ""
        self.notify(f"the best configuration: {label(found.best, self.axes)} "
                    f"({fmt.rate(found.best.throughput, 'examples/s')}){near}", markup=False)
