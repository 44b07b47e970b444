"""A profile shown: the op table, a run's top ops, two profiles compared, the CSV export, the notebook's
DataFrame. Real records built through the recorder, given a profile of known numbers, kept in a real store;
the real command at 80 columns."""

from __future__ import annotations

import csv

import pytest

from tpulab.base.events import OpRow, Profile, Profiled, RunRecord
from tpulab.base.timing import Flag
from tpulab.notebook.results import RunResult
from tpulab.views.console import summary_table
from tpulab.views.narrate import describe
from tpulab.views.profile import CSV_FIELDS, op_moves

from .helpers import make_record, recorder, run_cli, text

MS = 1e-3


def jax_f32() -> Profile:
    """A step of 10 ms: a matmul of 6 ms (its FLOPs known), a fusion, a transpose, the rest, a host gap."""
    return Profile(steps=3, step_seconds=10 * MS, host_gap=1.5 * MS, host_gap_share=0.15, profiler="jax.profiler",
                   where="/host:CPU", trace_path="/tmp/trace", ops=[
                       OpRow(name="dot.3", type="dot", category="matmul/conv", calls=1, seconds=6 * MS, share=0.6,
                             flops=3e8, bytes=1e6, gflops_per_s=50.0, gbytes_per_s=0.167, intensity=300.0,
                             ceiling_fraction=0.28, bound="compute"),
                       OpRow(name="fusion.1", type="loop fusion", category="elementwise", calls=2, seconds=1.5 * MS,
                             share=0.15),
                       OpRow(name="transpose.2", type="transpose", category="data movement", calls=1,
                             seconds=0.5 * MS, share=0.05),
                       OpRow(name="other", category="other", calls=4, seconds=0.5 * MS, share=0.05)],
                   verdicts=[Flag("one-op-dominates", "dot.3 takes 60.0% of the step at 28.0% of the compute "
                                                      "ceiling: a larger batch or bfloat16")])


def tf_bf16() -> Profile:
    """The same model on TensorFlow in 8 ms: its ops named otherwise, two matmuls, a reduction."""
    return Profile(steps=3, step_seconds=8 * MS, host_gap=2 * MS, host_gap_share=0.25, profiler="tf.profiler",
                   where="/host:CPU", ops=[
                       OpRow(name="dense/MatMul", type="MatMul", category="matmul/conv", calls=1, seconds=3 * MS,
                             share=0.375),
                       OpRow(name="conv/Conv2D", type="Conv2D", category="matmul/conv", calls=1, seconds=1 * MS,
                             share=0.125),
                       OpRow(name="dense/Relu", type="Relu", category="elementwise", calls=1, seconds=1 * MS,
                             share=0.125),
                       OpRow(name="reduce/Sum", type="Sum", category="reduction", calls=1, seconds=0.6 * MS,
                             share=0.075),
                       OpRow(name="other", category="other", calls=3, seconds=0.4 * MS, share=0.05)])


def profiled(profile: Profile | None, backend: str = "jax") -> RunRecord:
    record = make_record(median=0.012, backend=backend)
    record.summary.profile = profile
    return record


def kept(store, *records: RunRecord) -> list[str]:
    for r in records:
        store.save(r)
    return [r.id for r in records]


def tf_run() -> RunRecord:
    record = profiled(tf_bf16(), backend="tensorflow")
    record.dtype = "bfloat16"
    return record


def moves_by_label(a: Profile, b: Profile) -> dict[str, tuple[str, float | None, float | None, float | None,
                                                              float | None]]:
    return {m.label: (m.matched, m.a, m.b, m.delta, m.share_change) for m in op_moves(a, b)}


def test_tensorflow_against_jax_is_matched_by_category_where_no_name_matches():
    moves = op_moves(jax_f32(), tf_bf16())
    assert [m.label for m in moves] == [
        "matmul/conv (1:2 ops)", "elementwise (1:1 ops)", "other",  # the largest moves first
        "reduction (0:1 ops)", "data movement (1:0 ops)",  # on one side only: unknown on the other
        "host gap", "the step"]
    got = moves_by_label(jax_f32(), tf_bf16())
    assert got["matmul/conv (1:2 ops)"] == pytest.approx(("category", 6 * MS, 4 * MS, -2 * MS, -0.1))
    assert got["elementwise (1:1 ops)"] == pytest.approx(("category", 1.5 * MS, 1 * MS, -0.5 * MS, -0.025))
    assert got["other"] == pytest.approx(("name", 0.5 * MS, 0.4 * MS, -0.1 * MS, 0.0))
    assert got["reduction (0:1 ops)"] == ("category", None, pytest.approx(0.6 * MS), None, None)
    assert got["data movement (1:0 ops)"] == ("category", pytest.approx(0.5 * MS), None, None, None)
    assert got["host gap"] == pytest.approx(("", 1.5 * MS, 2 * MS, 0.5 * MS, 0.1))
    assert got["the step"] == ("", 10 * MS, 8 * MS, pytest.approx(-2 * MS), None)


