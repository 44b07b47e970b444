"""What a serve run shows while it goes, in every front end: the load so far (requests in flight, TTFT and TPOT at p50
and p99, completed of sent, the arrival rate achieved), said by the client every half second. The real worker against
stub servers on 127.0.0.1, the real lab under the pilot at 80x24, the real command line at 80 columns; the snapshot
replays a serve run's events at fixed times (a real one's timings differ each time)."""

from __future__ import annotations

import re
import time
from importlib import metadata
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Static

from tpulab.base.charts import ChartContext
from tpulab.base.events import Log, Step
from tpulab.engine.store import Store
from tpulab.lab.app import TpulabApp
from tpulab.lab.widgets.charts import SeriesPlot
from tpulab.views.narrate import describe
from tpulab.workloads.serve import SERVE
from tpulab.workloads.serve.figures import PHASE_REQUEST
from tpulab.workloads.serve.live import CHARTS, PHASE_LOAD, Tally, seconds_left

from .helpers import Replay, chart, cpu_only, fixed_machine, run_cli, serve_events, text, tokens, wait_for

pytest.importorskip("aiohttp")

SMALL = (80, 24)
T0 = 1.77e9
QUANTILES = r"p50 [\d.,]+ p99 [\d.,]+ m?s"
WORDS = re.compile(rf"(\d+) in flight +(?:(\d+/\d+) done +)?TTFT {QUANTILES} +TPOT {QUANTILES} +sent [\d.,]+/s")  # a
# tick's whole line once requests completed (the counts the cell a narrow line leaves out first)


def held(h: Any, n: int, body: dict[str, Any], flight: int) -> None:
    """Each request held about 0.3 s (its first token after 80 ms, then one every 30 ms): at 20 requests a second,
    several are in flight at once."""
    time.sleep(0.05)
    tokens(h, body["max_tokens"], gap=0.03)


def request(i: int, ttft: float) -> Step:
    return Step(step=i, seconds=1.0, phase=PHASE_REQUEST, metrics={"ttft_s": ttft, "tpot_s": ttft / 10})


def test_a_tick_counts_the_requests_in_flight_and_the_quantiles_of_the_completed_ones():
    tally = Tally()
    for t in (0.0, 0.1, 0.2, 0.3, 0.4):
        tally.sent(t)
    for i, ttft in enumerate((0.3, 0.1, 0.2)):
        tally.ended(request(i, ttft))
    tally.ended(None)  # failed or cancelled: no longer in flight, not completed
    tick = tally.step(0.5)
    m = tick.metrics
    assert (m["in_flight"], m["sent"], m["completed"], tick.step, tick.steps) == (1, 5, 3, 3, 0)
    assert m["ttft_p50_s"] == 0.2 and m["ttft_p99_s"] == pytest.approx(0.298)  # the 99th between 0.2 and 0.3
    assert m["tpot_p50_s"] == pytest.approx(0.02)
    assert m["achieved_rate"] == pytest.approx(10.0)  # 4 gaps in 0.4 s


def test_a_tick_before_any_request_completed_says_only_the_counts():
    tally = Tally()
    tally.sent(0.0)
    m = tally.step(0.5).metrics
    assert m == {"in_flight": 1.0, "sent": 1.0, "completed": 0.0}


def test_the_time_left_is_the_loads_not_a_requests_time_by_those_left():
    """80 requests at 20 a second, 20 sent by the tick at 1 s: 3 s of sending left (not 60 requests x their 0.3 s);
    within --duration; at a concurrency, at the rate they were sent so far; none before the first tick."""
    tally = Tally()
    for i in range(20):
        tally.sent(i / 20)
    steps = [request(0, 0.1), tally.step(1.0), request(1, 0.1)]
    p = {"rate": 20.0, "concurrency": 0, "requests": 80, "duration": 60.0}
    assert seconds_left(p, steps) == pytest.approx(3.0)
    assert seconds_left({**p, "duration": 2.5}, steps) == pytest.approx(1.5)
    assert seconds_left({**p, "concurrency": 4}, steps) == pytest.approx(60 / (19 / 0.95))
    assert seconds_left(p, steps[:1]) is None


