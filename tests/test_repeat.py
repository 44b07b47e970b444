"""Repeats in fresh processes (`--repeat`), the noise floor measured here (`tpulab calibrate`), and the verdicts they
give, on the calibration workload: a step of exactly known work, so a test can make a known difference (`--pad`)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tpulab.base.events import Compiled, Device, Finished, RunRecord, Started, Step
from tpulab.base.noise import MIN_FLOOR, SAME, SLOWER, Floor, change
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.store import Store, compare
from tpulab.workloads import registry

from .helpers import CALIBRATION_ITERATIONS as ITERATIONS
from .helpers import ROOT, calibration, fixed_machine, tpulab


def repeated(levels: list[float], per: int = 40, seed: int = 0) -> RunRecord:
    """A run of one fresh process per level, each `per` steps about its level, fed as a --repeat run's are."""
    w = registry()["calibration"]
    params = {**w.defaults(), "device": "cpu", "backend": "jax", "iterations": per, "warmup": 0}
    rec = RunRecorder(RunSpec(w, params, "jax", "asked for", "cpu", repeat=len(levels)), fixed_machine())
    rng = random.Random(seed)
    for k, level in enumerate(levels):
        if k:
            rec.begin_repeat()
        rec.feed(Started(workload="calibration", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                         flops_per_step=1e6, steps_total=per + 1, per_replica_batch=1, backend="jax"))
        rec.feed(Compiled(seconds=0.5))
        for i in range(per):
            rec.feed(Step(step=i + 2, seconds=level * (1 + rng.gauss(0, 0.01))))
        rec.feed(Finished())
    return rec.record()


def test_a_repeated_run_keeps_each_process_and_draws_its_interval_over_them():
    """Three processes at levels 5% apart: one run whose interval holds the spread between them, which no single
    process's steps show."""
    run = repeated([1.0, 1.05, 0.95])
    assert run.status == "finished" and run.repeats == [0, 40, 80]  # where each process's steps begin
    assert run.summary.process_medians is not None and len(run.summary.process_medians) == 3
    s = run.summary.step_seconds
    assert s is not None and s.count == 120 and s.low is not None and s.high is not None
    one = repeated([1.0]).summary.step_seconds
    assert one is not None and one.low is not None and one.high is not None
    assert (s.high - s.low) > 3 * (one.high - one.low)  # the processes' spread, not only the steps'
    assert s.low <= 0.97 and s.high >= 1.03
    assert run.summary.compile_seconds == 0.5  # the first process's first call; the others' are not added


def test_a_comparison_of_repeated_runs_draws_over_their_processes_with_the_floor_for_them():
    floor = Floor(0.10, "calibrated here on 2026-12-07: 10 processes, jax on CPU")
    base = repeated([1.0, 1.01, 0.99, 1.0, 1.0], seed=1)
    slower = repeated([1.25, 1.26, 1.24, 1.25, 1.25], seed=2)
    alike = repeated([1.0, 0.99, 1.01, 1.0, 1.01], seed=3)
    found = compare([base, slower, alike], floor=floor)
    worse, same = found.changes[1], found.changes[2]
    assert worse is not None and worse.word == SLOWER and "5 and 5 processes' medians" in worse.why
    assert worse.threshold == MIN_FLOOR and "calibrated here" in worse.words()  # the spread is in the interval
    assert worse.low is not None and worse.high is not None and worse.low < 0.8 < worse.high
    assert same is not None and same.word == SAME
    # single runs on the same floor: the floor itself, not its share for five processes
    single = compare([repeated([1.0]), repeated([1.25])], floor=floor).changes[1]
    assert single is not None and single.threshold == 0.10 and "processes" not in single.why


def test_no_verdict_beside_a_disturbed_run_however_wide_the_difference():
    """After a burst the hypervisor took 13-18% of the CPU (steal) from the next run here, which ran 1.9x slower:
    a run flagged disturbed (or whose machine moved) gives no finding, and says why."""
    from tpulab.base.timing import Flag

    quiet, busy = repeated([1.0], seed=4), repeated([1.9], seed=5)
    assert compare([busy, quiet]).changes[1].word != SAME  # type: ignore[union-attr]  # 1.9x is a finding...
    busy.summary.flags.append(Flag("disturbed", "the hypervisor took 18% of the CPU time for other machines (steal)"))
    found = compare([busy, quiet]).changes[1]
    assert found is not None and found.word == SAME and found.low is not None and found.low > 1.5  # ...but not here
    assert f"run {busy.short_id} was disturbed or the machine moved" in found.why
    assert "disturbed" in " ".join(compare([busy, quiet]).warnings)


