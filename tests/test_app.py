"""The real app under Textual's pilot: real workers, real runs on tiny shapes (on JAX, whose worker starts fastest)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from textual.widgets import Button, Checkbox, DataTable, Input, OptionList, Select, Static, Switch

from tpulab.engine.runindex import RunRow
from tpulab.engine.store import Store
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.confirm import ConfirmRun
from tpulab.lab.panes.run import RunPane
from tpulab.lab.widgets.charts import SeriesPlot
from tpulab.lab.widgets.param_form import ParamForm
from tpulab.machine.detect import detect

from .helpers import EIGHT_CPUS, SIZE, chart, cpu_only, make_record, results_tab, run_tiny_conv, text, type_into, v5e_tree, wait_for


async def choose(pilot, app, name: str, value: str) -> None:
    app.query_one(f"#param-{name}", Select).value = value
    await pilot.pause()


async def on_jax(pilot, app) -> None:
    """The workloads tab, its backend set to JAX: these tests are about the lab, and JAX's worker starts fastest."""
    await pilot.press("2")
    await wait_for(pilot, lambda: bool(app.query("#param-backend")), 5)
    await choose(pilot, app, "backend", "jax")


async def test_starts_on_the_runtime_tab_showing_the_cpu(cpu_machine):
    app = TpulabApp(probe=False, report=cpu_machine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        report = app.query_one("#runtime-report", Static)
        assert report.region.height > 0 and app.query_one("#tabs").active == "runtime"
        shown = text(report)
        assert "CPU" in shown and app.report.cpu.model in shown
        assert "runs will use the CPU" in shown


async def test_invalid_value_shows_inline_error_and_blocks_run():
    app = TpulabApp(probe=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await type_into(pilot, app, "batch_size", "0")
        await pilot.pause()
        error = app.query_one("#error-batch_size", Static)
        assert "--batch-size must be an integer from 1 to 4096 (got '0')" in text(error)
        assert app.query_one("#run-button", Button).disabled
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert app.query_one(RunPane).run is None
        await type_into(pilot, app, "batch_size", "12")
        await type_into(pilot, app, "shards", "5")
        await pilot.pause()
        assert "divisible by --shards 5" in text(app.query_one("#error-batch_size", Static))
        await type_into(pilot, app, "shards", "4")
        await pilot.pause()
        assert not app.query_one("#run-button", Button).disabled
        fixed = app.query_one("#error-batch_size", Static)
        assert not text(fixed).strip() and not fixed.display  # the line is cleared as the value is mended, not just hidden
        assert "12 = 3 per replica x 4 shard(s)" in text(app.query_one("#plan", Static))


@pytest.mark.slow
@pytest.mark.alone  # its event-loop lag is the machine's: another test beside it would be measured too
async def test_training_streams_and_cancels_keeping_partial_results():
    app = TpulabApp(probe=False, workload="fashion-mnist")
    lags: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.query_one(ParamForm).workload.name == "fashion-mnist"
        await choose(pilot, app, "dataset", "synthetic")
        for name, value in (("batch_size", "16"), ("epochs", "3"), ("steps_per_epoch", "1000")):
            await type_into(pilot, app, name, value)
        await pilot.press("ctrl+r")
        # 3000 steps: estimated at 25% of this CPU's peak, a slow CPU's estimate passes the 5 minutes that ask first
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmRun) or bool(app.query(RunPane)), 30)
        if isinstance(app.screen, ConfirmRun):
            await pilot.press("y")  # as its user would
        await wait_for(pilot, lambda: bool(app.query(RunPane)) and app.query_one(RunPane).chart("ms per step") is not None, 30)
        plot = chart(app, "ms per step")
        await wait_for(pilot, lambda: len(plot.points("step")) >= 1)
        # While steps stream, the event loop keeps its pace: a 10 ms timer's lateness is the lag.
        last = [time.perf_counter()]

        def tick() -> None:
            now = time.perf_counter()
            lags.append(now - last[0] - 0.01)
            last[0] = now

        timer = app.set_interval(0.01, tick)
        await asyncio.sleep(3)
        timer.stop()
        await wait_for(pilot, lambda: len(plot.points("step")) >= 5)
        await pilot.press("x")
        await wait_for(pilot, lambda: app.records and app.records[0].status != "running")
        record = app.records[0]
        assert record.status == "cancelled" and record.synthetic
        assert len(record.steps) >= 5 and record.summary.step_seconds and record.summary.step_seconds.count >= 5
        assert len(chart(app, "loss, accuracy").points("loss")) >= 5
        assert "SYNTHETIC DATA" in text(app.query_one("#run-header", Static))
    lags.sort()
    p99 = lags[int(0.99 * (len(lags) - 1))]
    print(f"event-loop lag while streaming: p50 {lags[len(lags) // 2] * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
          f"n={len(lags)}")
    assert p99 < 0.05