def test_float32_against_bfloat16_matches_ops_by_name_first_then_the_rest_by_category():
    bf16 = Profile(step_seconds=7 * MS, host_gap=1.5 * MS, host_gap_share=0.2, ops=[
        OpRow(name="dot.3", category="matmul/conv", calls=1, seconds=4 * MS, share=4 / 7),
        OpRow(name="fusion.7", category="elementwise", calls=1, seconds=1 * MS, share=1 / 7),
        OpRow(name="transpose.2", category="data movement", calls=1, seconds=0.5 * MS, share=0.5 / 7)])
    got = moves_by_label(jax_f32(), bf16)
    assert list(got) == ["dot.3", "elementwise (1:1 ops)", "transpose.2", "other (1:0 ops)", "host gap", "the step"]
    assert got["dot.3"] == pytest.approx(("name", 6 * MS, 4 * MS, -2 * MS, 4 / 7 - 0.6))
    assert got["elementwise (1:1 ops)"] == pytest.approx(("category", 1.5 * MS, 1 * MS, -0.5 * MS, 1 / 7 - 0.15))
    assert got["transpose.2"] == pytest.approx(("name", 0.5 * MS, 0.5 * MS, 0.0, 0.5 / 7 - 0.05))
    assert got["other (1:0 ops)"] == ("category", pytest.approx(0.5 * MS), None, None, None)  # B has no `other`


def test_a_profiled_runs_summary_names_its_top_ops_the_host_gap_and_the_profiles_verdicts():
    assert max(len(line) for line in text(summary_table(profiled(jax_f32())), width=80).splitlines()) <= 80
    shown = text(summary_table(profiled(jax_f32())))
    assert "op 1" in shown and "dot.3 (matmul/conv): 60.0% of the step, 6.00 ms, 28.0% of the" in shown
    assert "op 2" in shown and "fusion.1 (elementwise): 15.0% of the step, 1.50 ms" in shown
    assert "op 4" not in shown  # the `other` row sums the rest: it is not an op
    assert "1.50 ms per step, 15.0% of the step: the device waited on the host" in shown
    assert "why: one-op-dominates" in shown and "a larger batch or bfloat16" in shown


