"""The lab's Results and Sweep tabs and its charts at 80x24, keyboard only: marks that show, figures that stay
whole, the sweep's marks explained, charts that can be read. The real app (or the real chart widget), records
built through the real recorder, a real Store in tmp_path."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from tpulab.base import fmt
from tpulab.base.charts import METRICS, ChartContext
from tpulab.base.events import RunRecord
from tpulab.lab.app import TpulabApp
from tpulab.lab.widgets.charts import LINE_COLOUR, PALETTE, SeriesPlot
from tpulab.workloads import registry

from .helpers import (Replay, ReplayedSweep, conv_events, kept_roofline, make_record, results_tab, sweep_tab, text,
                      wait_for)

SMALL = (80, 24)
DAY0 = datetime(2026, 3, 1, 9, 30)


def fixed(record: RunRecord, n: int) -> RunRecord:
    """The record with an id and a start of its own that do not change between test runs (for snapshots)."""
    record.id = f"{n:02d}" + "c0ffee" * 5
    record.started_at = (DAY0 + timedelta(minutes=n)).isoformat(timespec="seconds")
    return record


def mixed() -> list[RunRecord]:
    """A conv run, a fashion-mnist run, a cancelled conv run and a transformer run, oldest first."""
    return [fixed(make_record(median=0.0123), 1), fixed(make_record(workload="fashion-mnist", median=0.485), 2),
            fixed(make_record(status="cancelled", median=1.25), 3),
            fixed(make_record(workload="transformer", median=0.0684), 4)]


def row_text(table: DataTable, i: int) -> str:
    """Row `i` as the table draws it now (line 0 is the header)."""
    return table.render_line(1 + i).text


async def test_space_marks_a_row_at_once_and_the_mark_costs_no_figure(lab_with):
    runs = [fixed(make_record(median=0.485), 1), fixed(make_record(median=0.25), 2)]
    app = lab_with(runs)
    async with app.run_test(size=SMALL) as pilot:
        table = await results_tab(pilot, 2)
        before = row_text(table, 0)
        await pilot.press("space")  # no pause: the mark shows with the key
        marked = row_text(table, 0)
        assert marked.startswith("*") and not before.startswith("*")
        assert marked[1:] == before[1:]  # nothing moved: the figures keep their place and width
        assert "250.0 ms" in marked and runs[1].short_id in marked
        await pilot.press("down", "space")
        assert row_text(table, 1).startswith("*") and "485.0 ms" in row_text(table, 1)
        assert "2 marked" in text(app.query_one("#results-help", Static))
        await pilot.press("space")  # again: unmarked
        assert not row_text(table, 1).startswith("*")


async def test_at_80_columns_every_row_keeps_its_id_and_its_figures(lab_with):
    records = mixed()
    app = lab_with(records)
    async with app.run_test(size=SMALL) as pilot:
        table = await results_tab(pilot, len(records))
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing off to the right
        for i, record in enumerate(reversed(records)):  # newest first
            line = row_text(table, i)
            summary = record.summary
            assert record.short_id in line
            assert fmt.seconds(summary.step_seconds.median) in line and fmt.percent(summary.peak_fraction) in line
        # a long workload's name gives way before the backend does (issue 64: two backends' runs differ there alone)
        assert "fashion-mni…" in row_text(table, 2) and " tf " in row_text(table, 2)


def test_fit_shortens_then_leaves_out_descriptive_columns_never_an_id_or_a_figure():
    columns = ("id", "started", "workload", "status", "device", "backend", "batch", "median", "peak")
    rows = [columns, ("c0ffee01", "03-01 09:31", "fashion-mnist", "cancelled", "CPU, 2 hosts x 4", "tf", "1024",
                      "485.0 ms", "12.5%")]
    assert fmt.fit(rows, 200, columns) == rows
    shortened = fmt.fit(rows, 82, columns)
    assert "CPU, 2 …" in shortened[1] and "fashion-mnist" in shortened[1]  # the device gives way first
    narrow = fmt.fit(rows, 50, columns)
    assert narrow[0] == ("id", "workload", "status", "backend", "median", "peak")  # started, batch, device left out
    assert narrow[1][0] == "c0ffee01" and narrow[1][-2:] == ("485.0 ms", "12.5%")
    assert max(len(" ".join(r)) for r in narrow) <= 50


def test_snapshot_results_mixed_workloads(snap_compare, lab_with):
    async def listed(pilot):
        table = await results_tab(pilot, 4)
        await pilot.press("space", "down", "down", "space")
        table.focus()
        await pilot.pause()

    assert snap_compare(lab_with(mixed()), run_before=listed, terminal_size=SMALL)


def three_convs() -> list[RunRecord]:
    """Three conv runs of the same work, each twice as fast as the one before, on two backends."""
    return [fixed(make_record(1, 2.0), 1), fixed(make_record(2, 1.0, backend="jax"), 2), fixed(make_record(4, 0.5), 3)]


async def compared(pilot) -> None:
    await results_tab(pilot, 3)
    await pilot.press("space", "down", "space", "down", "space", "m")
    await wait_for(pilot, lambda: "0.25x" in text(pilot.app.query_one("#comparison", Static)), 10)
    await pilot.pause()


async def test_a_comparison_takes_the_keys_scrolls_and_zooms_at_80x24(lab_with):
    app = lab_with(three_convs())
    async with app.run_test(size=SMALL) as pilot:
        await compared(pilot)
        box = app.query_one("#comparison-box")
        assert app.focused is box and box.max_scroll_y > 0  # longer than its room: the rest is reached by keys
        await pilot.press("pagedown")
        await pilot.pause()
        assert box.scroll_y > 0
        room = box.region.height
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is box and box.region.width == 80 and box.region.height > room
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None


async def test_the_roofline_key_draws_the_devices_ceilings_and_its_newest_runs(lab_with):
    """r on a run: its device's roofline, the ceilings its rooflines measured and its runs as the index keeps them."""
    roof = kept_roofline("tensorflow", "2.20.0", "3.12")  # make_record's device: both ceilings set
    roof.started_at = DAY0.isoformat(timespec="seconds")
    runs = [fixed(make_record(median=0.5), 1), fixed(make_record(median=0.25), 2)]
    for r in runs:
        r.summary.intensity = 4.0
    app = lab_with([roof, *runs])
    async with app.run_test(size=SMALL) as pilot:
        await results_tab(pilot, 3)
        await pilot.press("r")
        shown = app.query_one("#comparison", Static)
        await wait_for(pilot, lambda: "measured ceilings" in text(shown), 10)
        assert "roofline: GFLOP/s up" in text(shown) and "*  runs" in text(shown)