@pytest.mark.slow
async def test_a_conv_run_streams_points_and_a_result_and_two_runs_compare_side_by_side():
    """One lab, two real runs: the first's charts, summary and kept record, then both compared."""
    app = TpulabApp(probe=False)
    async with app.run_test(size=SIZE) as pilot:
        await on_jax(pilot, app)
        first = await run_tiny_conv(pilot, app, shards="1")
        assert first.backend == "jax"
        assert first.status == "finished" and first.params["batch_size"] == 8
        await pilot.pause(0.5)
        pane = app.query_one(RunPane)
        times = chart(app, "ms per iteration").points("iteration")
        rates = chart(app, "GFLOP/s").points("iteration")
        assert len(times) == 4 and len(rates) == 4 and all(y > 0 for _, y in rates)
        assert chart(app, "GFLOP/s").lines["peak"] > 0
        assert pane.chart("loss, accuracy") is None  # conv declares no metrics chart
        assert "steady iteration time" in text(pane.query_one("#run-summary", Static))
        assert app.query_one("#tabs").active == "run"
        table = app.query_one("#results-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1, 10)  # listed once saved
        assert Store(app.store.path).get(first.id).status == "finished"  # kept in the real store

        second = await run_tiny_conv(pilot, app, shards="2")
        table = await results_tab(pilot, 2)  # the store is read in a thread: both runs listed before they are marked
        table.focus()
        await pilot.press("space", "down", "space")
        await pilot.pause()
        assert not app.query_one("#compare-button", Button).disabled
        await pilot.press("m")
        await wait_for(pilot, lambda: "1.00x" in text(app.query_one("#comparison", Static)), 10)
        shown = text(app.query_one("#comparison", Static))
        assert second.short_id in shown and first.short_id in shown
        assert app.query_one("#compare-chart").display


def fixed_report(tmp_path):
    return detect(v5e_tree(tmp_path), {"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, {"tensorflow": "2.21.0"})


def test_snapshot_runtime(snap_compare, tmp_path):
    assert snap_compare(TpulabApp(probe=False, report=fixed_report(tmp_path)), terminal_size=SIZE)


async def estimated(pilot) -> None:
    """The workloads tab with its plan's estimate arrived (it is computed in a thread)."""
    await pilot.press("2")
    await wait_for(pilot, lambda: "estimate ~" in text(pilot.app.query_one("#plan", Static)), 10)


def test_snapshot_workloads(snap_compare, tmp_path):
    assert snap_compare(TpulabApp(probe=False, report=fixed_report(tmp_path)), run_before=estimated,
                        terminal_size=SIZE)


def test_snapshot_workloads_invalid(snap_compare, tmp_path):
    async def bad_batch(pilot):
        await pilot.press("2")
        await type_into(pilot, pilot.app, "batch_size", "0")
        pilot.app.set_focus(None)  # no blinking cursor in the picture
        await pilot.pause()

    assert snap_compare(TpulabApp(probe=False, report=fixed_report(tmp_path)), run_before=bad_batch,
                        terminal_size=SIZE)


def test_snapshot_results_empty(snap_compare, tmp_path):
    async def listed(pilot):
        await pilot.press("4")
        await wait_for(pilot, lambda: "0 of 0 runs" in text(pilot.app.query_one("#results-help", Static)), 10)

    assert snap_compare(TpulabApp(probe=False, report=fixed_report(tmp_path)), run_before=listed, terminal_size=SIZE)


async def test_presets_and_command_line_values_fill_the_form(fashion_data):
    app = TpulabApp(probe=False, workload="fashion-mnist", params={"epochs": 3, "dataset": "synthetic"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        form = app.query_one(ParamForm)
        assert form.params["epochs"] == 3 and form.params["dataset"] == "synthetic"
        app.query_one("#preset", Select).value = "smoke"
        await pilot.pause()
        assert form.params["batch_size"] == 64 and form.params["steps_per_epoch"] == 8
        assert form.params["epochs"] == 2 and form.params["dataset"] == "fashion-mnist"  # a preset starts afresh
        app.query_one("#param-learning_rate", Input).focus()
        await pilot.pause()
        assert "Adam's step size" in text(app.query_one("#explain", Static))
        assert "how far each update moves the weights" in text(app.query_one("#explain", Static)).lower()


async def test_command_palette_offers_the_main_actions():
    app = TpulabApp(probe=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in ("Start run", "Cancel run", "Choose Raw convolution", "Choose Fashion-MNIST CNN",
                      "Compare marked runs", "Detect again", "Glossary"):
            assert title in titles
        await pilot.press("ctrl+p")
        await pilot.press(*"choose fash")
        await pilot.press("enter")
        await pilot.pause(0.3)
        assert app.query_one("#tabs").active == "workloads"
        assert app.query_one(ParamForm).workload.name == "fashion-mnist"


async def test_glossary_lists_the_articles_terms():
    app = TpulabApp(probe=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("g")
        await pilot.pause()
        shown = " ".join(text(w) for w in app.screen.query(".term"))
        for term in ("pooling", "activation", "dropout", "learning rate", "loss", "batch", "optimizer", "ELU"):
            assert f"{term}:" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not app.screen.query(".term")


async def test_focus_follows_the_tab_and_the_open_workload_is_marked(cpu_machine):
    app = TpulabApp(probe=False, report=cpu_machine)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await wait_for(pilot, lambda: bool(app.query("#workload-list")), 5)
        listing = app.query_one("#workload-list", OptionList)
        await wait_for(pilot, lambda: app.focused is listing, 5)  # arrows and Enter work at once
        prompts = [text(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert prompts[0].startswith("▶ Raw convolution") and "▶" not in prompts[1]
        await pilot.press("down", "enter")
        await pilot.pause(0.3)
        assert app.query_one(ParamForm).workload.name == "fashion-mnist"
        prompts = [text(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert "▶" not in prompts[0] and prompts[1].startswith("▶ Fashion-MNIST CNN")
        await pilot.press("4")
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "results-table", 5)
        await pilot.press("1")
        await wait_for(pilot, lambda: app.focused is app.query_one("#runtime-pane"), 5)


async def test_backend_field_greys_out_what_the_backend_ignores(tmp_path):
    app = TpulabApp(probe=False, workload="fashion-mnist", report=cpu_only(tmp_path, {"jax": "0.10.2"}),
                    params={"dataset": "synthetic"})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        xla = app.query_one("#param-xla", Switch)
        processes = app.query_one("#param-processes", Input)
        assert not xla.disabled and processes.disabled  # auto is TensorFlow here: multi-host is JAX's
        assert "use --backend jax" in text(app.query_one("#help-processes", Static))
        xla.value = True
        await choose(pilot, app, "backend", "jax")
        assert xla.disabled and xla.value is False and not processes.disabled
        assert "JAX always compiles with XLA" in text(app.query_one("#help-xla", Static))
        form = app.query_one(ParamForm)
        assert form.params is not None and form.params["backend"] == "jax"
        assert "via jax" in text(app.query_one("#plan", Static))
        await choose(pilot, app, "backend", "tensorflow")
        assert not xla.disabled


async def test_compare_at_80_columns_keeps_every_speedup_readable(store, db, cpu_machine):
    runs = [make_record(1, 2.0), make_record(2, 1.0, backend="jax"), make_record(4, 0.5)]
    for r in runs:
        store.save(r)
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await wait_for(pilot, lambda: app.focused is not None and app.focused.id == "results-table", 5)
        await wait_for(pilot, lambda: app.query_one("#results-table", DataTable).row_count == 3, 10)
        await pilot.press("space", "down", "space", "down", "space", "m")
        await wait_for(pilot, lambda: "0.25x" in text(app.query_one("#comparison", Static)), 10)
        shown = text(app.query_one("#comparison", Static))
        for speedup in ("1.00x", "0.50x", "0.25x"):  # newest first: the fastest run is the baseline
            assert speedup in shown
        assert "…" not in shown and all(r.short_id in shown for r in runs)
        lines = [line for line in shown.splitlines() if line.strip()]
        assert "speedup = the first run's median time" in lines[0]  # the basis, then the answer
        assert "speedup" in lines[4] and "1.00x" in lines[4] and "verdict" in lines[5]  # after the run ids
        assert "median" in lines[6]  # the figure the speedup is the ratio of


async def test_results_tab_shows_a_page_of_a_large_store_at_once(store, db, cpu_machine):
    """2,000 runs kept: the first page is listed, the rest fetched as the cursor goes down; a filter asks
    the store again."""
    from tpulab.engine.store import Exported
    from tpulab.lab.panes.results import PAGE, ResultsPane

    from .helpers import copies

    store.import_records(Exported(copies(make_record(), 2000, backends=("tensorflow", "jax")), []))
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await wait_for(pilot, lambda: bool(app.query(ResultsPane)) and app.query_one(ResultsPane).rows, 10)
        pane = app.query_one(ResultsPane)
        table = pane.table
        assert table.row_count == PAGE  # a page, not the history
        await wait_for(pilot, lambda: "100 of 2,000 runs" in text(pane.query_one("#results-help", Static)), 10)
        newest = store.page(limit=1).rows[0]
        assert str(table.get_row_at(0)[1]) == newest.short_id  # a cell is Text: shown, never read as markup
        table.focus()
        await pilot.press("ctrl+end")  # the cursor near the end of what is loaded: the next page comes
        await wait_for(pilot, lambda: table.row_count == 2 * PAGE, 10)
        table.scroll_to(y=table.max_scroll_y, animate=False)  # so does scrolling there
        await wait_for(pilot, lambda: table.row_count == 3 * PAGE, 10)
        assert [r.id for r in pane.rows] == [r.id for r in store.page(limit=3 * PAGE).rows]
        filter_field = pane.query_one("#results-filter", Input)
        filter_field.focus()
        await pilot.press(*"jax")
        await wait_for(pilot, lambda: pane.filter.words == ("jax",) and pane.total == 1000, 10)
        assert table.row_count == PAGE and all(r.backend == "jax" for r in pane.rows)
        assert "matching 'jax'" in text(pane.query_one("#results-help", Static))


def test_estimate_trusts_similar_work_and_says_which_basis(cpu_machine):
    from tpulab.engine.estimate import estimate
    from tpulab.workloads import registry

    report = cpu_machine
    conv, limits = registry()["conv"], EIGHT_CPUS
    article = conv.resolve({"device": "cpu", "backend": "tensorflow"}, limits)
    tiny = RunRow.of(make_record(median=0.003, batch=8, flops=conv.flops_per_step(
        {**article, "batch_size": 8, "image_size": 32, "filters": 16})))
    # A tiny run says nothing about the article's size: the basis is an assumed share of the peak.
    assert "assuming 25% of peak" in estimate(conv, article, limits, report, [tiny]).basis
    similar = RunRow.of(make_record(median=0.5, batch=128, flops=conv.flops_per_step(article), report=report))
    guess = estimate(conv, article, limits, report, [tiny, similar])
    assert similar.short_id in guess.basis and "this configuration" in guess.basis
    steps = conv.total_steps(article)
    assert guess.seconds == pytest.approx(8.0 + 2.0 + steps * 0.5)  # start-up + its first call + steps at its rate
    other = RunRow.of(make_record(median=0.5, batch=128, flops=conv.flops_per_step(article), backend="jax",
                                  report=report))
    assert "device's best sustained" in estimate(conv, article, limits, report, [tiny, other]).basis


async def test_the_forms_estimate_comes_from_the_store_off_the_ui_thread(store, db, cpu_machine):
    """A kept run of this configuration is the basis; typing never waits for the store."""
    from tpulab.workloads import registry
    from tpulab.workloads.base import Limits

    report = cpu_machine
    conv = registry()["conv"]
    article = conv.resolve({"device": "cpu", "backend": "tensorflow"}, Limits.of(report))
    kept = make_record(median=0.5, batch=article["batch_size"], flops=conv.flops_per_step(article), report=report)
    store.save(kept)
    app = TpulabApp(probe=False, db=db, report=report, workload="conv",
                    params={"device": "cpu", "backend": "tensorflow"})
    on_ui_thread: list[bool] = []
    query = app.store.candidates
    app.store.candidates = lambda w: on_ui_thread.append(threading.current_thread() is threading.main_thread()) \
        or query(w)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        plan = app.query_one("#plan", Static)
        await wait_for(pilot, lambda: kept.short_id in text(plan), 10)
        assert "this configuration at 1.0x the work per step" in " ".join(text(plan).split())
        await type_into(pilot, app, "batch_size", "4")  # far less work: the kept run no longer counts
        await wait_for(pilot, lambda: "assuming 25% of peak" in text(plan), 10)
    assert on_ui_thread and not any(on_ui_thread)


@pytest.mark.slow
async def test_sweep_mode_and_view(tmp_path):
    from importlib.metadata import version

    from tpulab.lab.panes.sweep import SweepPane

    # A CPU machine with JAX too: the sweep is the lab's, not a framework's, and JAX's worker starts fastest.
    app = TpulabApp(probe=False, report=cpu_only(tmp_path, packages={"jax": version("jax")}))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await wait_for(pilot, lambda: bool(app.query("#sweep-mode")), 5)
        app.query_one("#sweep-mode", Checkbox).value = True
        await wait_for(pilot, lambda: app.query_one(ParamForm).sweep, 5)
        await wait_for(pilot, lambda: app.query_one("#param-iterations", Input).disabled, 5)  # the sweep sets the steps
        for name, value in (("backend", "jax"), ("batch_size", "4,8"), ("image_size", "16"), ("filters", "4"),
                            ("device", "cpu"), ("warmup", "0")):
            await type_into(pilot, app, name, value)
        await pilot.pause()
        plan = text(app.query_one("#plan", Static))
        assert "sweep: 2 points, " in plan and "estimate" in plan
        assert "no article's point: this sweep holds image size 16 (the article's 256)" in plan
        assert str(app.query_one("#run-button", Button).label) == "Sweep (ctrl+r)"
        await type_into(pilot, app, "shards", "1,3")
        await pilot.pause()
        assert "cannot run" in text(app.query_one("#plan", Static))  # batch 4 and 8 on 3 shards: named
        await type_into(pilot, app, "shards", "1")
        await pilot.pause()
        planned = app.query_one(ParamForm).planned  # as the command line plans one (`plan`), each point resolved once
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: bool(app.query(SweepPane)) and app.query_one(SweepPane).sweep is not None, 10)
        pane = app.query_one(SweepPane)
        assert pane.sweep is planned and app.query_one(ParamForm).planned is not planned  # the next is a new one
        assert app.query_one("#tabs").active == "sweep"
        await wait_for(pilot, lambda: pane.sweep is not None and pane.sweep.status != "running", 240)
        assert {r.backend for r in app.records if r.sweep == pane.sweep.id} == {"jax"}
        assert pane.query_one("#sweep-table", DataTable).row_count == 2
        assert "best:" in text(pane.query_one("#sweep-findings", Static))
        chart = pane.query_one("#sweep-chart", SeriesPlot)
        assert [x for x, _ in chart.points("throughput")] == [4, 8]  # no article's batch 128 at 16x16 images
        assert len(chart.points("best")) == 1
        assert sum(r.sweep == pane.sweep.id for r in app.records) == 2
        await wait_for(pilot, lambda: len(app.store.sweeps()) == 1, 10)
        assert {r.id for r in app.store.records()} >= {r.id for r in app.records if r.sweep == pane.sweep.id}  # `drive` kept them
        best = pane.sweep.findings().best
        await pilot.press("o")
        await wait_for(pilot, lambda: app.query_one("#tabs").active == "workloads", 5)
        await wait_for(pilot, lambda: not app.query_one(ParamForm).sweep, 5)
        form = app.query_one(ParamForm)
        await wait_for(pilot, lambda: form.params is not None, 5)
        assert form.params["batch_size"] == best.values["batch_size"] and form.params["filters"] == 4


@pytest.mark.slow
async def test_telemetry_chart_has_its_own_row_at_80x24():
    app = TpulabApp(probe=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await on_jax(pilot, app)
        # two CPU points need two windows of the sampler (0.5 s apart, 0.2 s at least): on JAX 2000 of these
        # iterations took 1.7 s on a busy 2-core host (TensorFlow's 3.4 s); 4000 keep it sampling for seconds
        for name, value in (("batch_size", "8"), ("image_size", "64"), ("filters", "16"), ("iterations", "4000"),
                            ("warmup", "1")):
            await type_into(pilot, app, name, value)
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.records) > 0)
        record = app.records[0]
        await pilot.pause(0.5)
        pane = app.query_one(RunPane)
        busy, memory = chart(app, "busy %"), chart(app, "memory GiB")
        assert record.status == "finished" and len(record.telemetry) >= 3
        assert len(busy.points("CPU")) >= 2 and len(memory.points("worker")) == len(record.telemetry)
        assert all(0 <= y <= 100 for _, y in busy.points("CPU"))
        steps = [x for x, _ in chart(app, "ms per iteration").points("iteration")]
        assert max(x for x, _ in memory.points("worker")) == max(steps)  # the timings' axis: the step
        assert app.screen.maximized is pane.query_one("#run-summary-box")  # the summary opens zoomed
        await pilot.press("escape")  # the charts again
        await pilot.pause()
        row, timings = pane.query_one("#telemetry").region, pane.query_one("#charts").region
        assert row.height >= 5 and busy.region.width >= 30 and memory.region.width >= 30
        assert row.y >= timings.bottom  # a row of its own, below the timings
        assert "worker" in text(pane.query_one("#run-summary", Static))
