"""Sweeps: the grid from the declarations, checked before anything runs; real points, kept and shown again."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tpulab.base import fmt
from tpulab.base.errors import EXIT_CANCELLED
from tpulab.engine.sweep import Point, build_grid, findings, kept_points, parse_values
from tpulab.views.sweep import findings_lines, marks_legend
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError

from .helpers import ROOT, cpu_only, fixed_machine, json_events, make_record, rest_of, run_cli, text, write_set

CONV = registry()["conv"]
FASHION = registry()["fashion-mnist"]
TINY = ["--preset", "smoke", "--steps", "2", "--device", "cpu"]
RUNS = [*TINY, "--backend", "jax"]  # real points: none of these sweeps is about a framework, and JAX starts fastest


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    """A machine with no accelerator, with TensorFlow installed."""
    return cpu_only(tmp_path_factory.mktemp("machine"))


def test_lists_and_doubling_ranges():
    batch = CONV.spec("batch_size")
    assert parse_values(batch, "32,64,128") == [32, 64, 128]
    assert parse_values(batch, "16..128") == [16, 32, 64, 128]
    assert parse_values(batch, "8, 8 ,16") == [8, 16]  # a value named twice is one point
    assert parse_values(FASHION.spec("precision"), "float32,mixed_bfloat16") == ["float32", "mixed_bfloat16"]
    assert parse_values(FASHION.spec("xla"), "on,off") == [True, False]
    with pytest.raises(ParamError, match=r"--batch-size must be an integer from 1 to 4096 \(got '0'\)"):
        parse_values(batch, "32,0")
    with pytest.raises(ParamError, match="--batch-size range must go up"):
        parse_values(batch, "64..16")
    with pytest.raises(ParamError, match="--precision must be one of float32, mixed_bfloat16, mixed_float16"):
        parse_values(FASHION.spec("precision"), "float32,fp8")


def test_impossible_combinations_are_named_not_dropped(cpu):
    grid, impossible = build_grid(CONV, {"batch_size": "6,8", "shards": "1,4"}, cpu)
    assert grid.axes == {"batch_size": [6, 8], "shards": [1, 4]}
    assert impossible == [({"batch_size": 6, "shards": 4}, "--batch-size must be divisible by --shards 4 (got 6)")]
    with pytest.raises(ParamError, match="no combination of the grid can run: --shards must be an integer from 1 "
                                         "to 8 on CPU"):
        build_grid(CONV, {"shards": "16,32", "batch_size": "32"}, cpu)


def test_each_point_is_resolved_once_and_holds_no_auto(cpu, monkeypatch):
    """The grid resolves each combination as its run; the sweep's points are those specs, with the sweep's id."""
    from tpulab.engine import sweep as sweeps

    resolved: list[dict] = []
    real = sweeps.resolve
    monkeypatch.setattr(sweeps, "resolve", lambda w, values, *a, **k: resolved.append(values) or real(w, values, *a, **k))
    grid, _ = build_grid(CONV, {"batch_size": "4,8"}, cpu, "smoke")
    sweep = sweeps.Sweep(grid, cpu)
    assert len(resolved) == 2 and [p.spec.params for p in sweep.points if p.spec] == [s.params for s in grid.specs.values()]
    assert all(p.spec and p.spec.sweep == sweep.id and "auto" not in (p.spec.backend, p.spec.device)
               for p in sweep.points)


def test_a_point_whose_backend_cannot_run_here_is_kept_failed_without_a_spec(cpu):
    """A point whose backend cannot run here starts nothing and gets no spec (a spec never holds `auto`, nor a
    backend that was not decided): its record is failed, says why and names the backend it asked for."""
    from tpulab.engine.spec import RunSpec
    from tpulab.engine.sweep import Sweep

    grid, _ = build_grid(CONV, {"batch_size": "4,8"}, cpu, "smoke")
    sweep = Sweep(grid, cpu)
    point = Point({"batch_size": 4}, {**grid.params({"batch_size": 4}), "backend": "tensorflow"},
                  cannot="--backend tensorflow: TensorFlow is not installed")
    runs = sweep._run_point(point)
    with pytest.raises(StopIteration) as done:
        next(runs)  # it yields nothing: no worker starts
    record = done.value.value
    assert (record.status, record.backend, record.error, record.sweep) == (
        "failed", "tensorflow", "--backend tensorflow: TensorFlow is not installed", sweep.id)
    with pytest.raises(ValueError, match="a RunSpec runs on a decided backend and device"):
        RunSpec(CONV, {}, "auto", "asked for", "cpu")


def test_points_are_short_and_the_articles_configuration_is_added(cpu):
    from tpulab.engine.sweep import Sweep

    grid, _ = build_grid(FASHION, {"batch_size": "32,64", "precision": "float32,mixed_bfloat16",
                                   "dataset": "synthetic"}, cpu, steps=5)
    sweep = Sweep(grid, cpu)
    assert [p.values for p in sweep.points][:4] == [
        {"batch_size": 32, "precision": "float32"}, {"batch_size": 32, "precision": "mixed_bfloat16"},
        {"batch_size": 64, "precision": "float32"}, {"batch_size": 64, "precision": "mixed_bfloat16"}]
    article = sweep.points[-1]
    assert article.article and article.values == {"batch_size": 1024, "precision": "float32"}
    p = sweep.points[0].params
    assert (p["epochs"], p["steps_per_epoch"], p["validation"], p["dataset"]) == (1, 5, False, "synthetic")


def test_a_sweep_at_other_sizes_than_the_articles_has_no_article_point(cpu):
    """The smoke preset's 32x32 images are not the article's run: no point is run or named as the article's."""
    from tpulab.engine.sweep import Sweep
    from tpulab.views.sweep import article_note, point_count

    smoke, _ = build_grid(CONV, {"batch_size": "4,8"}, cpu, "smoke")
    sweep = Sweep(smoke, cpu)
    assert [p.values for p in sweep.points] == [{"batch_size": 4}, {"batch_size": 8}] and sweep.article_values is None
    assert point_count(sweep.points) == "2 points" and point_count(sweep.points[:1]) == "1 point"
    assert article_note(smoke) == ("no article's point: this sweep holds image size 32 (the article's 256), "
                                   "filters 16 (the article's 256), warmup 1 (the article's 2)")
    article, _ = build_grid(CONV, {"batch_size": "4,8"}, cpu)  # the article's sizes: its batch 128 is added
    sweep = Sweep(article, cpu)
    assert [(p.values, p.article) for p in sweep.points][-1] == ({"batch_size": 128}, True)
    assert point_count(sweep.points) == "2 points + the article's configuration" and article_note(article) is None
    other, _ = build_grid(registry()["transformer"], {"batch_size": "2,4"}, cpu, "smoke")  # the article ran no LM
    assert Sweep(other, cpu).article_values is None and article_note(other) is None