def test_snapshot_comparison_zoomed(snap_compare, lab_with):
    async def zoomed(pilot):
        await compared(pilot)
        await pilot.press("z")
        await pilot.pause()

    assert snap_compare(lab_with(three_convs()), run_before=zoomed, terminal_size=SMALL)


async def test_sweep_tab_explains_its_marks_and_gives_rates_one_unit(db, cpu_machine):
    from tpulab.engine.sweep import build_grid

    rates = {8: 1600.0, 16: 264.0}  # examples a second; any other batch (the article's): 500

    def record_of(point):
        batch = point.values["batch_size"]
        return make_record(batch=batch, median=batch / rates.get(batch, 500.0))

    grid, _ = build_grid(registry()["conv"], {"batch_size": "8,16", "device": "cpu"}, cpu_machine, steps=3)
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        pane = await sweep_tab(pilot, ReplayedSweep(grid, cpu_machine, record_of))
        findings = " ".join(text(pane.query_one("#sweep-findings", Static)).split())
        assert findings.startswith("* best, A the article's configuration")
        assert pane.query_one("#sweep-findings").region.height >= 3  # on screen at 80x24, not squeezed out
        table = pane.query_one("#sweep-table", DataTable)
        shown = [str(table.get_row_at(i)[3]) for i in range(table.row_count)]  # mark, batch, median, throughput
        assert sorted(shown) == ["1.6k ex/s", "264 ex/s", "500 ex/s"]  # not "0.264 kex/s" beside "1.6 kex/s"


