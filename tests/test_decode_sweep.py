"""A decode sweep: its latency/throughput curve, knee, speedup over batch 1 and the largest batch within
an ITL bound, from points whose runs have known token latencies."""

from __future__ import annotations

import io
import re

import pytest

from tpulab.base import fmt
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.sweep import Point, baseline_of, findings
from tpulab.views.sweep import curve_series, findings_lines, sweep_table, text_chart
from tpulab.workloads.decode import DECODE
from tpulab.workloads.conv import CONV

from .helpers import cpu_only, decode_events, run_cli, text
from .helpers import text as shown


# ITL (s) by prompt length and batch: throughput = batch / ITL
TOKENS = "tokens/s"  # what the decode workload counts, and so what its sweep ranks by
ITL = {8: {1: 0.010, 2: 0.0105, 4: 0.012, 8: 0.023}, 16: {1: 0.011, 2: 0.012, 4: 0.016, 8: 0.030}}
AXES = {"batch_size": [1, 2, 4, 8], "prompt_len": [8, 16]}


def point(tmp_path, batch: int, prompt: int) -> Point:
    values = {"batch_size": batch, "prompt_len": prompt}
    p = {**DECODE.preset("smoke"), **values, "device": "cpu", "backend": "jax"}
    rec = RunRecorder(RunSpec(DECODE, p, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    for e in decode_events(0.05, [ITL[prompt][batch]] * 5, copy_s=0.01, batch=batch):
        rec.feed(e)
    rec.finish("finished")
    return Point(values, p, records=[rec.record()])


@pytest.fixture
def points(tmp_path) -> list[Point]:
    return [point(tmp_path, b, n) for n in AXES["prompt_len"] for b in AXES["batch_size"]]


def at(points: list[Point], batch: int, prompt: int) -> Point:
    return next(p for p in points if p.values == {"batch_size": batch, "prompt_len": prompt})


def test_the_curve_is_tokens_per_s_against_itl_one_series_per_prompt_length(points):
    series = curve_series(points)
    assert list(series) == ["prompt len 8", "prompt len 16"]
    assert series["prompt len 8"] == pytest.approx([(10.0, 100.0), (10.5, 2 / 0.0105), (12.0, 4 / 0.012),
                                                    (23.0, 8 / 0.023)])


def test_the_knee_the_speedup_over_batch_1_and_the_largest_batch_within_the_bound(points):
    found = findings(points, None, baseline_of(DECODE, AXES), max_itl_s=0.015)
    assert found.by == TOKENS and found.latency == "itl_p50"  # not GFLOP/s, though a longer prompt costs more per token
    assert found.best is at(points, 8, 8)
    assert found.knee is at(points, 4, 8)  # 333 tokens/s is within 5% of batch 8's 348, at half its latency
    assert found.baseline is at(points, 1, 8)
    assert found.over_baseline == pytest.approx((8 / 0.023) / 100)
    assert found.speedup(at(points, 2, 16)) == pytest.approx((2 / 0.012) / (1 / 0.011))
    assert found.within == [at(points, 4, 8), at(points, 2, 16)]  # ITL p50 <= 15 ms, per prompt length
    lines = findings_lines(found, list(AXES))
    # each point's tokens take one known time: the intervals are the ratios themselves
    assert ("best against batch 1 at the same values (batch_size 1, prompt_len 8): 3.48x [3.48x, 3.48x] faster "
            "(noise threshold ±10%, fixed; 95% interval from 5 and 5 steps)") in lines
    assert found.near == [at(points, 4, 8)] and lines[1].endswith(
        "; not detectably slower: batch_size 4, prompt_len 8 (0.96x [0.96x, 0.96x] no difference detected) "
        "(within the noise threshold ±10%)")
    assert ("knee: batch 4 (ITL p50 12.0 ms), the smallest not detectably slower than the best tokens/s: 0.96x "
            "[0.96x, 0.96x] no difference detected (noise threshold ±10%, fixed; 95% interval from 5 and 5 steps)") in lines
    assert f"within the latency bound: batch 2 (prompt len 16): {fmt.rate(2 / 0.012, TOKENS)} at ITL p50 12.0 ms" in lines


def test_a_kept_records_unit_heads_the_curves_column_as_text(points):
    """The throughput's unit comes from the records (an import from elsewhere): markup in it heads its column
    literally, and neither the table nor a point's live line lets an escape sequence through."""
    from rich.console import Console

    from tpulab.views.sweep import curve_title, live_line

    hostile = "[bold red]X[/bold red]\x1b]0;t\x07"
    for p in points:
        p.records[0].summary.throughput_unit = hostile
    found = findings(points, None, baseline_of(DECODE, AXES), max_itl_s=0.015)
    console = Console(width=200, file=io.StringIO(), force_terminal=True)
    console.print(sweep_table(points, list(AXES), found, "sweep"))
    out = console.file.getvalue()
    assert "[bold red]X[/bold red]" in re.sub(r"\x1b\[[0-9;]*m", "", out) and "\x1b]" not in out and "\x07" not in out
    assert "\x1b" not in live_line(points[0], AXES) and "\x07" not in live_line(points[0], AXES)
    chart = text_chart(points, list(AXES), found, 120).plain
    assert "\x1b" not in chart and "\x07" not in chart
    title = curve_title(found, list(AXES))  # the chart's title here and in the lab
    assert title.startswith("[bold red]X[/bold red]\\x1b]0;t\\x07 against ITL p50 (ms)") and "\x1b" not in title


def test_the_table_and_chart_mark_the_knee_and_the_bound(points):
    found = findings(points, None, baseline_of(DECODE, AXES), max_itl_s=0.015)
    table = shown(sweep_table(points, list(AXES), found, "sweep"), width=80)
    knee_row = next(line for line in table.splitlines() if line.lstrip().startswith("~KW"))  # and not detectably slower
    assert knee_row.split()[1:3] == ["4", "8"] and "4.00x" not in knee_row
    assert f"{fmt.rate(4 / 0.012)} ±0.0%" in knee_row  # its tokens/s and interval (its steps all alike)
    assert "~ not detectably slower, K the knee, W the largest batch within --max-itl" in " ".join(table.split())
    chart = text_chart(points, list(AXES), found, 80).plain
    assert "ITL p50" in chart and "K" in chart and "W" in chart


def test_a_workload_without_a_baseline_measures_against_the_article():
    assert CONV.sweep_baseline({"batch_size": 8}, {"batch_size": [8, 16]}) is None
    assert DECODE.sweep_baseline({"batch_size": 8, "prompt_len": 16}, AXES) == {"batch_size": 1, "prompt_len": 16}
    assert DECODE.sweep_baseline({"prompt_len": 16}, {"prompt_len": [8, 16]}) is None


def test_a_bound_that_is_no_latency_is_refused_in_one_line():
    r = run_cli("sweep", "decode", "--preset", "smoke", "--max-itl", "0", "--no-save", timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == "tpulab: error: --max-itl must be a positive number of ms (got 0)"


async def test_the_lab_sweep_tab_draws_the_curve_and_its_knee(tmp_path, db, cpu_machine):
    from textual.widgets import Static

    from tpulab.engine.sweep import build_grid
    from tpulab.lab.app import TpulabApp
    from tpulab.lab.widgets.charts import SeriesPlot

    from .helpers import ReplayedSweep, sweep_tab

    grid, _ = build_grid(DECODE, {"batch_size": "1,2,4,8", "prompt_len": "8", "device": "cpu", "backend": "tensorflow"},
                         cpu_machine, preset="smoke", steps=4)
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await sweep_tab(pilot, ReplayedSweep(grid, cpu_machine,
                                                    lambda p: point(tmp_path, p.values["batch_size"], 8).records[0]))
        chart = pane.query_one("#sweep-chart", SeriesPlot)
        assert chart.title == "tokens/s against ITL p50 (ms)"  # one series: the prompt length is not swept
        assert [x for x, _ in chart.points(TOKENS)] == pytest.approx([10.0, 10.5, 12.0, 23.0])  # ITL p50, ms
        assert chart.points("knee") == [pytest.approx((12.0, 4 / 0.012))]
        assert "knee: batch 4" in text(pane.query_one("#sweep-findings", Static))


def test_a_points_live_line_fits_80_columns_with_its_itl_tokens_per_s_and_mbu(points):
    from tpulab.views.sweep import live_line

    line = live_line(at(points, 4, 8), AXES)
    assert len(line) <= 80 and line.split()[2:5] == ["12.0", "ms", fmt.rate(4 / 0.012)] and "MBU " in line


def test_a_sweep_varies_the_generated_length_each_point_generating_its_own(cpu_machine):
    """The generated length is an axis like the batch (no sweep sets it): each point runs its own --gen-len."""
    from tpulab.engine.sweep import build_grid

    grid, impossible = build_grid(DECODE, {"gen_len": "4,16", "batch_size": "1,2", "device": "cpu"}, cpu_machine,
                                  preset="smoke", steps=3)
    assert [grid.params(c)["gen_len"] for c in grid.combinations()] == [4, 4, 16, 16] and impossible == []
    assert grid.length() == "each as long as its own parameters say (tokens)"
    conv, _ = build_grid(CONV, {"batch_size": "8,16", "device": "cpu"}, cpu_machine, steps=3)
    assert conv.length() == "3 timed iterations each"