def test_findings_best_speedups_and_knee():
    def point(batch: int, precision: str, median: float, article: bool = False) -> Point:
        r = make_record(median=median, batch=batch, workload="fashion-mnist",
                        flops=FASHION.flops_per_step({"batch_size": batch}))
        return Point({"batch_size": batch, "precision": precision}, {}, article, [r])

    points = [point(32, "float32", 0.1), point(64, "float32", 0.11), point(128, "float32", 0.19),
              point(256, "float32", 0.39), point(128, "mixed_bfloat16", 0.2), point(1024, "float32", 3.0, True)]
    found = findings(points, None)
    assert found.by == "examples/s"  # the same work per example everywhere
    assert found.best is points[2] and found.article is points[5]  # 128 / 0.19 s = 674 examples/s
    assert found.over_article == pytest.approx((128 / 0.19) / (1024 / 3.0))
    assert found.slowest is points[0] and found.over_slowest == pytest.approx((128 / 0.19) / 320)
    # 4 steps a point give no interval: 256 at 656/s is within the noise threshold, but 128 is the smaller batch
    assert found.knee is points[2] and found.near == [] and len(found.untold) == 5
    assert marks_legend(found) == ("* best, A the article's configuration, K the knee (the smallest batch "
                                   "not detectably slower than the best)")
    assert marks_legend(findings(points[:2], None)) == ("* best, K the knee (the smallest batch not detectably "
                                                        "slower than the best)")
    lines = findings_lines(found, ["batch_size"])
    assert (f"best against the article's configuration (batch_size 1024 (article): {fmt.rate(1024 / 3, 'examples/s')}"
            "): 1.97x (no verdict: too few steps for an interval (4 and 4; 5 a side at least))") in lines
    assert "too few steps to tell whether 5 other points are slower than the best: an interval needs 5 timed steps " \
           "a point" in lines
    won = findings(points[5:], None)  # the article's point alone is the best: no "1.00x the article's"
    assert won.best is points[5] and not any("x the article's" in line for line in findings_lines(won, ["batch_size"]))


