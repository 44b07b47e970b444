"""What a newcomer meets at 80x24, the third pass (issue 57): Escape leaves any text field, the preset says what
the fields hold, every key the lab takes is in `?`, `k` shows the article's cards, ctrl+r never asks again during a
run, a chart whose data barely move says so. The real app under the pilot, runs replayed or held, records built
through the real recorder, a real Store in tmp_path."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Checkbox, Input, OptionList, Select, Static

from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.confirm import ConfirmRun
from tpulab.lab.panes.help import HelpScreen, key_text
from tpulab.lab.widgets.charts import SeriesPlot, narrow_note
from tpulab.lab.widgets.param_form import EDITED, ParamForm
from tpulab.workloads import registry

from .helpers import (Replay, conv_events, form_open, make_record, notes, results_tab, text, type_into,
                      wait_for)
from .monkey import lab_classes

SMALL = (80, 24)


# --- 4: Escape leaves a text field ---------------------------------------------------------------------------
async def test_escape_leaves_the_filter_keeping_its_words_and_q_then_quits(lab_with):
    """The issue's trap: `/`, then Escape stayed in the filter, and q was typed into it ('0 of 0 runs matching q')."""
    runs = [make_record(median=0.01 * (i + 1)) for i in range(5)]
    runs += [make_record(workload="fashion-mnist", median=0.5) for _ in range(3)]
    app = lab_with(runs)
    async with app.run_test(size=SMALL) as pilot:
        table = await results_tab(pilot, 8)
        await pilot.press("slash", *"conv")
        field = app.query_one("#results-filter", Input)
        assert app.focused is field
        await pilot.press("escape")
        assert app.focused is table and field.value == "conv"  # out of the field; what was typed stays
        await wait_for(pilot, lambda: table.row_count == 5, 5)  # and it still filters
        assert "5 of 5 runs matching" in text(app.query_one("#results-help", Static))
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


@pytest.mark.parametrize("sweep", [False, True])
async def test_escape_leaves_a_field_of_the_form_for_the_workload_list(lab, sweep):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        if sweep:  # every field a text field
            app.query_one("#sweep-mode", Checkbox).value = True
            await wait_for(pilot, lambda: bool(app.query(ParamForm)) and app.query_one(ParamForm).sweep, 5)
            await pilot.pause(0.2)  # laid out: a field out of sight would give the focus back to the list
        for name in ("batch_size", "image_size"):
            await type_into(pilot, app, name, "16")
            assert app.focused is app.query_one(f"#param-{name}", Input)
            await pilot.press("escape")
            assert app.focused is app.query_one("#workload-list", OptionList), name
            assert app.query_one(f"#param-{name}", Input).value == "16"
        await pilot.press("3")  # the lab's keys are back: a digit switches tabs
        await wait_for(pilot, lambda: app.query_one("#tabs").active == "run", 5)


# --- 6: the preset shown is the preset the fields hold --------------------------------------------------------
def preset_shown(app) -> str:
    select = app.query_one("#preset", Select)
    return select.prompt if select.is_blank() else str(select.value)


async def test_the_preset_shown_is_the_one_the_fields_hold(lab):
    """`tpulab --run conv --preset smoke`, then sweep ticked: it read '(defaults)' beside smoke's values."""
    conv = registry()["conv"]
    app = lab(workload="conv", params=conv.preset("smoke"))  # as the command line opens the lab
    async with app.run_test(size=SMALL) as pilot:
        form = app.query_one(ParamForm)
        await wait_for(pilot, lambda: form.is_mounted and form.params is not None, 5)
        assert preset_shown(app) == "smoke"
        app.query_one("#sweep-mode", Checkbox).value = True  # the values stay: so does their name
        await wait_for(pilot, lambda: app.query_one(ParamForm).sweep, 5)
        await pilot.pause()
        assert app.query_one("#param-batch_size", Input).value == "8" and preset_shown(app) == "smoke"
        await type_into(pilot, app, "batch_size", "8,16")  # smoke no more
        await wait_for(pilot, lambda: preset_shown(app) == EDITED, 5)
        await type_into(pilot, app, "batch_size", "8")
        await wait_for(pilot, lambda: preset_shown(app) == "smoke", 5)
        app.query_one("#sweep-mode", Checkbox).value = False
        # the form is replaced: between the old one's removal and the new one's mount there is none
        await wait_for(pilot, lambda: bool(app.query(ParamForm)) and not app.query_one(ParamForm).sweep, 5)
        await pilot.pause(0.2)
        await type_into(pilot, app, "image_size", "256")
        await wait_for(pilot, lambda: preset_shown(app) == EDITED, 5)
        app.query_one("#preset", Select).value = "article"  # a preset chosen fills the fields, and is shown
        await pilot.pause()
        assert preset_shown(app) == "article" and app.query_one(ParamForm).params["batch_size"] == 128