# --- charts --------------------------------------------------------------------------------------
class ChartHost(App):
    """One chart, as tall as a chart in the Run tab at 80x24."""

    CSS = "SeriesPlot { height: 8; }"

    def compose(self) -> ComposeResult:
        yield SeriesPlot(id="plot")


def lines(plot: SeriesPlot) -> list[str]:
    return [plot.render_line(y).text for y in range(plot.size.height)]


async def drawn(pilot, plot: SeriesPlot) -> list[str]:
    """The chart once its build (in a thread) is shown."""
    plot.replot()
    await wait_for(pilot, lambda: "┤" in "".join(lines(plot)), 10)
    return lines(plot)


def y_labels(shown: list[str], side: str = "left") -> list[float]:
    """The numbers of the left (or right) y axis."""
    pattern = r"^\s*(-?\d[\d.]*)[┤├]" if side == "left" else r"[┤├](-?\d[\d.]*)\s*$"
    return [float(m.group(1)) for line in shown if (m := re.search(pattern, line))]


async def test_empty_chart_says_so_without_axes():
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("GFLOP/s")
        await pilot.pause()
        shown = lines(plot)
        assert shown[0].startswith("GFLOP/s: nothing measured yet")
        assert not any(c in "".join(shown) for c in "┤└│")  # no axes, no made-up -1..1 range


async def test_series_named_in_the_header_not_over_the_data_and_integer_steps():
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("ms per iteration")
        for step in range(2, 5):
            plot.add("warm-up" if step == 2 else "iteration", step, 10.0 + step)
        shown = await drawn(pilot, plot)
        assert "━ warm-up" in shown[0] and "━ iteration" in shown[0]
        assert not any(name in line for line in shown[1:] for name in ("warm-up", "iteration"))
        ticks = shown[-1].split()
        assert ticks == ["2", "3", "4"]  # whole steps, not 2.00 2.50 3.00
        assert len([line for line in shown if "┤" in line or "│" in line]) >= 3  # three rows of data at least


async def test_y_axis_fits_the_data_and_names_a_peak_far_above():
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("GFLOP/s")
        plot.lines["peak"] = 498.5
        for step in range(2, 12):
            plot.add("iteration", step, 10.5 + (step % 3) * 0.2)
        shown = await drawn(pilot, plot)
        assert "peak 498.5 off scale" in shown[0]
        assert 10.5 <= min(y_labels(shown)) and max(y_labels(shown)) <= 11.0  # the data fill the height
        plot.lines["peak"] = 14.0  # in range: drawn, and named
        plot.add("iteration", 12, 10.0)
        plot.replot()
        await wait_for(pilot, lambda: "── peak 14.0" in lines(plot)[0], 10)
        assert max(y_labels(lines(plot))) >= 14.0


async def test_a_chart_spans_its_data_from_its_first_column_to_its_last():
    """busy %: the CPU above the lowest y tick, the worker below it. plotext 6.1, given y ticks, fits the x axis to
    the data within them: it began left of the first point, a quarter of the chart blank."""
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("busy %")
        for x, cpu, worker in ((3, 52.0, 49.5), (6, 55.0, 49.5), (9, 58.0, 49.5), (12, 61.0, 49.0)):
            plot.add("CPU", x, cpu)
            plot.add("worker", x, worker)
        shown = await drawn(pilot, plot)
        rows = [line for line in shown if re.match(r"^\s*[\d.]*[┤│]", line)]  # the rows of data, each after its axis
        start = rows[0].index(next(c for c in rows[0] if c in "┤│")) + 1
        assert len(rows) >= 3 and any(row[start] != " " for row in rows)  # the first point at the axis
        assert any(row[plot.size.width - 1] != " " for row in rows)  # the last at the right end


