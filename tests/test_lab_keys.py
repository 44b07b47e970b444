"""What a newcomer meets at 80x24, keyboard only: the keys, the focus, the questions before a long run."""

from __future__ import annotations


import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Footer, Input, OptionList, Select, Static

from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.confirm import ConfirmRun
from tpulab.lab.panes.help import HelpScreen
from tpulab.lab.panes.results import ResultsPane
from tpulab.lab.panes.run import RunLog, RunPane
from tpulab.lab.panes.sweep import SweepPane
from tpulab.lab.widgets.param_form import ParamForm

from .helpers import Replay, conv_events, form_open, notes, run_tiny_conv, text, type_into, wait_for

SMALL = (80, 24)


@pytest.mark.parametrize("tab", ["1", "2", "4", "5"])
async def test_footer_at_80_columns_shows_start_cancel_quit_help_in_that_order(lab, tab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(tab)  # whatever tab: a pane's own keys are said in the pane, the footer keeps these
        await pilot.pause(0.3)
        await wait_for(pilot, lambda: bool(app.query_one(Footer).query("FooterKey")), 5)
        shown = [key.description for key in app.query_one(Footer).query("FooterKey")]
        assert shown[:4] == ["Start run", "Cancel", "Quit", "Help"]
        assert all(key.region.right <= 80 for key in app.query_one(Footer).query("FooterKey"))


@pytest.mark.parametrize("key", ["question_mark", "f1", "h"])
async def test_help_opens_with_its_keys_and_escape_closes_it(lab, key):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        shown = text(app.screen.query_one("#help-text", Static))
        for line in ("ctrl+r  start the form's run or sweep", "?  these keys (h too; F1 from a text field)",
                     "x  stop the run after its", "x again kills the run", "enter  Select: the workload list",
                     "ctrl+o  How the run is made", "enter, space  Toggle: a tick box",
                     "alt+1..5  the tabs, from inside a text field too", "g  Glossary of terms",
                     "z  the focused pane fills the screen"):
            assert line in shown
        for binding in (*ResultsPane.BINDINGS, *SweepPane.BINDINGS):  # each tab's own keys too
            assert f"{binding.key}  {binding.description}" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


async def test_escape_closes_the_keys_panel(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        app.action_show_help_panel()
        await pilot.pause()
        assert app.screen.query("HelpPanel")
        await pilot.press("escape")
        await pilot.pause()
        assert not app.screen.query("HelpPanel")


@pytest.mark.parametrize(("search", "title"), [("help", "Help"), ("quit", "Quit"), ("keys", "Keys")])
async def test_the_palette_finds_help_keys_and_quit(lab, search, title):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), 5)
        await pilot.press(*search)
        found = app.screen.query_one(CommandList)
        await wait_for(pilot, lambda: found.option_count > 0, 5)
        titles = [found.get_option_at_index(i).prompt for i in range(found.option_count)]
        assert any(str(t).splitlines()[0].strip() == title for t in titles), titles
        if title == "Help":
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 5)


async def test_digits_type_into_a_field_and_alt_digits_switch_tabs_from_inside(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        await type_into(pilot, app, "batch_size", "12345")
        assert app.query_one("#param-batch_size", Input).value == "12345"
        assert app.query_one("#tabs").active == "workloads"
        await pilot.press("alt+4")
        await wait_for(pilot, lambda: app.query_one("#tabs").active == "results", 5)
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "results-table", 5)
        app.query_one("#results-filter", Input).focus()
        await pilot.press("3", "4")
        assert app.query_one("#results-filter", Input).value == "34"
        await pilot.press("inverted_exclamation_mark")  # what most terminals send for alt+1 (Esc 1)
        await wait_for(pilot, lambda: app.query_one("#tabs").active == "runtime", 5)
        await pilot.press("3")  # outside a text field a digit switches
        await wait_for(pilot, lambda: app.query_one("#tabs").active == "run", 5)


async def test_ctrl_r_outside_the_form_says_what_it_will_run_first(lab):
    app = lab(params={"batch_size": 8, "image_size": 32})
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert app.query_one("#tabs").active == "runtime"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun), 10)
        shown = " ".join(text(app.screen.query_one("#confirm-text", Static)).split())
        assert "Run Raw convolution with batch_size=8, image_size=32?" in shown
        assert "global batch 8 = 8 per replica x 1 shard(s) on CPU" in shown and "estimate ~" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmRun) and app.query_one(RunPane).run is None


async def test_a_run_estimated_over_five_minutes_asks_first(lab):
    app = lab(workload="transformer")
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: "estimate ~" in text(app.query_one("#plan", Static)), 10)
        app.query_one("#param-batch_size", Input).focus()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun), 10)
        shown = " ".join(text(app.screen.query_one("#confirm-text", Static)).split())
        assert "Run Transformer" in shown and "It would take about 9h" in shown and "assuming 25% of peak" in shown
        await pilot.press("n")
        await pilot.pause(0.3)
        assert app.query_one(RunPane).run is None
        assert not [w for w in app.workers if w.group == "run"]


