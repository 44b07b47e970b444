"""A serve sweep over --rate is a capacity: the highest rate whose p99s meet the SLO, between which two swept rates
the capacity lies and whether the p99s' intervals decide it, and the knee. End to end against a stub server on
127.0.0.1 whose first token waits longer the more requests are in flight; the words, the table, the charts and the
lab's Sweep tab from runs the real recorder kept."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable

import pytest

from tpulab.base.capacity import CLEARS, EXCEEDS, OVER, WITHIN
from tpulab.base.events import Device, Finished, RunRecord, Started, Step
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.sweep import Point, findings, parse_values
from tpulab.views.sweep import capacity_series, findings_lines, sweep_table, text_chart
from tpulab.workloads.serve import SERVE
from tpulab.workloads.serve.figures import PHASE_REQUEST, PHASE_TOTALS, totals_metrics

from .helpers import cpu_only, run_cli, text, tokens

pytest.importorskip("aiohttp")

SLOTS, WAIT_S, MOST_S, GAP_S = 3, 0.15, 3.0, 0.1


def busy(h: BaseHTTPRequestHandler, n: int, body: dict[str, Any], flight: int) -> None:
    """A server of 3 slots: each request in flight beyond them delays the first token by 150 ms (at most 3 s); then
    3 tokens 100 ms apart, so each request holds its slot about 0.3 s and more."""
    time.sleep(min(MOST_S, WAIT_S * max(0, flight - SLOTS)))
    tokens(h, 3, gap=GAP_S)


def sweep(db, url: str, rates: str, slo_ttft: str, *flags: str):
    """`tpulab sweep serve` over `rates` against `url`: even arrivals (gamma shape 100), 12 requests a rate; TPOT's
    bound out of the way (each stream's tokens are 100 ms apart)."""
    return run_cli("sweep", "serve", "--endpoint", url, "--rate", rates, "--burstiness", "100", "--requests", "12",
                   "--prompt-tokens", "4", "--output-tokens", "3", "--slo-ttft", slo_ttft, "--slo-tpot", "1000",
                   "--timeout", "20", "--db", str(db), *flags, timeout=120)


def test_a_sweep_names_the_highest_rate_meeting_the_slo_and_a_stricter_slo_a_lower_one(stub, db):
    """At 4 requests/s (a request every 0.25 s, each about 0.3 s long) two or three are in flight: no wait, TTFT
    about 0.1 s. At 12 a second about four are: a wait of 0.15-0.6 s. At 48 a second all 12 arrive within 0.25 s:
    the last waits 9 x 0.15 s. So a TTFT p99 bound of 1.2 s is met up to 12 a second and missed at 48; one of 0.35 s
    is met at 4 and missed at 12 (the margins are 0.2 s and more: this machine's own delays are far below)."""
    server = stub(busy)
    r = sweep(db, server.url, "4,8,12,48", "1.2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    said = " ".join(r.stdout.split())
    assert ("highest rate meeting the SLO: 12 requests/s (TTFT p99" in said
            and "; the next swept, 48, misses it (TTFT p99" in said
            and ": the capacity lies between 12 and 48 requests/s" in said), said[-3000:]
    assert "the SLO: a rate meets it where its TTFT p99 is within --slo-ttft and its TPOT p99 within --slo-tpot" in said
    assert "at 12 and 48 stand on the figures alone, not on their 95% intervals" in said  # no p99 interval of 12
    assert "TTFT p99 and TPOT p99 as % of their SLO bound (100%; at most 300%) against rate" in said
    assert "requests/s offered and served against rate" in said
    strict = sweep(db, server.url, "4,12", "0.35", "--json")
    assert strict.returncode == 0, strict.stderr[-2000:]
    [found] = json.loads(strict.stdout.splitlines()[-1])["capacity"]
    assert (found["highest_meeting"], found["first_missing"]) == (4.0, 12.0)
    assert server.asked == 4 * 12 + 2 * 12


# --- from kept runs: the intervals, the knee, a failed point, the views ---------------------------------------
def kept(tmp_path, rate: float, ttft: Callable[[int], float], n: int = 20, queue_s: float = 0.0,
         failed: bool = False) -> RunRecord:
    """A serve run at `rate` as the real recorder keeps it: `n` requests sent on time, request i's first token
    after ttft(i) and i x `queue_s` more (a server falling behind: each waits longer), then 9 more tokens 10 ms
    apart."""
    p = {**SERVE.defaults(), "endpoint": "http://127.0.0.1:8080/v1", "rate": rate, "requests": n, "slo_ttft": 0.5,
         "slo_tpot": 100.0}
    rec = RunRecorder(RunSpec(SERVE, p, "tensorflow", "asked for", "cpu"), cpu_only(tmp_path))
    rec.feed(Started(workload="serve", device=Device(kind="cpu", name="test CPU"), dtype="", flops_per_step=None,
                     steps_total=n, per_replica_batch=1, synthetic=True))
    sends = [i / rate for i in range(n)]
    for i, sent in enumerate(sends):
        first = ttft(i) + i * queue_s
        rec.feed(Step(step=i, seconds=first + 0.09, phase=PHASE_REQUEST, metrics={
            "ttft_s": first, "tpot_s": 0.01, "e2e_s": first + 0.09, "output_tokens": 10.0, "due_s": sent,
            "sent_s": sent, "prompt_tokens": 16.0}))
    end = sends[-1] + ttft(n - 1) + (n - 1) * queue_s + 0.09
    rec.feed(Step(step=n, seconds=end, steps=0, phase=PHASE_TOTALS,
                  metrics=totals_metrics([(s, s) for s in sends], [0.01] * 9 * n, end)))
    if failed:
        rec.finish("failed", "http://127.0.0.1:8080/v1 stopped request 3 mid-stream")
    else:
        rec.feed(Finished())
        rec.finish("finished")
    return rec.record()


def at(rate: float, record: RunRecord) -> Point:
    return Point({"rate": rate}, record.params, records=[record])


@pytest.fixture
def told(tmp_path) -> list[Point]:
    """400 requests a rate (enough for a p99's interval): at 1 and 2 a second every TTFT is well within 0.5 s; at 4,
    four of them take 0.9 s, so the p99 (0.306 s) is within but its interval reaches past it; at 8 every TTFT is 1 s
    and the server falls behind (each request ends 0.05 s later than the one before)."""
    return [at(1, kept(tmp_path, 1, lambda i: 0.1, 400)), at(2, kept(tmp_path, 2, lambda i: 0.2, 400)),
            at(4, kept(tmp_path, 4, lambda i: 0.9 if i % 100 == 99 else 0.3, 400)),
            at(8, kept(tmp_path, 8, lambda i: 1.0, 400, queue_s=0.05))]


def test_the_capacity_lies_between_two_swept_rates_each_verdict_said_with_its_interval(told):
    found = findings(told, None)
    [c] = found.capacity
    assert [j.load for j in c.judged] == [1, 2, 4, 8]
    assert [[v.word for v in j.verdicts] for j in c.judged] == [[CLEARS, CLEARS], [CLEARS, CLEARS],
                                                                [WITHIN, CLEARS], [EXCEEDS, CLEARS]]
    assert (c.highest.load, c.missed.load) == (4, 8) and not c.highest.decided and c.missed.decided
    assert (c.knee.load, c.behind.load) == (4, 8)  # at 8 a second the ends are 0.125 + 0.05 s apart: 5.7 a second
    lines = findings_lines(found, ["rate"])
    assert lines[0] == ("the SLO: a rate meets it where its TTFT p99 is within --slo-ttft and its TPOT p99 within "
                        "--slo-tpot (TTFT p99 at most 500.0 ms, TPOT p99 at most 100.0 ms)")
    assert lines[1] == ("highest rate meeting the SLO: 4 requests/s (TTFT p99 306.0 ms; TPOT p99 10.0 ms); the next "
                        "swept, 8, misses it (TTFT p99 20.750 s, over 500.0 ms; TPOT p99 10.0 ms): the capacity lies "
                        "between 4 and 8 requests/s")  # 0.3 + 0.01 x 0.6 s; 1 s + 395.01 x 0.05 s
    assert lines[2].startswith("  the verdict at 4 stands on the figures alone, not on their 95% intervals")
    assert lines[3].startswith("knee: 4 requests/s, the highest rate served within 10% (the noise threshold) of the "
                               "requests/s offered") and "at 8, 5.7 served of 8.0 offered" in lines[3]


def test_the_table_marks_the_capacity_and_the_knee_and_the_charts_set_each_p99_against_its_bound(told):
    found = findings(told, None)
    table = text(sweep_table(told, ["rate"], found, "sweep"), width=80)
    rows = [line.split() for line in table.splitlines()]
    assert ["CK", "4", "4.0", "4.0", "306.0", "ms", "10.0", "ms", "meets?", "synthetic-data"] in rows
    assert next(r for r in rows if r[:1] == ["8"])[:8] == ["8", "8.0", "5.7", "20.750", "s", "10.0", "ms", "misses"]
    assert "C the highest rate meeting the SLO, K the knee, ? a verdict by the figures alone" in " ".join(table.split())
    bounded, rates = capacity_series(found)
    assert [x for x, _ in bounded["TTFT p99"]] == [1, 2, 4, 8]
    assert [y for _, y in bounded["TTFT p99"]] == pytest.approx([20.0, 40.0, 61.2, 300.0])  # % of 0.5 s, the last
    # drawn at 3 times its bound (20.75 s is 41.5 times it)
    assert [x for x, _ in rates["served"]] == [1, 2, 4, 8] and rates["offered"][-1] == (8, pytest.approx(8.0))
    chart = text_chart(told, ["rate"], found, 80).plain
    assert "TTFT p99 and TPOT p99 as % of their SLO bound (100%; at most 300%) against rate" in chart
    assert "-- the SLO's bound" in chart and "-- served" in chart and "-- offered" in chart


def test_a_failed_rate_misses_and_a_rate_above_the_first_miss_that_meets_is_named(tmp_path):
    points = [at(1, kept(tmp_path, 1, lambda i: 0.1)), at(2, kept(tmp_path, 2, lambda i: 0.1, failed=True)),
              at(4, kept(tmp_path, 4, lambda i: 0.1))]
    found = findings(points, None)
    [c] = found.capacity
    assert (c.highest.load, c.missed.load, [j.load for j in c.again]) == (1, 2, [4])
    lines = " ".join(findings_lines(found, ["rate"]))
    assert "the next swept, 2, misses it (its run failed: http://127.0.0.1:8080/v1 stopped request 3" in lines
    assert "above the first miss, 4 met the SLO again" in lines and "the verdict at 1 stands on the figures alone" in lines


def test_every_rate_meeting_the_slo_says_the_capacity_is_at_least_the_highest(tmp_path):
    points = [at(r, kept(tmp_path, r, lambda i, r=r: 0.1 * r)) for r in (1, 2)]
    [c] = findings(points, None).capacity
    assert c.highest.load == 2 and c.missed is None and c.knee.load == 2 and c.behind is None
    assert [v.word for v in c.judged[1].verdicts] == [WITHIN, WITHIN]  # 20 requests: no p99 interval
    line = findings_lines(findings(points, None), ["rate"])[1]
    assert line.startswith("every swept rate meets the SLO: the capacity is at least the highest, 2 requests/s")
    lowest = findings([at(1, kept(tmp_path, 1, lambda i: 0.9))], None)
    assert [v.word for v in lowest.capacity[0].judged[0].verdicts] == [OVER, WITHIN]
    assert findings_lines(lowest, ["rate"])[1].startswith("no swept rate meets the SLO: the lowest, 1 requests/s, "
                                                         "misses it (TTFT p99 900.0 ms, over 500.0 ms")


def test_runs_that_keep_no_completion_rate_are_judged_by_their_p99s_with_no_knee(tmp_path):
    """A run kept before its record had the completion rate: its SLO is judged, its knee said to be unmeasured."""
    record = kept(tmp_path, 1, lambda i: 0.1)
    del record.summary.figures["completion_rate"]
    found = findings([at(1, record)], None)
    [c] = found.capacity
    assert c.highest.load == 1 and c.knee is None and c.behind is None
    assert findings_lines(found, ["rate"])[-1] == "knee: not measured (the runs keep no requests a second)"


def test_a_rate_range_doubles_from_its_first_value_and_a_bad_one_is_one_line():
    assert parse_values(SERVE.spec("rate"), "0.5..8") == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert parse_values(SERVE.spec("rate"), "3..10") == [3.0, 6.0]
    r = run_cli("sweep", "serve", "--endpoint", "http://127.0.0.1:9/v1", "--rate", "8..0.5", "--no-save", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--rate range must go up from a positive number, " \
        "e.g. 0.5..8 (got '8..0.5')" in r.stderr, r.stderr


async def test_the_lab_sweep_tab_draws_each_p99_against_its_bound_and_the_rates(tmp_path, db):
    from textual.widgets import Static

    from tpulab.engine.sweep import build_grid
    from tpulab.lab.app import TpulabApp
    from tpulab.lab.widgets.charts import SeriesPlot

    from .helpers import ReplayedSweep, sweep_tab

    ttft = {1: 0.1, 2: 0.2, 4: 0.3, 8: 1.0}
    machine = cpu_only(tmp_path, {"aiohttp": "3.13.2"})  # the client serve drives your server with
    grid, _ = build_grid(SERVE, {"rate": "1,2,4,8", "endpoint": "http://127.0.0.1:8080/v1"}, machine)
    app = TpulabApp(probe=False, db=db, report=machine)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await sweep_tab(pilot, ReplayedSweep(grid, machine, lambda p: kept(
            tmp_path, p.values["rate"], lambda i: ttft[p.values["rate"]], queue_s=0.2 if p.values["rate"] == 8 else 0)))
        chart = pane.query_one("#sweep-chart", SeriesPlot)
        assert [y for _, y in chart.points("TTFT p99")] == pytest.approx([20.0, 40.0, 60.0, 300.0])  # % of 0.5 s
        assert chart.title == "% of SLO bound, requests/s (right), by rate"  # its header names TTFT p99 and TPOT p99
        assert chart.lines == {"SLO": 100.0} and chart.right == ("served", "offered")
        said = text(pane.query_one("#sweep-findings", Static))
        assert "highest rate meeting the SLO: 4 requests/s" in said and "knee: 4 requests/s" in said
