"""The lab leaves the cores to the run it shows: a run on this CPU is measured on the cores the lab draws on.
The real app under the pilot, a run replayed at its own pace (its worker takes no CPU: what is measured is the lab's)."""

from __future__ import annotations

import time

import pytest

from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.run import RunPane
from tpulab.lab.widgets.charts import SeriesPlot

from .helpers import Replay, conv_events, wait_for

pytestmark = pytest.mark.alone  # a share of a core: another test beside it would slow the lab, not load it


async def lab_share(pilot, seconds: float) -> float:
    """The lab's CPU over the next `seconds`, as a share of one core (its threads' too: the charts build in them)."""
    t0, c0 = time.monotonic(), time.process_time()
    await pilot.pause(seconds)
    return (time.process_time() - c0) / (time.monotonic() - t0)


async def test_a_streaming_run_costs_the_lab_a_fraction_of_a_core_and_none_of_a_chart_out_of_sight(db, cpu_machine):
    """200 steps a second and telemetry twice a second, as a small conv streams them. Each progress message (ten a
    second) laid the whole lab out again, in case its header had grown a line, and each chart was drawn in turn, in
    sight or not: the lab took 38-40% of a core here on the run's tab and 20-23% on another (16-17% and 8% since)."""
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        pane = app.query_one(RunPane)
        pane.start(Replay("conv", app.report, conv_events(2000, step_s=0.005, sample_every=100), paced=True))
        await wait_for(pilot, lambda: pane.run is not None and pane.run.recorder.steps_done() > 50, 10)
        chart = pane.chart("busy %")
        assert isinstance(chart, SeriesPlot)
        drawn = chart.render()
        in_sight = await lab_share(pilot, 2)
        assert chart.render() is not drawn  # the charts moved on: the lab did its work
        await pilot.press("1")
        await pilot.pause(0.5)
        drawn = chart.render()
        elsewhere = await lab_share(pilot, 2)
        assert chart.render() is drawn and chart.dirty  # new points, not drawn out of sight
        await pilot.press("3")
        await wait_for(pilot, lambda: chart.render() is not drawn, 2)  # drawn as it comes back
        assert pane.running, "the run ended before the lab was measured"
        print(f"the lab beside a streaming run: {in_sight:.0%} of a core on its tab, {elsewhere:.0%} elsewhere")
        assert in_sight < 0.3 and elsewhere < 0.15, f"the lab took {in_sight:.0%} of a core, {elsewhere:.0%} elsewhere"
        pane.cancel()


async def test_a_status_line_still_grows_and_shrinks_with_its_text():
    """Laid out again only when its height changes: a header that wraps onto more lines, or fewer, gets them."""
    from textual.app import App

    from tpulab.lab.widgets.status_line import StatusLine

    class One(App[None]):
        def compose(self):
            yield StatusLine("starting", id="line")

    app = One()
    async with app.run_test(size=(40, 10)) as pilot:
        line = app.query_one(StatusLine)
        heights = []
        for words in ("12/100 steps", "12/100 steps " * 8, "13/100 steps " * 8, "14/100 steps"):
            line.say(words)
            await pilot.pause()
            heights.append(line.size.height)
        assert heights == [1, 3, 3, 1]
