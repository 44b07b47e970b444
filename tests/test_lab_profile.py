"""The lab shows a profile at 80x24, keyboard only: the Run tab's op table after a profiled run, the Results
tab's op table of a kept run (its key said in the status line and the help screen). The real app, a replayed
worker's events (a Profiled one among them), records through the real recorder in a real Store."""

from __future__ import annotations

from textual.widgets import Static

from tpulab.base.events import OpRow, Profile, Profiled
from tpulab.base import fmt
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.help import HelpScreen
from tpulab.lab.panes.run import RunLog, RunPane
from tpulab.views.profile import top_rows

from .helpers import Replay, conv_events, make_record, results_tab, text, wait_for

SMALL = (80, 24)
MS = 1e-3


def profile() -> Profile:
    """Three traced steps of 4 ms: a convolution of 2.5 ms (its FLOPs known), a fusion, a host gap of 1 ms."""
    return Profile(steps=3, step_seconds=4 * MS, host_gap=1 * MS, host_gap_share=0.25, profiler="jax.profiler",
                   where="/host:CPU", ops=[
                       OpRow(name="convolution.4", type="convolution", category="matmul/conv", calls=1,
                             seconds=2.5 * MS, share=0.625, flops=1e8, gflops_per_s=40.0, ceiling_fraction=0.31,
                             bound="compute"),
                       OpRow(name="fusion.2", type="loop fusion", category="elementwise", calls=1,
                             seconds=0.5 * MS, share=0.125)])


async def test_run_tab_shows_the_op_table_after_a_profiled_run(db, cpu_machine):
    events = conv_events()
    events.insert(-1, Profiled(profile=profile()))  # traced after the timed steps, before the end
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("3")
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        app.query_one(RunPane).start(Replay("conv", app.report, events))
        await wait_for(pilot, lambda: len(app.records) == 1, 10)
        kept = app.records[0].summary.profile  # judged by the recorder against this machine's ceilings
        assert kept is not None and kept.ops[0].ceiling_fraction is not None
        summary = app.query_one("#run-summary", Static)
        await wait_for(pilot, lambda: app.screen.maximized is app.query_one("#run-summary-box"), 5)
        shown = text(summary)
        assert "op 1" in shown and "convolution.4 (matmul/conv): 62.5% of the step, 2.50 ms, " in shown
        assert kept.ops[0].ceiling == "the spec peak"  # no roofline kept here: the vendor's figure, said so
        assert f"{fmt.percent(kept.ops[0].ceiling_fraction)} of the spec peak" in shown
        assert "why: host-bound" in shown and "why: one-op-dominates" in shown  # beside the telemetry's
        table = shown[shown.index("where a step's time went"):].splitlines()
        # no op's bytes known, so no op's bound: no column of dashes, and a note says why
        assert table[1].split() == ["op", "category", "calls", "ms/step", "share", "GFLOP/s", "of", "spec"]
        assert table[3].split() == ["convolution.4", "matmul/conv", "1", "2.50", "62.5%", "40.0",
                                    fmt.percent(kept.ops[0].ceiling_fraction)]
        assert table[4].split() == ["fusion.2", "elementwise", "1", "0.500", "12.5%", "-", "-"]
        assert "bytes unknown: the trace counts no op's bytes, so no op's bound (compute or memory) is known" in shown
        assert "host gap: 1.00 ms per step, 25.0% of the step" in shown
        log = "\n".join(map(str, app.query_one(RunLog).written))
        assert "profiled 3 steps (not timed)" in log and "top op convolution.4 62.5%" in log
        assert "why host-bound" in log


