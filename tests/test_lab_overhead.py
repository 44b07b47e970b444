"""The lab leaves the cores to the run it shows: a chart out of sight is not drawn, and a status line lays the
screen out again only when its height changes. The real app under the pilot, a run replayed at its own pace. What
that saves, the lab's share of a core, is measured by `benchmarks/lab_overhead.py` (a share is a benchmark's)."""

from __future__ import annotations

from tpulab.lab.app import TpulabApp
from tpulab.lab.widgets.charts import SeriesPlot

from .helpers import streaming, wait_for


async def test_a_streaming_run_draws_no_chart_out_of_sight_and_draws_it_as_it_comes_back(db, cpu_machine):
    """200 steps a second and telemetry twice a second, as a small conv streams them: each chart was drawn in turn,
    in sight or not."""
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await streaming(app, pilot, 2000)
        chart = pane.chart("busy %")
        assert isinstance(chart, SeriesPlot)
        drawn = chart.render()
        await wait_for(pilot, lambda: chart.render() is not drawn, 5)  # the charts move on in sight
        await pilot.press("1")
        await pilot.pause(0.5)
        drawn = chart.render()
        await pilot.pause(2)
        assert chart.render() is drawn and chart.dirty  # new points, not drawn out of sight
        await pilot.press("3")
        await wait_for(pilot, lambda: chart.render() is not drawn, 2)  # drawn as it comes back
        assert pane.running, "the run ended before the chart came back"
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
