"""What a newcomer meets at 80x24, the second pass: hints only while true, no toast over the answer, charts whose
titles, labels and legends fit, the keys of every pane in the help. The real app under the pilot, runs replayed
from recorded events, records built through the real recorder, a real Store in tmp_path."""

from __future__ import annotations


import pytest
from textual.widgets import Button, DataTable, Static

from tpulab.base.charts import ticks
from tpulab.base.events import RunRecord
from tpulab.lab.panes.run import RunLog, RunPane
from tpulab.lab.widgets.charts import SeriesPlot

from .helpers import Replay, conv_events, decode_events, make_record, results_tab, text, wait_for

SMALL = (80, 24)


def convs() -> list[RunRecord]:
    """Eight conv runs of the same work at fixed ids and starts, oldest first: the three oldest each twice as fast
    as the one before (they list last, where a compare's room comes from)."""
    runs = [make_record(1, 2.0), make_record(2, 1.0, backend="jax"), make_record(4, 0.5)]
    runs += [make_record(1, 1.0 + i / 10) for i in range(5)]
    for n, r in enumerate(runs, 1):
        r.id, r.started_at = f"{n:02d}" + "c0ffee" * 5, f"2026-03-01T09:{n:02d}:00"
    return runs


async def compared(pilot) -> None:
    """The three oldest runs (the listing's last rows) marked, oldest first, then compared with m."""
    await results_tab(pilot, 8)
    await pilot.press(*["down"] * 7, "space", "up", "space", "up", "space", "down", "down", "m")
    await wait_for(pilot, lambda: "4.00x" in text(pilot.app.query_one("#comparison", Static)), 10)
    await pilot.pause()


def bars_text(app) -> list[str]:
    chart = app.query_one("#compare-chart")
    return [chart.render_line(y).text.rstrip() for y in range(chart.size.height)]


async def test_a_comparisons_bars_each_name_their_run_within_the_chart(lab_with):
    app = lab_with(convs())
    async with app.run_test(size=SMALL) as pilot:
        await compared(pilot)
        chart = app.query_one("#compare-chart")
        lines = bars_text(app)
        assert chart.region.right <= 80
        for run in convs()[:3]:  # every bar names its run, whole, on the chart's own rows
            assert any(line.startswith(run.short_id) for line in lines), lines
        assert all(len(line) <= chart.size.width for line in lines)
        assert any(line.endswith("4.00x") for line in lines)


async def test_after_a_compare_the_tables_cursor_row_is_in_sight(lab_with):
    app = lab_with(convs())
    async with app.run_test(size=SMALL) as pilot:
        await compared(pilot)
        await pilot.pause(0.2)
        table = app.query_one("#results-table", DataTable)
        assert table.cursor_row == 7
        top = table.scroll_y
        assert top <= table.cursor_row < top + table.scrollable_content_region.height - 1  # the header row besides


async def test_z_on_a_button_zooms_its_pane_not_the_button(lab_with):
    app = lab_with(convs())
    async with app.run_test(size=SMALL) as pilot:
        await compared(pilot)
        button = app.query_one("#compare-button", Button)
        button.focus()
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is not button and app.screen.maximized is app.query_one("#results-pane")


async def run_replayed(pilot, app, workload: str, events) -> RunPane:
    await pilot.press("3")
    await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
    pane = app.query_one(RunPane)
    pane.start(Replay(workload, app.report, events))
    await wait_for(pilot, lambda: len(app.records) == 1, 10)
    await wait_for(pilot, lambda: app.screen.maximized is app.query_one("#run-summary-box"), 5)
    return pane