def test_the_headless_run_says_the_load_as_it_goes_in_80_columns_and_ends_on_the_summarys_figures(stub, db):
    server = stub(held)
    r = run_cli("--run", "serve", "--preset", "smoke", "--no-ui", "--endpoint", server.url, "--db", str(db),
                "--rate", "20", "--burstiness", "100", timeout=60, env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr[-2000:]
    said = [line for line in r.stdout.splitlines() if " in flight" in line]
    whole = [WORDS.fullmatch(line.strip()) for line in said if "TTFT" in line]
    assert whole and all(whole), said  # each on one line of at most 80 columns, nothing wrapped or cut
    assert max(int(m[1]) for m in whole) >= 2 and whole[-1][1] == "0" and whole[-1][2] in (None, "16/16")
    record = Store(db).records()[0]
    ticks = [s for s in record.steps if s.phase == PHASE_LOAD]
    f, last = record.summary.figures, ticks[-1].metrics
    for key in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"):  # the last word of the load is the summary's
        assert last[f"{key}_s"] == pytest.approx(f[key], rel=1e-12), key
    assert last["completed"] == f["completed"] == 16 and last["in_flight"] == 0


async def test_the_lab_shows_a_serve_runs_live_figures_at_80x24(stub, db, tmp_path):
    """Started with the keyboard from the form, against a server that holds each request: while it runs (4 s), the Run
    tab shows the requests in flight and the TTFT and TPOT quantiles so far, in its charts and in words, all in sight."""
    server = stub(held)
    report = cpu_only(tmp_path / "machine", {"aiohttp": metadata.version("aiohttp"), "jax": metadata.version("jax")})
    app = TpulabApp(probe=False, db=db, report=report, workload="serve",
                    params={"endpoint": server.url, "rate": 20.0, "burstiness": 100.0, "requests": 80,
                            "prompt_tokens": 4, "output_tokens": 8, "duration": 10.0, "timeout": 10.0})
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: app.query_one("#param-form").params is not None, 10)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: "TPOT p50" in text(app.query_one("#run-summary", Static)), 30)
        shown = text(app.query_one("#run-summary", Static))
        assert "in flight" in shown and "TTFT p50" in shown and "done" in shown and "sent" in shown
        assert app.run_pane.running
        box = app.query_one("#run-summary-box")
        await pilot.pause()
        assert box.max_scroll_y == 0 and box.max_scroll_x == 0  # every line of it in sight
        flight, ttft, tpot = (chart(app, c.title) for c in CHARTS)
        await wait_for(pilot, lambda: len(flight.points("in flight")) >= 2, 10)
        assert ttft.points("TTFT p50") and ttft.points("TTFT p99") and tpot.points("TPOT p99")
        await pilot.pause(0.8)  # each chart drawn, one a tick
        for plot in (flight, ttft, tpot):
            drawn = " ".join(plot.render_line(y).text.strip() for y in range(plot.size.height))
            assert plot.title in " ".join(drawn.split()) and "…" not in drawn, drawn
        await wait_for(pilot, lambda: bool(app.records), 30)
        assert app.records[0].status == "finished" and app.records[0].summary.figures["completed"] == 80
        assert "80/80 requests" in text(app.query_one("#run-header", Static))  # the ticks and totals count as none


def test_a_ticks_words_fit_80_columns_in_one_line():
    """A load with second-long latencies, hundreds in flight: the headless line still fits 80 columns."""
    tally = Tally()
    for i in range(900):
        tally.sent(i / 200)
    for i in range(400):
        tally.ended(request(i, 1.5 + i / 100))
    rec = Replay("serve", fixed_machine(), []).recorder
    line = text(describe(tally.step(4.5), rec, 80) or "", 80)
    assert line.count("\n") == 1 and "500 in flight" in line and "TTFT p50" in line and "TPOT p50" in line, line


class OneChart(App):
    """A chart as the Run tab draws each of serve's three at 80x24: a third of the width, 7 rows."""

    CSS = "SeriesPlot { width: 26; height: 7; }"

    def compose(self) -> ComposeResult:
        yield SeriesPlot(id="plot")


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.title)
async def test_each_chart_at_80x24_keeps_its_header_whole_and_ticks_its_seconds_round(chart):
    """Latencies that barely move (40 ms +-1%, said on the axis) still leave the title and both series named; the
    seconds axis ticks at round values, not plotext's own (0.50 1.00 1.25 1.75)."""
    app = OneChart()
    async with app.run_test(size=SMALL) as pilot:
        plot = app.query_one(SeriesPlot)
        plot.configure(chart.title)
        tally = Tally()
        for k in range(1, 5):  # a tick every half second, its latencies within 1% of 40 ms
            tally.sent(k / 2)
            tally.ended(Step(step=k, seconds=0.1, metrics={"ttft_s": 0.04 + k / 1e4, "tpot_s": 0.04 - k / 1e4}))
            tally.sent(k / 2 + 0.1)
            for series, x, y in chart.points(tally.step(k / 2), ChartContext(SERVE)):
                plot.add(series, x, y)
        plot.replot()
        await wait_for(pilot, lambda: "┤" in "".join(plot.render_line(y).text for y in range(plot.size.height)), 10)
        shown = [plot.render_line(y).text.rstrip() for y in range(plot.size.height)]
        header = " ".join(" ".join(shown[:3]).split())
        assert header.startswith(chart.title) and "…" not in header, shown
        assert all(f"━ {name}" in header for name in plot.series), shown
        assert shown[-1].split() == ["1", "2"], shown


def test_snapshot_a_serve_run_in_flight(snap_compare, lab_with):
    """Mid-run on a server falling behind (its events to 2.1 s given as they came, then the run held): the charts of
    the load so far and its words."""
    async def running(pilot):
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(pilot.app.query("#run-pane")), 5)
        pane = pilot.app.run_pane
        await wait_for(pilot, lambda: pane.log_view.size.width > 0, 5)  # the log's width known: its lines wrap once
        await pilot.pause()
        # its events at their times, then an empty log line (as a real run's next tick would, the lab takes the last
        # steps at once), and the worker holds
        events = [*serve_events(until=2.1, t0=T0), Log(t=T0 + 2.1, text="")]
        pane.start(Replay("serve", pilot.app.report, events, held=True, paced=True))
        last = [e for e in events if isinstance(e, Step) and e.phase == PHASE_LOAD][-1].metrics
        said = f"{last['completed']:.0f}/{last['sent']:.0f} done"  # the last tick's words: every event taken
        await wait_for(pilot, lambda: said in text(pilot.app.query_one("#run-summary", Static)), 10)
        await pilot.pause(1.2)  # the charts drawn, one a tick

    assert snap_compare(lab_with([]), run_before=running, terminal_size=SMALL)