async def test_an_invalid_form_says_which_field_stops_the_run(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        await type_into(pilot, app, "batch_size", "0")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "batch size: --batch-size must be an integer from 1 to 4096 (got '0')" in notes(app)
        assert app.query_one(RunPane).run is None


async def test_z_zooms_the_focused_pane_and_escape_restores_it(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        pane = app.query_one("#runtime-pane")
        await wait_for(pilot, lambda: app.focused is pane, 5)
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is pane and pane.region.width == 80
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None
        await pilot.press("z", "z")
        assert app.screen.maximized is None


async def test_a_workloads_edited_values_are_kept_when_the_user_returns(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        await type_into(pilot, app, "batch_size", "8")
        await type_into(pilot, app, "image_size", "32")
        listing = app.query_one("#workload-list", OptionList)
        listing.focus()
        await pilot.press("home", "down", "enter")
        await wait_for(pilot, lambda: app.query_one(ParamForm).workload.name == "fashion-mnist", 5)
        await pilot.press("up", "enter")
        await wait_for(pilot, lambda: app.query_one(ParamForm).workload.name == "conv", 5)
        form = app.query_one(ParamForm)
        await wait_for(pilot, lambda: form.params is not None, 5)
        assert form.params["batch_size"] == 8 and form.params["image_size"] == 32


async def test_focus_is_visible_and_every_tab_stop_shows(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        app.query_one("#sweep-mode").focus()
        await pilot.press("tab")
        assert app.focused is app.query_one("#preset", Select)  # the form itself is no tab stop
        await pilot.press("tab")
        batch, image = app.query_one("#param-batch_size", Input), app.query_one("#param-image_size", Input)
        assert app.focused is batch
        await pilot.pause()
        assert batch.styles.background != image.styles.background


async def test_an_open_dropdown_pushes_the_text_below_it_down(lab):
    app = lab()
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        preset = app.query_one("#preset", Select)
        preset.focus()
        await pilot.press("enter")
        await pilot.pause()
        overlay = preset.query_one("SelectOverlay")
        assert overlay.display and overlay.region.height >= 3
        help_text = app.query_one("#help-batch_size", Static)
        assert help_text.region.y >= overlay.region.bottom  # below it, never under it


@pytest.mark.slow
async def test_after_a_run_at_80x24_its_summary_takes_the_keys_and_reads_whole(lab):
    app = lab(params={"backend": "jax"})  # the quickest to start: the lab's keys are any backend's
    app.report = TpulabApp(probe=False).report  # the real machine: the run is real
    async with app.run_test(size=SMALL) as pilot:
        await run_tiny_conv(pilot, app)
        box = app.query_one("#run-summary-box")
        await wait_for(pilot, lambda: app.focused is box, 10)
        assert app.screen.maximized is box and box.region.width == 80  # it opens zoomed
        assert box.max_scroll_y > 0 and box.scroll_y == 0
        await pilot.press("pagedown")
        await pilot.pause()
        assert box.scroll_y > 0
        await pilot.press("z")  # the charts and the log again
        await pilot.pause()
        assert app.screen.maximized is None
        log = app.query_one(RunLog)
        assert all(len(line.text.rstrip()) <= log.scrollable_content_region.width for line in log.lines)
        words = " ".join(" ".join(line.text.split()) for line in log.lines)
        assert "first call (trace + compile, 1 iteration(s))" in words  # wrapped between words, not cut
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is box and box.region.width == 80
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None


def test_snapshot_help(snap_compare, lab):
    async def opened(pilot):
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(lab(), run_before=opened, terminal_size=SMALL)


@pytest.mark.slow
async def test_a_cancel_names_the_step_it_waits_for_until_the_run_ends(lab):
    app = lab(params={"backend": "jax"})  # the quickest to start: the lab's cancel is any backend's
    app.report = TpulabApp(probe=False).report
    async with app.run_test(size=SMALL) as pilot:
        await form_open(pilot)
        # steps of about two seconds (each convolving 256 channels into 512): x comes as one starts, and the line is
        # read while the run waits for it; a step of a few milliseconds (or, on a loaded machine, of one second) had
        # ended the run, and hidden the line, by then. 20 steps: estimated under the 5 minutes that would ask first
        for name, value in (("batch_size", "8"), ("image_size", "128"), ("channels", "256"), ("filters", "512"),
                            ("iterations", "20"), ("warmup", "1")):
            await type_into(pilot, app, name, value)
        await pilot.press("ctrl+r")
        pane = app.query_one(RunPane)
        await wait_for(pilot, lambda: pane.run is not None and pane.run.recorder.steps_done() >= 2)
        await pilot.press("x")
        line = pane.query_one("#run-cancel", Static)
        await wait_for(pilot, lambda: line.display or bool(app.records), 10)
        assert line.display and "cancel: stopping after step " in text(line) and "(each ~" in text(line)
        await wait_for(pilot, lambda: bool(app.records))
        assert app.records[0].status == "cancelled" and not line.display


@pytest.mark.parametrize("view", ["zoomed", "charts"])
def test_snapshot_run_tab_after_a_run(snap_compare, lab, view):
    """A replayed conv run (fixed timings and telemetry): its summary as it opens, zoomed, then the charts."""
    app = lab()

    async def ran(pilot):
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        app.query_one(RunPane).start(Replay("conv", app.report, conv_events()))
        await wait_for(pilot, lambda: len(app.records) == 1, 10)
        await wait_for(pilot, lambda: app.screen.maximized is app.query_one("#run-summary-box"), 5)
        if view == "charts":
            await pilot.press("escape")
        app.clear_notifications()
        await pilot.pause(0.5)  # the charts drawn, one per tick

    assert snap_compare(app, run_before=ran, terminal_size=SMALL)