@pytest.mark.parametrize("sweep", [False, True])
async def test_the_runs_settings_are_a_few_keys_away_from_anywhere_in_the_tab(lab_with, sweep):
    """ctrl+o from the workload list: the sweep tick box, then the run's settings that can be set here (backend,
    device, profile, compile), then round again; none of the workload's own hyperparameters on the way, in sweep mode (every
    field a text field) too."""
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("2")
        await wait_for(pilot, lambda: bool(app.query("#param-backend")), 5)
        if sweep:
            await pilot.press("ctrl+o", "space")
            await wait_for(pilot, lambda: type(app.query_one("#param-backend")).__name__ == "Input", 5)
        app.query_one("#workload-list").focus()
        seen = []
        for _ in range(5):
            await pilot.press("ctrl+o")
            await pilot.pause()
            seen.append(app.focused.id)
        # compile is greyed on a backend that does not compile, but may be swept
        assert seen == ["sweep-mode", "param-backend", "param-device", "param-profile",
                        "param-compile" if sweep else "sweep-mode"]


async def test_the_zoom_hint_shows_only_while_the_summary_is_zoomed_and_no_toast_covers_it(lab_with):
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        pane = await run_replayed(pilot, app, "conv", conv_events())
        hint = pane.query_one("#run-summary-hint", Static)
        assert hint.display and "zoomed" in text(hint)
        assert not app._notifications  # the summary on screen is the answer: no toast over its rows
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None and not hint.display


async def test_a_run_started_from_another_tab_logs_its_start_once(lab_with):
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)  # mounted, hidden: its log has no size yet
        pane = app.query_one(RunPane)
        pane.start(Replay("conv", app.report, conv_events()))  # as the lab starts a run: then it shows the tab
        app.action_show_tab("run")
        await wait_for(pilot, lambda: len(app.records) == 1, 10)
        await pilot.press("escape")  # the ended run's summary is zoomed: a log never shown yet has no size
        log = pane.query_one(RunLog)
        await wait_for(pilot, lambda: bool(log.written), 5)  # its size known: what it deferred is written
        assert sum(str(content).startswith("starting conv") for content in log.written) == 1  # what a re-wrap writes


async def test_a_run_finishing_while_another_tab_is_open_is_announced(lab_with):
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        await pilot.press("4")
        app.query_one(RunPane).start(Replay("conv", app.report, conv_events()))
        await wait_for(pilot, lambda: len(app.records) == 1, 10)
        await pilot.pause()
        assert [n.message for n in app._notifications] == [f"run {app.records[0].short_id} finished"]


@pytest.mark.parametrize(("lo", "hi", "most", "labels"), [
    (0.8577, 0.8695, 4, ["0.860", "0.865"]),  # the digits the spacing needs, not the data's own
    (8868.8, 24489.4, 5, ["10k", "15k", "20k"]),
    (0.0, 100.0, 4, ["0", "50", "100"]),
    (12061.7, 12070.0, 3, ["12065", "12070"]),
])
def test_axis_ticks_carry_the_digits_their_spacing_needs(lo, hi, most, labels):
    got = ticks(lo, hi, most)
    assert [label for _, label in got] == labels
    assert all(lo <= v <= hi for v, _ in got)


async def test_a_decode_runs_charts_show_their_titles_whole(lab_with):
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        pane = await run_replayed(pilot, app, "decode", decode_events(0.012, [0.002, 0.0021, 0.0019, 0.002] * 4))
        await pilot.press("escape")
        await pilot.pause(0.6)
        for _, plot in pane.charts:
            shown = " ".join(plot.render_line(y).text.strip() for y in range(plot.size.height))
            assert plot.title in " ".join(shown.split()) and "…" not in shown, shown


@pytest.mark.parametrize("tab, pane", [("3", "#run-pane"), ("5", "#sweep-chart")])
async def test_empty_charts_say_what_they_will_show(lab_with, tab, pane):
    """Before anything ran, each chart on show has its title (a workload's charts wait for its run to name them)."""
    app = lab_with([])
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(tab)
        await wait_for(pilot, lambda: bool(app.query(pane)), 5)
        await pilot.pause()
        shown = [c for c in app.query(SeriesPlot) if c.display and c.region.height]
        assert shown
        for chart in shown:
            assert chart.title and chart.render_line(0).text.strip().startswith(chart.title[:20])


# --- the screens -------------------------------------------------------------------------------------------
def test_snapshot_compare_with_the_bars_labels(snap_compare, lab_with):
    assert snap_compare(lab_with(convs()), run_before=compared, terminal_size=SMALL)