async def test_a_chart_has_no_colours_of_its_own_but_its_series_and_lines():
    """No background nor axis colour: the widget's own show, whatever the app's theme (a fixed surface colour
    stood out on another theme, and the peak's line had a white background)."""
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("GFLOP/s")
        plot.lines["peak"] = 14.0  # in range: drawn
        for step in range(2, 12):
            plot.add("iteration", step, 10.5 + (step % 3) * 0.2)
        await drawn(pilot, plot)
        built = plot.render()
        assert isinstance(built, Text)
        styles = [span.style if isinstance(span.style, Style) else Style.parse(span.style) for span in built.spans]
        assert all(style.bgcolor is None for style in styles)
        colours = {style.color.get_truecolor() for style in styles if style.color}
        assert {PALETTE[0], LINE_COLOUR} <= {tuple(c) for c in colours}  # the series' and the peak's, as the header's


async def test_loss_and_accuracy_on_their_own_axes():
    fashion = registry()["fashion-mnist"]
    assert METRICS.right(ChartContext(fashion)) == ("accuracy", "val accuracy")  # as the chart declares them
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure(METRICS.title, METRICS.right(ChartContext(fashion)))
        for step in range(1, 11):
            plot.add("loss", step, 2.3 - step * 0.2)
            plot.add("accuracy", step, 0.1 + step * 0.08)
        shown = await drawn(pilot, plot)
        assert "━ loss" in shown[0] and "━ accuracy (right)" in shown[0]
        right = y_labels(shown, "right")
        assert right and max(right) <= 0.9 and max(y_labels(shown)) >= 2.0  # each on its own scale


async def test_a_narrow_chart_names_its_series_on_more_lines_and_keeps_three_rows_of_data():
    class Narrow(ChartHost):  # a third of 80 columns: the Run tab's three charts side by side
        CSS = "SeriesPlot { height: 8; width: 26; }"

    app = Narrow()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure("ms per step")
        for step in range(1, 17):
            plot.add("warm-up" if step == 1 else "step", step, 20.0 + step % 4)
        plot.add("predict", 16, 12.0)
        shown = await drawn(pilot, plot)
        head = shown[:next(i for i, line in enumerate(shown) if "┤" in line)]  # the lines above the plot
        assert all(f"━ {name}" in " ".join(head) for name in ("warm-up", "step", "predict"))
        assert len([line for line in shown if "┤" in line or "│" in line]) >= 3
        assert shown[-1].split() == ["1", "16"]  # whole steps, the first and the last when no more fit


def test_snapshot_chart_with_a_legend_and_a_peak(snap_compare):
    async def plotted(pilot):
        plot = pilot.app.query_one(SeriesPlot)
        plot.configure("GFLOP/s")
        plot.lines["peak"] = 498.5
        for step in range(2, 30):
            plot.add("warm-up" if step < 4 else "iteration", step, 10.0 + (step % 5) * 0.2)
        await drawn(pilot, plot)

    assert snap_compare(ChartHost(), run_before=plotted, terminal_size=SMALL)


async def test_every_chart_of_the_run_tab_is_whole_with_three_rows_of_data(cpu_machine):
    from tpulab.lab.panes.run import CHART_IDS, RunPane

    app = TpulabApp(probe=False, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        app.query_one(RunPane).start(Replay("transformer", app.report, conv_events()))  # a workload of four charts
        await wait_for(pilot, lambda: app.screen.maximized is not None, 5)  # ended: its summary zoomed
        await pilot.press("escape")  # the charts again
        await wait_for(pilot, lambda: app.query_one("#chart-d").region.height > 0, 5)
        plots = [p for p in app.query_one(RunPane).query(SeriesPlot) if p.display]
        assert len(plots) == len(CHART_IDS) + 2  # every slot shows, and two of telemetry
        for plot in plots:
            assert plot.region.height >= 6, plot.id  # the header, three rows of data, the x axis and its ticks
            assert plot.parent.region.contains_region(plot.region), plot.id  # none cut by its row