async def test_results_tab_opens_a_kept_runs_op_table_and_says_its_key(store, db, cpu_machine):
    plain, profiled = make_record(median=0.012, backend="jax"), make_record(median=0.004, backend="jax")
    profiled.summary.profile = profile()
    store.save(plain)
    store.save(profiled)
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=SMALL) as pilot:
        table = await results_tab(pilot, 2)
        assert "o shows the op table" in text(app.query_one("#results-help", Static))
        table.move_cursor(row=[r.id for r in app.query_one("#results-pane").rows].index(profiled.id))
        await pilot.press("o")
        shown = app.query_one("#comparison", Static)
        await wait_for(pilot, lambda: "convolution.4" in text(shown), 5)
        lines = text(shown, width=78).splitlines()
        assert lines[0].strip() == f"ops of conv run {profiled.short_id}"
        assert next(line for line in lines if "convolution.4" in line).split() == [
            "convolution.4", "matmul/conv", "1", "2.50", "62.5%", "40.0", "31.0%", "compute"]
        assert app.query_one("#comparison-box").display
        table.move_cursor(row=[r.id for r in app.query_one("#results-pane").rows].index(plain.id))
        await pilot.press("o")
        await wait_for(pilot, lambda: "has no op profile" in text(shown), 5)
        assert text(shown).strip() == (f"run {plain.short_id} has no op profile: run it again with --profile "
                                       "(profile=True in Python)")
        table.focus()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 5)
        help_text = text(app.screen.query_one("#help-text", Static))
        assert "o  Op table of a profiled run" in help_text


LONG = "gradient_tape/sequential_1/conv2d_{}_1/convolution/Conv2DBackprop{}"  # names that wrapped 3-4 lines


def long_profile() -> Profile:
    """A TensorFlow CNN's step: a fused kernel, two layers' filter and input gradients (names alike but for
    the middle and the end), and enough ops that the table scrolls at 80x24."""
    names = ["sequential_1/conv2d_1: Conv2D+BiasAdd+Elu, fused",
             *(LONG.format(layer, what) for layer in (1, 2) for what in ("Filter", "Input")),
             *(f"sequential_1/dense_{i}/MatMul" for i in range(20))]
    return Profile(steps=3, step_seconds=40 * MS, host_gap=1 * MS, host_gap_share=0.025, profiler="tf.profiler",
                   where="/host:CPU", ops=[OpRow(name=n, type="MatMul", category="matmul/conv", calls=1,
                                                 seconds=(30 - i) * 0.05 * MS, share=(30 - i) / 800,
                                                 gflops_per_s=12.5, ceiling_fraction=0.061, ceiling="the spec peak")
                                           for i, n in enumerate(names)])


async def test_the_op_pane_opens_at_its_headers_one_line_an_op_each_named_apart(store, db, cpu_machine):
    record = make_record(median=0.04, backend="tensorflow")
    record.summary.profile = long_profile()
    store.save(record)
    app = TpulabApp(probe=False, report=cpu_machine, db=db)
    async with app.run_test(size=SMALL) as pilot:
        await results_tab(pilot, 1)
        await pilot.press("o")
        shown, box = app.query_one("#comparison", Static), app.query_one("#comparison-box")
        await wait_for(pilot, lambda: "fused" in text(shown), 5)
        box.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        assert box.scroll_y > 0  # the table is longer than the pane
        await pilot.press("o")  # opened again, after it was read to its end
        await pilot.pause()
        assert box.scroll_y == 0
        lines = text(shown, width=box.size.width).splitlines()
        header = next(line for line in lines if line.split()[:2] == ["op", "category"])
        assert header.split()[6:8] == ["of", "spec"]  # no ceiling measured: a share of the spec peak, said so
        rows = [line.split()[0] for line in lines[lines.index(header) + 2:] if "matmul/conv" in line]
        assert len(rows) == len(long_profile().ops)  # each op on one line
        assert len(set(rows)) == len(rows)  # none printed as another
        fused = next(line for line in lines if "fused" in line)
        assert fused.split()[0].endswith("+Elu,")  # named by what it fuses, its end kept at 80 columns
        assert sum("_1_1/con" in row for row in rows) == 2  # the layers' gradients told apart where they part
        summary = dict(top_rows(long_profile()))
        assert "conv2d_1: Conv2D+BiasAdd+Elu, fused (matmul/conv)" in summary["op 1"]
        assert summary["op 2"] != summary["op 4"] and summary["op 2"].startswith("…v2d_1_1/")
        assert any("of spec: each op's share of the spec peak" in line for line in lines)