def test_show_ops_gives_the_whole_table_at_80_columns(db, store):
    [run_id] = kept(store, profiled(jax_f32()))
    out = run_cli("results", "--db", str(db), "show", run_id[:8], "--profile", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    header = next(line for line in lines if "ms/step" in line)
    assert header.split() == ["op", "category", "calls", "ms/step", "share", "GFLOP/s", "ceiling", "bound"]
    assert next(line for line in lines if "dot.3" in line).split() == [
        "dot.3", "matmul/conv", "1", "6.00", "60.0%", "50.0", "28.0%", "compute"]
    assert next(line for line in lines if "fusion.1" in line).split() == [
        "fusion.1", "elementwise", "2", "1.50", "15.0%", "-", "-", "-"]  # its FLOPs unknown: said, not 0
    assert "host gap: 1.50 ms per step, 15.0% of the step" in out.stdout
    assert "raw trace: /tmp/trace" in out.stdout


def test_the_calls_column_counts_as_people_do(db, store):
    """An op called 1340 times a step reads '1,340', not '1.34e+03'; one called every other step, '0.5'."""
    profile = jax_f32()
    profile.ops[1].calls, profile.ops[2].calls = 1340.0, 0.5
    [run_id] = kept(store, profiled(profile))
    out = run_cli("results", "--db", str(db), "show", run_id[:8], "--profile", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    assert next(line for line in out.stdout.splitlines() if "fusion.1" in line).split()[:3] == [
        "fusion.1", "elementwise", "1,340"]
    assert next(line for line in out.stdout.splitlines() if "transpose.2" in line).split()[3] == "0.5"  # data movement


def test_compare_ops_says_where_the_time_moved_at_80_columns(db, store):
    a, b = kept(store, profiled(jax_f32()), tf_run())
    out = run_cli("results", "--db", str(db), "compare", a[:8], b[:8], "--profile", env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    assert next(line for line in lines if line.startswith("matmul/conv")).split() == [
        "matmul/conv", "(1:2", "ops)", "category", "6.00", "4.00", "-2.00", "-10.0", "pt"]
    assert next(line for line in lines if line.startswith("host gap")).split() == [
        "host", "gap", "-", "1.50", "2.00", "+0.500", "+10.0", "pt"]
    assert f"A: run {a[:8]} (conv, jax, float32)" in out.stdout
    assert f"B: run {b[:8]} (conv, tensorflow, bfloat16)" in out.stdout


def test_export_ops_writes_the_op_table_alone(tmp_path, db, store):
    [run_id] = kept(store, profiled(jax_f32()))
    path = tmp_path / "ops.csv"
    out = run_cli("results", "--db", str(db), "export", run_id, "--profile", "--format", "csv", "-o", str(path))
    assert out.returncode == 0, out.stderr
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(CSV_FIELDS)
    assert [r[:6] for r in rows[1:]] == [["dot.3", "dot", "matmul/conv", "1.0", "0.006", "0.6"],  # calls per step
                                         ["fusion.1", "loop fusion", "elementwise", "2.0", "0.0015", "0.15"],
                                         ["transpose.2", "transpose", "data movement", "1.0", "0.0005", "0.05"],
                                         ["other", "", "other", "4.0", "0.0005", "0.05"]]
    assert rows[1][6:] == ["300000000.0", "1000000.0", "50.0", "0.167", "300.0", "0.28", "", "compute"]
    assert rows[2][6:] == [""] * 8  # unknown: empty, never 0


def test_a_run_without_a_profile_says_to_profile_it_in_one_line(tmp_path, db, store):
    [run_id] = kept(store, profiled(None))
    path = tmp_path / "ops.csv"
    out = run_cli("results", "--db", str(db), "export", run_id, "--profile", "--format", "csv", "-o", str(path))
    assert out.returncode == 2 and not path.exists()
    assert out.stderr.strip().splitlines() == [
        f"tpulab: error: run {run_id[:8]} has no op profile: run it again with --profile (profile=True in Python)"]


def test_the_notebook_gives_the_op_table_as_a_dataframe_and_in_its_html():
    pytest.importorskip("pandas")
    result = RunResult(profiled(jax_f32()))
    frame = result.ops
    assert list(frame.columns) == list(CSV_FIELDS)
    assert list(frame["name"]) == ["dot.3", "fusion.1", "transpose.2", "other"]
    assert list(frame["seconds"]) == pytest.approx([6 * MS, 1.5 * MS, 0.5 * MS, 0.5 * MS])
    assert frame["gflops_per_s"].isna().tolist() == [False, True, True, True]
    page = result._repr_html_()
    assert "<caption>where a step&#x27;s time went: its ops</caption>" in page
    assert "<td>dot.3</td><td>matmul/conv</td><td>1</td><td>6.00</td><td>60.0%</td><td>50.0</td>" in page
    assert "<td>not attributed to any op</td><td>-</td><td>-</td><td>1.50</td><td>15.0%</td>" in page  # as the terminal


def test_a_run_without_a_profile_has_no_op_table_in_the_notebook():
    with pytest.raises(ValueError, match="has no op profile: run it again with --profile"):
        RunResult(profiled(None)).ops  # noqa: B018


def test_the_report_holds_each_runs_op_table_and_where_the_time_moved(tmp_path, db, store):
    a, b = kept(store, profiled(jax_f32()), tf_run())
    page = tmp_path / "report.html"
    out = run_cli("results", "--db", str(db), "report", a, b, "-o", str(page))
    assert out.returncode == 0, out.stderr
    html = page.read_text()
    assert html.count("<caption>where a step&#x27;s time went: its ops</caption>") == 2
    assert "<td>dense/MatMul</td><td>matmul/conv</td><td>1</td><td>3.00</td><td>37.5%</td>" in html
    assert ("<td>matmul/conv (1:2 ops)</td><td>category</td><td>6.00</td><td>4.00</td><td>-2.00</td>"
            "<td>-10.0 pt</td>") in html


def test_a_profiled_runs_event_is_one_line_that_names_its_top_op_and_host_gap():
    rec = recorder("conv", {"batch_size": 8}, 1e9)
    assert describe(Profiled(profile=jax_f32()), rec, 80) == (
        "profiled 3 steps (not timed)  top op dot.3 60.0%  host gap 15.0%")
    assert describe(Profiled(profile=Profile(steps=1)), rec, 80) == (
        "profiled 1 step (not timed)  [yellow]no ops traced[/]  host gap -")