# --- 7: every key in `?` --------------------------------------------------------------------------------------
async def test_help_lists_every_binding_of_the_app_and_of_each_pane_and_dialog(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = text(app.screen.query_one("#help-text", Static))
        missing = [f"{cls.__name__}: {b.key}" for cls in lab_classes() for b in vars(cls).get("BINDINGS", ())
                   if isinstance(b, Binding) and f"{key_text(b)}  {b.tooltip or b.description}" not in shown]
        assert not missing
        sections = {title: " | ".join(f"{keys}  {what}" for keys, what in section)
                    for title, section in app.help_sections()}  # what the screen shows, by section
        assert "ctrl+r  start the form's run or sweep" in sections["Run tab"]
        assert "x  stop the run after its current step" in sections["Run tab"]
        assert "c  Machine card" in sections["Runtime tab"]
        assert "enter, y  Run it" in sections["The question before a run"]


# --- 8: k shows the article's cards ---------------------------------------------------------------------------
async def test_k_with_no_card_of_ones_own_shows_the_articles_and_how_to_make_one(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await results_tab(pilot, 0)
        await pilot.press("k")
        shown = app.query_one("#comparison", Static)
        await wait_for(pilot, lambda: "Colab" in text(shown), 10)
        words = " ".join(text(shown).split())
        assert "no machine card of your own yet: c on the Runtime tab makes one (or tpulab bench --quick)" in words
        for machine in ("Colab CPU", "Colab K80 GPU", "Colab TPU v2-8"):
            assert machine in words
        assert "published in the 2018 Colab TPU article" in words


# --- 9: ctrl+r during a run -----------------------------------------------------------------------------------
@pytest.mark.parametrize("tab", ["1", "2", "3"])
async def test_ctrl_r_during_a_run_says_it_is_in_flight_and_asks_nothing(lab, tab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        app.run_pane.start(Replay("conv", app.report, conv_events()[:-1], held=True))  # no Finished: it holds
        await wait_for(pilot, lambda: app.run_pane.running and bool(app.run_pane.run.recorder.steps), 10)
        await pilot.press(tab)
        await pilot.pause()
        if tab == "2":
            app.query_one("#param-batch_size", Input).focus()
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmRun)
        assert notes(app)[-1] == "A run or sweep is in progress: cancel it first (x)."
        await pilot.press("escape", "x")
        await wait_for(pilot, lambda: bool(app.records), 10)
        assert app.records[0].status == "cancelled"


# --- 10: a chart whose data barely move -----------------------------------------------------------------------
class ChartHost(App):
    """One chart, as tall as a chart in the Run tab at 80x24."""

    CSS = "SeriesPlot { height: 8; }"

    def compose(self) -> ComposeResult:
        yield SeriesPlot(id="plot")


def wobble(plot: SeriesPlot) -> None:
    """1,430 to 1,440 examples/s: a 0.7% wobble."""
    plot.configure("examples/s")
    for step in range(2, 40):
        plot.add("step", step, 1435 + ((step * 7) % 11 - 5))


async def drawn(pilot, plot: SeriesPlot) -> list[str]:
    plot.replot()
    await wait_for(pilot, lambda: "┤" in "".join(plot.render_line(y).text for y in range(plot.size.height)), 10)
    return [plot.render_line(y).text for y in range(plot.size.height)]


@pytest.mark.parametrize(("lo", "hi", "said"), [
    (1430.0, 1440.0, "(axis from 1,430: ±0.35% swings)"), (10.5, 10.9, "(axis from 10.5: ±1.9% swings)"),
    (10.0, 10.8, None), (0.0, 1.0, None), (5.0, 5.0, None), (-1440.0, -1430.0, "(axis from -1,440: ±0.35% swings)")])
def test_a_narrow_range_is_named_with_where_its_axis_starts(lo, hi, said):
    assert narrow_note(lo, hi) == said


async def test_a_chart_whose_data_barely_move_says_where_its_axis_starts():
    app = ChartHost()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        wobble(plot)
        shown = await drawn(pilot, plot)
        assert shown[0].startswith("examples/s (axis from 1,430: ±0.35% swings)  ━ step")
        plot.add("step", 40, 700.0)  # a real drop: the axis spans it, and nothing needs saying
        plot.replot()
        await wait_for(pilot, lambda: "700" in " ".join(plot.render_line(y).text for y in range(plot.size.height)), 10)
        assert plot.render_line(0).text.startswith("examples/s  ━ step")


def test_snapshot_chart_of_a_narrow_range(snap_compare):
    async def plotted(pilot):
        plot = pilot.app.query_one(SeriesPlot)
        wobble(plot)
        await drawn(pilot, plot)

    assert snap_compare(ChartHost(), run_before=plotted, terminal_size=SMALL)


# --- 5. the sweep's table at 80 columns -------------------------------------------------------------------------
def three_axis_sweep(cpu_machine):
    """A replayed sweep over batch, image size and filters (8 points), each point's rate from its batch."""
    from tpulab.engine.sweep import build_grid
    from tpulab.workloads import registry

    from .helpers import ReplayedSweep, make_record

    grid, _ = build_grid(registry()["conv"], {"batch_size": "8,16", "image_size": "32,64", "filters": "16,32",
                                              "device": "cpu"}, cpu_machine, steps=3)
    sweep = ReplayedSweep(grid, cpu_machine, lambda p: make_record(batch=p.values["batch_size"],
                                                                   median=p.values["batch_size"] / 1600.0))
    sweep.id = "5eed" * 8  # the same header in every snapshot
    return sweep


async def test_the_sweep_table_fits_its_width_and_cuts_no_figure(db, cpu_machine):
    """At 80x24 the sweep's table (half the width, beside its chart) scrolled sideways and cut its last figures
    ('GF', '5.'): now the figures a rate needs least are left out instead, and every cell shown is whole."""
    from textual.widgets import DataTable

    from .helpers import sweep_tab

    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        pane = await sweep_tab(pilot, three_axis_sweep(cpu_machine))
        table = pane.query_one("#sweep-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == sum(bool(p.records) for p in pane.sweep.points))
        await pilot.pause()
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing past the edge
        headers = [str(c.label).replace("\n", " ") for c in table.columns.values()]
        assert headers[:4] == ["", "batch size", "image size", "filters"] and "throughput" in headers
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert len(rows) == sum(bool(p.records) for p in pane.sweep.points) >= 8  # (with the article's, where added)
        assert all("…" not in c for r in rows for c in r[:headers.index("throughput") + 1])
        assert all(r[headers.index("throughput")].endswith("ex/s") for r in rows)


def test_snapshot_sweep_table_at_80x24(snap_compare, cpu_machine):
    from .helpers import sweep_tab

    async def swept(pilot):
        from textual.widgets import DataTable

        pane = await sweep_tab(pilot, three_axis_sweep(cpu_machine))
        table = pane.query_one("#sweep-table", DataTable)
        done = sum(bool(p.records) for p in pane.sweep.points)  # every point's row in, its marks final
        await wait_for(pilot, lambda: table.row_count == done and "finished:" in text(pane.query_one("#sweep-header")))
        pane._show()  # drawn once more from the sweep as it ended: its last point's message may still be on its way
        await pilot.pause()

    assert snap_compare(TpulabApp(probe=False, report=cpu_machine), run_before=swept, terminal_size=SMALL)