@pytest.mark.parametrize("tab", ["3", "5"])
def test_snapshot_empty_run_and_sweep_tabs(snap_compare, lab_with, tab):
    async def opened(pilot):
        await pilot.press(tab)
        await pilot.pause(0.5)

    assert snap_compare(lab_with([]), run_before=opened, terminal_size=SMALL)


def test_snapshot_decode_run_charts(snap_compare, lab_with):
    async def ran(pilot):
        await run_replayed(pilot, pilot.app, "decode", decode_events(0.012, [0.002, 0.0021, 0.0019, 0.002] * 4))
        await pilot.press("escape")
        await pilot.pause(0.8)  # the charts drawn, one per tick

    assert snap_compare(lab_with([]), run_before=ran, terminal_size=SMALL)


# --- the CLI's sweep at 80 columns -----------------------------------------------------------------------
def sweep_points():
    """Four fashion-mnist points with long flags, one failed for a long reason, one not run yet."""
    from tpulab.base.timing import Flag
    from tpulab.engine.sweep import Point

    def rec(batch: int, median: float, flags: list[str]) -> RunRecord:
        r = make_record(batch=batch, median=median, workload="fashion-mnist")
        r.summary.flags = [Flag(code, "") for code in flags]
        return r

    points = [Point({"batch_size": b, "precision": p}, {}, False, [rec(b, m, f)]) for b, p, m, f in (
        (32, "float32", 0.01, ["noisy", "synthetic-data"]), (64, "mixed_float16", 0.015, ["beats-ceiling", "synthetic-data"]),
        (128, "float32", 0.02, ["synthetic-data"]), (256, "mixed_float16", 0.03, ["few-samples", "noisy", "synthetic-data"]))]
    failed = make_record(batch=512, status="failed")
    failed.error = "the worker ran out of memory: XLA could not allocate 12.3 GiB for the batch of 512 (try a smaller one)"
    return [*points, Point({"batch_size": 512, "precision": "float32"}, {}, False, [failed]),
            Point({"batch_size": 1024, "precision": "float32"}, {}, False, [])]


def test_the_sweep_table_at_80_columns_wraps_between_flags_and_keeps_every_reason_whole():
    from tpulab.engine.sweep import findings
    from tpulab.views.sweep import sweep_table

    points = sweep_points()
    shown = text(sweep_table(points, ["batch_size", "precision"], findings(points, None), "sweep"), 80)
    words = shown.split()
    for flag in ("synthetic-data", "beats-ceiling", "few-samples"):
        assert flag + "," in words or flag in words  # whole, never broken across lines
    assert " ".join(words).count("(try a smaller one)") == 1 and "pending" in words
    assert all(len(line) <= 80 for line in shown.splitlines())


def test_a_points_live_line_wraps_its_flags_under_their_column():
    from tpulab.views.sweep import live_line

    axes = {"batch_size": [32, 1024], "precision": ["float32", "mixed_float16"]}
    lines = live_line(sweep_points()[0], axes, 80).splitlines()
    assert len(lines) == 2 and lines[0].startswith("32 ") and lines[0].rstrip().endswith("noisy,")
    assert lines[1].strip() == "synthetic-data" and lines[1].startswith(" " * 40) and len(lines[1]) <= 80


def test_the_cli_sweep_chart_ticks_at_the_swept_values_and_keeps_its_key_off_the_data():
    from tpulab.engine.sweep import findings
    from tpulab.views.sweep import text_chart

    points = [p for p in sweep_points()[:4]]
    for p in points:
        p.values = {"batch_size": p.values["batch_size"]}
    rows = text_chart(points, ["batch_size"], findings(points, None), 80).plain.splitlines()
    frame = rows[rows.index(next(r for r in rows if "┌" in r)):rows.index(next(r for r in rows if "└" in r))]
    assert not any("best" in row for row in frame)  # the key is below the chart
    assert rows[-1].strip() == "* best"
    ticks_row = rows.index(next(r for r in rows if "└" in r)) + 1
    assert rows[ticks_row].split() == ["32", "64", "128", "256"]