@pytest.mark.parametrize("argv, expected", [
    (["--batch-size", "8,zero"], "--batch-size must be an integer from 1 to 4096 (got 'zero')"),
    (["--shards", "16,32"], "no combination of the grid can run"),
    (["--mode", "batch-parallel", "--backend", "tensorflow"], "--mode batch-parallel needs a TPU"),
])
def test_bad_grids_get_one_line_and_exit_2(argv, expected):
    out = run_cli("sweep", "conv", *TINY, *argv)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and expected in out.stderr


@pytest.mark.slow
def test_a_2x2_sweep_end_to_end_is_kept_and_shown_again(tmp_path):
    db = str(tmp_path / "r.db")
    out = run_cli("sweep", "conv", *RUNS, "--batch-size", "4,8", "--shards", "1,2", "--json", "--db", db)
    assert out.returncode == 0, out.stderr
    lines = json_events(out.stdout)
    points = [e for e in lines if e["event"] == "point"]
    summary = lines[-1]
    assert len(points) == 4 and summary["event"] == "sweep"  # 2x2; the smoke sizes are not the article's
    assert not any(p["article"] for p in points) and summary["speedup_over_article"] is None
    assert all(p["status"] == "finished" and p["examples_per_s"] > 0 for p in points)
    assert summary["best"] == max(points, key=lambda p: p["examples_per_s"])["values"]
    # The knee: with no interval (2 steps), the smallest batch within the noise threshold (±10%) of the best
    # throughput, the other values as the best's.
    near = [p["values"]["batch_size"] for p in points
            if p["values"]["shards"] == summary["best"]["shards"]
            and p["examples_per_s"] * 1.05 >= max(q["examples_per_s"] for q in points)]
    assert summary["knee"]["batch_size"] == min(near)
    # 2 steps a point give no interval: no point is named as not detectably slower, nor ranked below the best by noise
    assert summary["not_detectably_slower"] == [] and len(summary["untold"]) == 3
    shown = run_cli("results", "--db", db, "sweep", summary["id"][:8])
    assert shown.returncode == 0 and shown.stderr == ""
    for wanted in ("batch size", "shards", "best:", "* best", "examples/s against batch size"):
        assert wanted in shown.stdout, wanted
    assert "too few steps to tell whether 3 other points are slower than the best" in " ".join(shown.stdout.split())
    listing = run_cli("results", "--db", db, "sweep")
    assert summary["id"][:8] in listing.stdout and "batch_size 2, shards 2" in listing.stdout
    runs = json.loads(run_cli("results", "--db", db, "list", "--json").stdout)
    assert len(runs) == 4 and {r["sweep"] for r in runs} == {summary["id"]}
    as_json = json.loads(run_cli("results", "--db", db, "sweep", "--json", summary["id"]).stdout)
    assert as_json["best"] == summary["best"] and len(as_json["points"]) == 4
    # Export and import carry the sweep whole.
    exported = tmp_path / "sweep.json"
    assert run_cli("results", "--db", db, "export", summary["id"][:8], "-o", str(exported)).returncode == 0
    other = str(tmp_path / "other.db")
    imported = run_cli("results", "--db", other, "import", str(exported))
    assert "4 run(s) and 1 sweep(s) added" in imported.stdout
    again = run_cli("results", "--db", other, "sweep", summary["id"][:8])
    assert again.returncode == 0 and "best:" in again.stdout