def test_alike_repeated_runs_rarely_differ_and_a_known_change_is_found_as_often_as_the_floor_allows():
    """Known answers: processes whose levels spread 5% (one standard deviation) about their configuration's, the
    floor calibrated to match. Alike groups of 5 are called different in about 5% of pairs (no more than the
    interval's level), a 10% slowdown is found in most, and the floor says how small a change 5 processes tell."""
    import numpy as np

    rng = np.random.default_rng(63)

    def group(shift: float = 1.0) -> list[list[float]]:
        return [list(shift * np.exp(rng.normal(0, 0.05)) * (1 + 0.02 * rng.standard_normal(100))) for _ in range(5)]

    floor = Floor(float(np.expm1(1.959964 * np.sqrt(2) * 0.05)), "calibrated")
    said = [change([], [], base_repeats=group(), other_repeats=group(), floor=floor) for _ in range(100)]
    assert sum(c is not None and c.word != SAME for c in said) <= 8
    found = [change([], [], base_repeats=group(), other_repeats=group(1.10), floor=floor) for _ in range(100)]
    assert sum(c is not None and c.word == SLOWER for c in found) >= 55
    assert 0.05 < floor.resolves(5) < 0.10  # what the calibrate command tells: 10% is seen, 3% is not


@pytest.mark.slow
def test_run_repeat_three_keeps_one_run_of_three_processes(tmp_path):
    db = tmp_path / "results.db"
    run = calibration(db, "--repeat", "3")
    assert len(run.repeats) == 3 and run.summary.process_medians is not None
    assert len(run.summary.process_medians) == 3
    assert run.summary.step_seconds is not None and run.summary.step_seconds.count == 3 * ITERATIONS
    assert run.summary.probe is not None and run.summary.probe.moved is not None  # the machine, timed around it
    [kept] = Store(db).records()
    assert kept.id == run.id and kept.repeats == run.repeats
    shown = tpulab("results", "show", run.id[:8], db=db).stdout
    assert "fresh processes" in shown and "3 (--repeat)" in shown and "control probe" in shown


def test_a_bad_repeat_is_one_line_naming_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tpulab", "run", "calibration", "--no-ui", "--repeat", "0",
                          "--db", str(tmp_path / "r.db")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--repeat must be an integer from 1 to 100 (got 0)" in out.stderr


@pytest.mark.slow
async def test_the_labs_fresh_processes_field_runs_one_run_of_that_many(tmp_path):
    from textual.widgets import Input, Select

    from tpulab.lab.app import TpulabApp

    from .helpers import SIZE, type_into, wait_for

    app = TpulabApp(probe=False, workload="calibration", db=tmp_path / "r.db")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        await wait_for(pilot, lambda: bool(app.query("#param-backend")), 5)
        app.query_one("#param-backend", Select).value = "jax"
        await type_into(pilot, app, "iterations", "10")
        repeat = app.query_one("#repeat", Input)
        repeat.value = "0"
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "fresh processes: a whole number from 1 to 100 (got '0')" in [n.message for n in app._notifications][-1]
        assert not app.records
        repeat.value = "2"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: bool(app.records), 60)
        run = app.records[0]
        assert run.status == "finished" and len(run.repeats) == 2 and run.summary.step_seconds is not None
        assert run.summary.step_seconds.count == 20