@pytest.mark.slow
def test_a_failing_point_is_kept_and_the_sweep_goes_on(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_set(good, n_train=64, n_test=16)
    write_set(bad)
    (bad / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    out = run_cli("sweep", "fashion-mnist", "--preset", "smoke", "--steps", "2", "--batch-size", "16",
                  "--device", "cpu", "--data-dir", f"{bad},{good}", "--json", "--no-save")
    assert out.returncode == 0, out.stderr
    points = [e for e in json_events(out.stdout) if e["event"] == "point"]
    by_dir = {p["values"]["data_dir"]: p for p in points if not p["article"]}
    assert by_dir[str(bad)]["status"] == "failed" and "not a readable gzip file" in by_dir[str(bad)]["error"]
    assert by_dir[str(good)]["status"] == "finished"
    assert json_events(out.stdout)[-1]["best"]["data_dir"] == str(good)


@pytest.mark.slow
def test_ctrl_c_stops_after_the_current_point_and_keeps_the_finished_ones(tmp_path):
    db = str(tmp_path / "r.db")
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", "sweep", "conv", *RUNS, "--batch-size", "2,4,8,16",
                             "--json", "--db", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:
        if '"event": "point"' in line:
            proc.send_signal(signal.SIGINT)
            break
    rest, err = rest_of(proc, 300)
    assert proc.returncode == EXIT_CANCELLED, err
    summary = json_events(rest)[-1]
    finished = [p for p in summary["points"] if p["status"] == "finished"]
    assert summary["status"] == "cancelled" and 1 <= len(finished) <= 2 and len(summary["points"]) == 4
    assert "stopping after the current point" in err
    kept = json.loads(run_cli("results", "--db", db, "sweep", "--json", summary["id"]).stdout)
    assert kept["status"] == "cancelled" and len([p for p in kept["points"] if p["status"] == "finished"]) == len(finished)


@pytest.mark.slow
def test_repeat_shows_the_spread(tmp_path):
    out = run_cli("sweep", "conv", *RUNS, "--batch-size", "4", "--repeat", "2", "--no-save")
    assert out.returncode == 0, out.stderr
    assert "single point" in out.stdout and "x 2 run(s)" in out.stdout
    assert "ex/s (" in out.stdout  # the throughput's range over the repeats


def test_what_the_sweep_sets_itself_cannot_be_swept(cpu):
    with pytest.raises(ParamError, match=r"--epochs is set by the sweep itself \(each point is 12 timed steps"):
        build_grid(FASHION, {"epochs": "1,2", "dataset": "synthetic"}, cpu)
    with pytest.raises(ParamError, match="--iterations is set by the sweep itself"):
        build_grid(CONV, {"iterations": "5"}, cpu)


def test_points_of_different_work_are_ranked_by_the_rate_of_work():
    """Sweeping the image size: the smallest image wins on examples/s, not on what the device achieves."""
    def point(size: int, median: float) -> Point:
        flops = CONV.flops_per_step({**CONV.defaults(), "image_size": size})
        r = make_record(median=median, batch=128, flops=flops)
        return Point({"image_size": size}, {}, records=[r])

    small, large = point(32, 0.01), point(256, 0.4)  # 100x the examples/s, 1.6x less GFLOP/s
    found = findings([small, large], None)
    assert found.by == "GFLOP/s" and found.best is large
    assert found.over_slowest == pytest.approx((large.gflops or 0) / (small.gflops or 1))


def test_a_kept_sweep_is_typed_and_round_trips_through_json():
    from tpulab.base.events import SweepPoint, SweepRecord
    from tpulab.base.schema import problem

    kept = SweepRecord(id="ab" * 16, workload="conv", started_at="2026-11-30T12:00:00+00:00", status="finished",
                       axes={"batch_size": [4, 8]}, base={"iterations": 3}, steps=3, repeat=2,
                       points=[SweepPoint(values={"batch_size": 4}, runs=["c1"]),
                               SweepPoint(values={"batch_size": 8}, runs=["c2", "c3"], article=True)],
                       findings={"best": 1, "over_article": None})
    again = SweepRecord.from_json(json.loads(json.dumps(kept.to_json())))
    assert again == kept and again.run_ids() == ["c1", "c2", "c3"] and again.points[1].article
    assert problem(kept.to_json(), SweepRecord) is None  # what an import checks a sweep by: its declaration
    assert problem({**kept.to_json(), "steps": "3"}, SweepRecord) == "steps should be a whole number, found a string"
    assert problem({**kept.to_json(), "points": [{"values": {}, "runs": []}, {"values": {}}]}, SweepRecord) == \
        "missing points[1].runs"


# --- noise is not a finding: the best, and the points not detectably slower ---------------------------------
def stepped(batch: int, rate: float, n: int = 30, noise: float = 0.03, seed: int = 0) -> Point:
    """A conv point at `batch` whose `n` steps ran at about `rate` examples/s, each step off by up to `noise` (seeded):
    a record built as every run is, by the recorder."""
    import numpy as np

    from tpulab.base.events import Compiled, Device, Started, Step
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec

    params = {**CONV.defaults(), "batch_size": batch, "device": "cpu", "backend": "jax"}
    rec = RunRecorder(RunSpec(CONV, params, "jax", "asked for", "cpu"), fixed_machine())
    rec.feed(Started(workload="conv", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                     flops_per_step=1e6 * batch, steps_total=n, per_replica_batch=batch))
    rec.feed(Compiled(seconds=1.0))
    jitter = np.random.default_rng(seed + batch).uniform(1 - noise, 1 + noise, n)
    for i, x in enumerate(jitter, 2):
        rec.feed(Step(step=i, seconds=batch / rate * float(x)))
    rec.finish("finished")
    return Point({"batch_size": batch}, params, records=[rec.record()])


def test_a_sweep_names_its_best_and_the_points_not_detectably_slower():
    """Batch 64 is best by its median, but 32 and 128 are within the noise of it (2-3% slower, each step 3% off):
    all three are named, 32 (the smallest) is the knee, and 16, at half the rate, is detectably slower."""
    from tpulab.base.noise import FASTER, SAME, SLOWER
    from tpulab.views.sweep import summary_json, sweep_table

    slow, near, best, also = stepped(16, 400), stepped(32, 800), stepped(64, 820), stepped(128, 805)
    points = [slow, near, best, also]
    found = findings(points, None)
    assert found.best is best and found.near == [also, near] and found.untold == []
    assert [found.change(p).word for p in (slow, near, also)] == [SLOWER, SAME, SAME]  # type: ignore[union-attr]
    assert found.knee is near and found.slowest_change is not None and found.slowest_change.word == FASTER
    lines = findings_lines(found, ["batch_size"])
    assert lines[1].startswith("best: batch_size 64: 8") and " examples/s ±" in lines[1]
    assert "; not detectably slower: batch_size 128 (0.9" in lines[1] and "), batch_size 32 (0.9" in lines[1]
    assert lines[1].endswith("no difference detected) (within the noise threshold ±10%)")
    assert lines[-1].startswith("knee: batch 32, the smallest not detectably slower than the best throughput: 0.9")
    assert "best against the slowest point (batch_size 16): 2.0" in " ".join(lines)
    table = text(sweep_table(points, ["batch_size"], found, "sweep"), 80)
    rows = [line.split()[:2] for line in table.splitlines() if " ex/s ±" in line]  # each rate with its interval
    assert rows == [["*", "64"], ["~", "128"], ["~K", "32"], ["16", "40.0"]]  # fastest first; 16 has no mark
    assert "~ not detectably slower than the best" in " ".join(table.split())
    summary = summary_json(points, found, "ab" * 16, "finished")  # `tpulab sweep --json`
    assert summary["not_detectably_slower"] == [{"batch_size": 128}, {"batch_size": 32}]
    assert summary["over_slowest"]["word"] == FASTER and summary["knee_against_best"]["word"] == SAME

    clear = findings([slow, near, stepped(64, 1000)], None)  # one point clearly the fastest: no other is named
    assert clear.near == [] and clear.knee is clear.best
    assert clear.best is not None and findings_lines(clear, ["batch_size"])[1].endswith(
        "; every other point is detectably slower (noise threshold ±10%)")


def test_points_of_other_work_per_step_are_compared_by_their_rate_and_repeats_by_their_repeats():
    """Batch 8 and 16 at one rate take 1x and 2x the time a step: the scale makes them alike. A point's repeats
    are drawn as repeats (the interval holds the spread between them)."""
    from tpulab.engine.sweep import versus

    eight, sixteen = stepped(8, 500), stepped(16, 500)
    c = versus(sixteen, eight, "examples/s")
    assert c is not None and c.word == "no difference detected" and c.low is not None and c.low < 1 < (c.high or 0)
    twice = stepped(16, 500)
    twice.records += stepped(16, 450, seed=1).records  # a second repeat, 10% slower
    assert twice.step_stats is not None and twice.step_stats.count == 60
    one = sixteen.step_stats
    assert one is not None and (twice.step_stats.half_width() or 0) > (one.half_width() or 1)


def test_a_kept_sweep_names_its_near_points_and_an_old_one_still_reads(cpu):
    """The kept findings gain the near points' indices; a sweep kept before them reads, and shows them, again:
    at 80 columns, every interval and verdict whole."""
    from tpulab.base.events import SweepPoint, SweepRecord
    from tpulab.engine.sweep import Sweep
    from tpulab.views.sweep import sweep_report

    grid, _ = build_grid(CONV, {"batch_size": "16,32,64,128"}, cpu, "smoke")
    sweep = Sweep(grid, cpu)
    made = {16: stepped(16, 400), 32: stepped(32, 800), 64: stepped(64, 820), 128: stepped(128, 805)}
    for p in sweep.points:
        p.records = made[p.values["batch_size"]].records
    kept = sweep.record()
    assert kept.findings["best"] == 2 and kept.findings["near"] == [3, 1]
    runs = {r.id: r for p in sweep.points for r in p.records}
    old = SweepRecord(id=kept.id, workload="conv", started_at=kept.started_at, status="finished",
                      axes=kept.axes, base=kept.base, steps=kept.steps,
                      points=[SweepPoint(values=p.values, runs=p.runs) for p in kept.points],
                      findings={"best": 2, "slowest": 0, "knee": 1, "over_slowest": 2.0})
    shown = text(sweep_report(SweepRecord.from_json(old.to_json()), runs, 80), 80)
    assert all(len(line) <= 80 for line in shown.splitlines())
    words = " ".join(shown.split())
    found = findings(kept_points(old, runs), None)
    for p in found.near:
        c = found.change(p)
        assert c is not None and c.cell() in words  # '0.98x [0.96x, 1.00x] no difference detected', never cut
    assert "(within the noise threshold ±10%)" in words and "knee: batch 32" in words