def burst(seconds: float) -> None:
    """A process holding one core for `seconds`, then gone: the neighbour whose wake a run meets."""
    subprocess.run([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"],
                   check=True)


@pytest.mark.slow
@pytest.mark.alone  # it measures the machine: another test beside it would be measured too
def test_alike_single_runs_idle_and_after_a_burst_give_no_false_finding_then_calibrate_keeps_a_floor_they_use(
        tmp_path):
    """Alike runs back to back in fresh processes, on an idle machine and just after a process held a core: as the
    issue's users met them (1.55x faster was read there), a comparison on an uncalibrated machine finds nothing.
    Then `tpulab calibrate` keeps a floor that a later compare of the same runs uses and names (here, alone: beside
    another test each of its processes is disturbed and runs again)."""
    db = tmp_path / "results.db"
    pairs = []
    for after_burst in (False, True):
        if after_burst:
            burst(3.0)
        # timed for about a second each (as long as calibrate's): a run timed for a tenth of one moves with the
        # machine far more
        pairs.append((calibration(db, "--iterations", "500"), calibration(db, "--iterations", "500")))
    store = Store(db)
    for a, b in pairs:
        found = compare([a, b], floor=store.floor_for([a, b])).changes[1]
        assert found is not None and found.word == SAME, found.words()
        assert "not calibrated" in found.source

    a, b = pairs[0]
    before = tpulab("results", "compare", a.id[:8], b.id[:8], db=db).stdout
    assert "not calibrated" in " ".join(before.split()) and "tpulab calibrate" in " ".join(before.split())
    out = tpulab("calibrate", "--backend", "jax", "--device", "cpu", "--processes", "2", "--json", db=db)
    kept = json.loads(out.stdout)
    assert len(kept["medians"]) == 2 and kept["seeds"] == [0, 1] and kept["spread"] >= 0 and kept["span_s"] > 0.1
    after = " ".join(tpulab("results", "compare", a.id[:8], b.id[:8], db=db).stdout.split())
    assert "calibrated here on" in after and "not calibrated" not in after
    listed = tpulab("calibrate", "--kept", db=db).stdout
    assert "jax on CPU" in listed and "2 processes" in listed


def test_a_floor_is_not_taken_for_a_run_much_shorter_than_it_was_calibrated_at(tmp_path):
    """Alike conv runs here were 1.47-1.92x apart at 0.1 s of timed steps, 1.15-1.35x at 1 s: a floor measured over 1 s
    is no threshold for a run timed for a tenth of that, which gets the default and says so."""
    from tpulab.engine.floor import Calibration
    from tpulab.engine.store import floor_key

    store = Store(tmp_path / "r.db")
    long_a, long_b = repeated([1e-3] * 1, per=1000, seed=6), repeated([1e-3], per=1000, seed=7)  # 1 s each
    machine, backend, device = floor_key(long_a).split("/")
    store.save_calibration(Calibration(machine=machine, backend=backend, device=device, made_at="2026-12-07T10:00:00",
                                       workload="calibration", params={}, spread=0.05, medians=[1e-3, 1.03e-3],
                                       span_s=1.0))
    kept = store.floor_for([long_a, long_b])
    assert kept.calibrated and kept.spread == 0.05 and "calibrated here on 2026-12-07" in kept.source
    short = repeated([1e-3], per=100, seed=8)  # 0.1 s
    fallback = store.floor_for([long_a, short])
    assert not fallback.calibrated and fallback.spread == 0.40
    assert f"run {short.short_id}'s steps lasted 0.10 s, under half the 1.0 s" in fallback.source


@pytest.mark.slow
@pytest.mark.alone
def test_a_known_slowdown_is_slower_over_fresh_processes_and_says_its_floor(tmp_path):
    """--pad 1: the same counted work in twice the time, each side 3 fresh processes, on an uncalibrated machine
    (its default floor's spread, wide enough for a shared VM, drawn into the interval): slower, said with its
    source. (1.5x was missed once in a fresh clone's alone lane, after the fleet's Ray tests; its why was not kept. A 10%
    change needs this machine's floor: `benchmarks/noise_floor.py` measures how often it is found.)"""
    db = tmp_path / "results.db"
    for _ in range(3):  # a pair beside other work (a test before this one may leave a process ending) gives none
        base = calibration(db, "--repeat", "3", "--iterations", "200")
        padded = calibration(db, "--repeat", "3", "--iterations", "200", "--pad", "1", "--seed", "1")
        found = compare([base, padded], floor=Store(db).floor_for([base, padded])).changes[1]
        if not any(r.summary.has_flag("disturbed") for r in (base, padded)):
            break
    assert found is not None and found.word == SLOWER, found.words()
    assert "3 and 3 processes' medians" in found.why and "not calibrated" in found.source


def test_a_sweeps_repeats_interleave_its_points(cpu_machine):
    """A B C, A B C: a machine that drifts while a sweep runs moves every point's repeats alike."""
    from tpulab.engine.sweep import PointStarted, build_grid

    from .helpers import ReplayedSweep, make_record

    grid, _ = build_grid(registry()["conv"], {"batch_size": "8,16,32", "device": "cpu"}, cpu_machine, steps=3)
    sweep = ReplayedSweep(grid, cpu_machine, lambda p: make_record(batch=p.values["batch_size"]))
    sweep.repeat = 2
    order = [e.point.values["batch_size"] for e in sweep.events() if isinstance(e, PointStarted)]
    points = [p.values["batch_size"] for p in sweep.points]  # the grid's, and the article's (128)
    assert order == points * 2 and points[:3] == [8, 16, 32]
    assert all(len(p.records) == 2 for p in sweep.points)


def test_a_probe_that_moved_flags_the_run_with_its_figure_and_one_that_held_does_not():
    from tpulab.base.events import Probe

    run = repeated([1.0], seed=9)
    assert run.summary.probe is None and not run.summary.has_flag("machine-moved")  # no probe: nothing said
    w = registry()["calibration"]
    for after, flagged in ((2.1e-3, True), (1.2e-3, False), (0.6e-3, True)):
        params = {**w.defaults(), "device": "cpu", "backend": "jax", "iterations": 10, "warmup": 0}
        rec = RunRecorder(RunSpec(w, params, "jax", "asked for", "cpu"), fixed_machine())
        rec.probe = Probe(before_s=1.0e-3, after_s=after)
        rec.feed(Started(workload="calibration", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                         flops_per_step=1e6, steps_total=11, per_replica_batch=1, backend="jax"))
        for i in range(10):
            rec.feed(Step(step=i + 2, seconds=1e-3))
        rec.feed(Finished())
        flags = [f for f in rec.record().summary.flags if f.code == "machine-moved"]
        assert bool(flags) == flagged, (after, flags)
        if flagged:
            assert f"took {after / 1e-3:.2f}x as long after the run as before it (1.00 ms" in flags[0].message
