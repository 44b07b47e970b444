"""The roofline workload and the measured ceilings: units on known inputs, the keeping rules, the
judgement of later runs, the views; then real runs on TensorFlow and JAX on tiny shapes."""

from __future__ import annotations

import pytest
from rich.text import Text

from tpulab.base.events import PHASE_STEADY, Compiled, Device, Event, RunRecord, Sample, Started, Step
from tpulab.engine.ceilings import MEMORY, Ceilings, kept_at, verdicts
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec, resolve
from tpulab.engine.store import Store, compare, load_record
from tpulab.views.console import comparison_table, summary_rows, summary_table
from tpulab.views.roofline import roofline_plot
from tpulab.workloads.base import CancelToken, Limits, ParamError
from tpulab.workloads.conv import CONV
from tpulab.workloads.roofline import ROOFLINE
from tpulab.workloads.shared.kernels import (MIB, Kernel, kernel_figures, kernel_intensity, kernel_samples, kernels_of,
                                              measure, sizes_of)

from .helpers import caches, chart, cpu_only, json_events, make_record, run_cli, text, wait_for

CPU = Device(kind="cpu", name="test CPU")
TINY = {**ROOFLINE.preset("smoke"), "device": "cpu", "backend": "jax", "dtypes": "float32"}
LLC_32 = caches("32768K")  # sysfs of a CPU with a 32 MiB last-level cache
# What the user's smoke roofline measured (n=16..64): the dispatch, ~8x per doubling, not the math
SMOKE_RATES = {16: 0.02e9, 32: 0.16e9, 64: 1.28e9}
# A real roofline on this project's 2-core VM (n=256..2048, JAX): n=512 fits a cache, the tail is flat
# (n=4096, the default's largest since, continues the tail)
FLAT_RATES = {256: 116e9, 512: 326e9, 1024: 110e9, 2048: 109e9, 4096: 108e9}


# --- units on known inputs --------------------------------------------------------------------
def test_kernel_work_is_counted_in_flops_and_bytes_read_and_written():
    m = Kernel("matmul", "float32", 64)
    assert m.flops == 2 * 64**3 and m.bytes == 3 * 64 * 64 * 4
    assert Kernel("matmul", "bfloat16", 64).bytes == 3 * 64 * 64 * 2
    c = Kernel("copy", "float32", 4)
    assert c.bytes == 2 * 4 * MIB and c.elements() == MIB  # 4 MiB of float32 read, and written again
    assert kernel_intensity(kernel_figures([step_of(m, 1e-3)])[0]) == pytest.approx(2 * 64 / (3 * 4))


def step_of(k: Kernel, seconds: float, warmup: bool = False, i: int = 1) -> Step:
    return Step(step=i, seconds=seconds, warmup=warmup, phase=k.kind, kernel=k.to_json())


def test_rates_from_known_times():
    m64, m32, copy = Kernel("matmul", "float32", 64), Kernel("matmul", "float32", 32), Kernel("copy", "float32", 4)
    steps = [step_of(m32, 5.0, warmup=True), step_of(m32, 1e-4), step_of(m32, 3e-4), step_of(m32, 2e-4),
             step_of(m64, 1e-3), step_of(copy, 2e-3)]
    figures = {(f.kind, f.size): f for f in kernel_figures(steps)}
    assert figures["matmul", 32].median_s == pytest.approx(2e-4) and figures["matmul", 32].count == 3
    assert figures["matmul", 32].flops_per_s == pytest.approx(2 * 32**3 / 2e-4)  # the warm-up left out
    assert figures["matmul", 64].flops_per_s == pytest.approx(524_288 / 1e-3)  # 524.288 MFLOP/s
    assert figures["copy", 4].bytes_per_s == pytest.approx(8 * MIB / 2e-3) and figures["copy", 4].flops_per_s is None


def test_measure_times_every_kernel_apart_in_rounds():
    """Each kernel's first call is reported apart, then its warm-up, then its timed calls, in order; a
    second round times them all again, its first calls warm-up steps (nothing is compiled twice)."""
    p = {**TINY, "min_size": 16, "max_size": 64, "iterations": 2, "warmup": 1, "rounds": 2}
    ticks = iter(range(1000))
    built, events = [], []
    measure(p, lambda k: built.append(k) or (lambda: 0.0), events.append, CancelToken(),
            clock=lambda: float(next(ticks)))
    kernels = [("matmul", 16), ("matmul", 32), ("matmul", 64), ("copy", 4)]
    assert [(k.kind, k.size) for k in built] == kernels * 2
    assert len(events) == ROOFLINE.total_steps(p) == 2 * 4 * (1 + 1 + 2)
    per_kernel = [events[i:i + 4] for i in range(0, 32, 4)]
    for i, (k, (first, warm, *timed)) in enumerate(zip(built, per_kernel)):
        r = i // 4
        assert isinstance(first, Compiled) == (r == 0) and first.phase == k.kind
        assert warm.warmup and not any(s.warmup for s in timed)
        steps = (warm, *timed) if r == 0 else (first, warm, *timed)
        assert all(s.kernel == {**k.to_json(), "round": r} and s.seconds == 1.0 for s in steps)


def test_each_size_keeps_its_best_round():
    """A burst of other work slowed the first round: the figure is the second round's median, and the
    summary's step times are that round's."""
    m = Kernel("matmul", "float32", 64)

    def timed(r: int, seconds: list[float]) -> list[Step]:
        return [Step(step=1, seconds=x, phase="matmul", kernel={**m.to_json(), "round": r}) for x in seconds]

    steps = timed(0, [4e-3, 5e-3, 3e-3]) + timed(1, [1.1e-3, 1e-3, 0.9e-3]) + timed(2, [2e-3, 2e-3, 2e-3])
    (f,) = kernel_figures(steps)
    assert f.median_s == pytest.approx(1e-3) and f.count == 9
    assert f.flops_per_s == pytest.approx(2 * 64**3 / 1e-3)
    assert sorted(kernel_samples(steps, f)) == [0.9e-3, 1e-3, 1.1e-3]


def test_the_estimate_covers_the_larger_sizes_still_to_come():
    """The user's run said 'about 1s more' from its smallest sizes and took minutes: each call still to come
    counts at its kernel's time, and a size not timed yet at the rate of the last one timed (8x the work)."""
    p = {**TINY, "min_size": 16, "max_size": 64, "iterations": 2, "warmup": 0, "rounds": 2}
    ticks = iter(range(1000))
    events: list = []
    cancel = CancelToken()

    def sink(e) -> None:  # stop after the first two kernels' calls (3 each: its first, then 2 timed)
        events.append(e)
        if len(events) == 6:
            cancel.set()

    measure(p, lambda k: lambda: 0.0, sink, cancel, clock=lambda: float(next(ticks)))
    steps = [e for e in events if isinstance(e, Step)]
    # every call takes 1 s here: n=32 runs at 8x n=16's rate, so n=64 (8x n=32's work) takes 8 s at its rate
    assert ROOFLINE.seconds_left(p, steps) == pytest.approx(
        3 * 8 + 3 * 1  # round 1 left: n=64 at n=32's rate, the copy at the last step's second
        + 3 * 1 + 3 * 1 + 3 * 8 + 3 * 1)  # round 2: every kernel again
    # the smallest size alone times its dispatch: no estimate from it while larger sizes are to come
    assert ROOFLINE.seconds_left(p, steps[:2]) is None and ROOFLINE.seconds_left(p, []) is None


def test_the_header_speaks_of_sizes_not_of_a_batch(tmp_path):
    from tpulab.views.narrate import header

    p = {**TINY, "rounds": 2}
    rec = RunRecorder(RunSpec(ROOFLINE, p, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    said = header(Started(workload="roofline", device=CPU, dtype="float32", flops_per_step=None,
                          steps_total=ROOFLINE.total_steps(p), per_replica_batch=0), rec)
    assert "matmul n=16..64, a 4 MiB copy, 2 round(s) of 3 timed call(s) each" in said and "batch" not in said


def test_the_live_chart_draws_each_matmuls_rate_by_dtype():
    from tpulab.base.charts import ChartContext
    from tpulab.workloads.roofline import MATMUL_GFLOPS

    ctx = ChartContext(ROOFLINE, peak_flops=2e11)
    m = Kernel("matmul", "bfloat16", 64)
    assert MATMUL_GFLOPS.points(step_of(m, 1e-3, i=7), ctx) == [("bfloat16", 7, pytest.approx(0.524288))]
    assert MATMUL_GFLOPS.points(step_of(m, 1e-3, warmup=True), ctx)[0][0] == "bfloat16 warm-up"
    assert MATMUL_GFLOPS.points(step_of(Kernel("copy", "float32", 4), 1e-3), ctx) == []
    assert MATMUL_GFLOPS.lines(ctx) == {"peak": 200.0}


def feed(rec: RunRecorder, events: list[Event]) -> RunRecord:
    for e in events:
        rec.feed(e)
    rec.finish("finished")
    return rec.record()


def per_call(rates: dict[int, float]) -> dict[int, float]:
    """The seconds of one n x n matmul call at each FLOP/s."""
    return {n: 2 * n**3 / r for n, r in rates.items()}


def roofline_record(tmp_path, matmul_s: dict[int, float], copy_s: float, ceilings: Ceilings | None = None,
                    dtype: str = "float32", copy_mib: int = 4, device: Device = CPU,
                    sysfs: dict[str, str] = LLC_32, other: float | None = 0.0, backend: str = "jax") -> RunRecord:
    """A roofline record built the way a run builds it: its events fed to the recorder, on a
    machine whose sysfs is `sysfs` (default: a 32 MiB last-level cache), with 2 cores of which the
    worker used one and other processes `other` (None: no telemetry)."""
    sizes = sorted(matmul_s)
    p = {**TINY, "min_size": sizes[0], "max_size": sizes[-1], "dtypes": dtype, "copy_mib": copy_mib}
    rec = RunRecorder(RunSpec(ROOFLINE, p, backend, "asked for", "cpu"), cpu_only(tmp_path, files=sysfs), ceilings)
    events: list[Event] = [Started(workload="roofline", device=device, dtype=dtype, flops_per_step=None,
                                   steps_total=ROOFLINE.total_steps(p), per_replica_batch=0)]
    for n in sizes:
        events += [Compiled(seconds=1.0), *(step_of(Kernel("matmul", dtype, n), matmul_s[n]) for _ in range(3))]
    events += [Compiled(seconds=1.0), *(step_of(Kernel("copy", "float32", copy_mib), copy_s) for _ in range(3))]
    if other is not None:
        events += loaded(other, 3)
    return feed(rec, events)


def loaded(other: float, n: int) -> list[Sample]:
    """Steady telemetry of a 2-core host: the worker on one core, other processes on `other` cores."""
    busy = 100 * (1 + other) / 2
    return [Sample(phase=PHASE_STEADY, cpu=busy, cores=[busy, busy], process=100.0) for _ in range(n)]


def test_the_summary_headline_is_the_best_matmul_and_the_copy(tmp_path):
    r = roofline_record(tmp_path, {32: 1e-4, 64: 4e-4}, copy_s=1e-3)
    s = r.summary
    assert s.gflops_per_s == pytest.approx(2 * 64**3 / 4e-4 / 1e9)  # n=64 (1.3 GFLOP/s) beats n=32
    assert s.gbytes_per_s == pytest.approx(8 * MIB / 1e-3 / 1e9)
    assert s.compile_seconds == pytest.approx(3.0)  # every kernel's first call, added up
    assert s.step_seconds is not None and s.step_seconds.median == pytest.approx(4e-4)  # the best kernel's
    assert s.ceiling_flops is None and not s.flags  # no ceiling before the first roofline
    shown = text(summary_table(r))
    assert "matmul float32" in shown and "n=32 655.4 MFLOP/s, n=64 1.3 GFLOP/s" in shown and "8.4 GB/s" in shown
    # the roofline says what it measured, not "no measured ceiling yet": here, that it measured none
    assert ("ceiling float32 | none: not saturated at n=64 (still +100% per doubling): run "
            "`tpulab --run roofline --min-size 512 --max-size 4096`") in table_text(shown)
    assert ("memory ceiling | none: the 4 MiB copy is under 4x the 32 MiB last-level cache, which may hold it: "
            "run `tpulab --run roofline --copy-mib 128`") in table_text(shown)
    assert "no measured ceiling yet" not in shown and not Ceilings([r])


def table_text(text: str) -> str:
    """A wide summary table's rows as 'name | value' lines."""
    return "\n".join(" | ".join(cell.strip() for cell in line.strip("│ ").split("│")) for line in text.splitlines())


# --- a ceiling is a plateau ---------------------------------------------------------------------
@pytest.mark.parametrize("rates, dtype, verdict, run", [
    (SMOKE_RATES, "float32", "not saturated at n=64 (still +700% per doubling)",
     "tpulab --run roofline --min-size 512 --max-size 4096"),
    ({1024: 100e9, 2048: 130e9}, "float32", "not saturated at n=2048 (still +30% per doubling)",
     "tpulab --run roofline --min-size 1024 --max-size 8192"),
    ({1024: 100e9, 2048: 111e9}, "bfloat16", "not saturated at n=2048 (still +11% per doubling)",
     "tpulab --run roofline --min-size 1024 --max-size 8192 --dtypes bfloat16"),
    ({1024: 100e9, 2048: 80e9}, "float32", "not steady at n=2048 (-20% from n=1024: other work on the device?)",
     "tpulab --run roofline --min-size 512 --max-size 4096"),
    ({2048: 100e9, 4096: 80e9}, "float32", "not steady at n=4096 (-20% from n=2048: other work on the device?)",
     "tpulab --run roofline --min-size 512 --max-size 4096"),
    ({64: 1e9}, "float32", "one size (n=64) shows no curve", "tpulab --run roofline --min-size 512 --max-size 4096"),
])
def test_a_curve_that_still_climbs_or_falls_sets_no_ceiling_and_says_what_to_run(tmp_path, rates, dtype, verdict, run):
    r = roofline_record(tmp_path, per_call(rates), copy_s=1e-3, dtype=dtype)
    v = verdicts(r)[dtype]
    assert v.figure is None and v.why == verdict and v.run == run
    assert Ceilings([r]).flops(CPU, dtype) is None


@pytest.mark.parametrize("rates, best, verdict", [
    (FLAT_RATES, 512, "flat: n=4096 within 1% of n=2048"),  # the best at a middle size stays the ceiling
    ({1024: 100e9, 2048: 109e9}, 2048, "flat: n=2048 within 9% of n=1024"),
    ({1024: 100e9, 2048: 91e9}, 1024, "flat: n=2048 within 9% of n=1024"),
])
def test_a_flat_curve_sets_its_best_as_the_ceiling(tmp_path, rates, best, verdict):
    r = roofline_record(tmp_path, per_call(rates), copy_s=1e-3)
    v = verdicts(r)["float32"]
    assert v.figure is not None and v.figure.size == best and v.why == verdict and v.run is None
    c = Ceilings([r]).flops(CPU, "float32")
    assert c is not None and c.value == pytest.approx(rates[best]) and c.size == best


# XLA's matmul on this project's 2-core VM, quiet (n=256..4096, JAX, 3 rounds): flat at 1024..2048, then a fall
PAST_PLATEAU = {256: 72.5e9, 512: 296.5e9, 1024: 357.6e9, 2048: 366.1e9, 4096: 294.5e9}


@pytest.mark.parametrize("other, kept", [(0.0, True), (None, False)])
def test_a_curve_that_falls_past_its_plateau_on_a_quiet_machine_sets_its_best(tmp_path, other, kept):
    """Measured quiet, a fall after a flat doubling is the kernel's own (not other work): the best counts. Where
    the load is unknown, the fall may be other work: no ceiling, and it says so."""
    r = roofline_record(tmp_path, per_call(PAST_PLATEAU), copy_s=1.0, copy_mib=256, other=other)
    v = verdicts(r)["float32"]
    if kept:
        assert v.figure is not None and v.figure.size == 2048
        assert v.why == "flat at n=1024..2048, then -20% at n=4096 on a quiet machine: past its plateau"
    else:
        assert v.figure is None and not Ceilings([r])


def test_a_saturated_roofline_sets_the_ceilings_and_its_summary_shows_them(tmp_path):
    r = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=256 * MIB * 2 / 30e9, copy_mib=256)  # 30 GB/s
    kept = Ceilings([r])
    c, bw = kept.flops(CPU, "float32"), kept.bandwidth(CPU)
    assert c is not None and c.value == pytest.approx(326e9)
    assert c.source() == f"roofline run {r.short_id}, jax, n=256..4096 (best n=512), preset default"
    assert bw is not None and bw.value == pytest.approx(30e9)
    assert bw.source() == f"roofline run {r.short_id}, jax, 256 MiB copy, preset default"
    shown = table_text(text(summary_table(r)))
    assert "ceiling float32 | 326.0 GFLOP/s at n=512 (flat: n=4096 within 1% of n=2048)" in shown
    assert "memory ceiling | 30.0 GB/s (the 256 MiB copy is 8.0x the 32 MiB last-level cache)" in shown
    assert "no measured ceiling" not in shown


# --- the copy: at least 4x the last-level cache -------------------------------------------------
def test_the_last_level_cache_is_read_from_sysfs_each_instance_once(tmp_path):
    """Two L3s of 32 MiB (CPUs 0-1 share one, CPU 2 has another): 64 MiB; the L1 and L2 are not counted."""
    two = caches("32768K", {0: "0-1", 1: "0-1", 2: "2-3"})
    assert cpu_only(tmp_path / "two", files=two).cpu.llc_bytes == 64 * MIB
    assert cpu_only(tmp_path / "one", files=LLC_32).cpu.llc_bytes == 32 * MIB
    assert cpu_only(tmp_path / "none").cpu.llc_bytes is None  # no cache in sysfs: unknown


@pytest.mark.parametrize("copy_mib, kept", [(4, False), (127, False), (128, True), (256, True)])
def test_a_copy_sets_the_memory_ceiling_only_at_4x_the_cache(tmp_path, copy_mib, kept):
    """A 32 MiB last-level cache: the smoke preset's 4 MiB copy may be served from it; 128 MiB and up
    measure the memory (figures fed to the recorder: nothing allocates 256 MiB)."""
    r = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=copy_mib * MIB * 2 / 30e9, copy_mib=copy_mib)
    bw = Ceilings([r]).bandwidth(CPU)
    assert (bw is not None) == kept and (verdicts(r)[MEMORY].figure is not None) == kept
    if not kept:
        assert verdicts(r)[MEMORY].run == "tpulab --run roofline --copy-mib 128"


def test_a_cache_sysfs_does_not_give_is_taken_as_256_mib(tmp_path):
    """No last-level cache in sysfs (or an accelerator, whose cache is unknown here): 256 MiB assumed,
    so a 1 GiB copy measures the memory and the default's 256 MiB does not."""
    for device in (CPU, Device(kind="gpu", name="test GPU")):
        for mib, kept in ((256, False), (1024, True)):
            r = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=1.0, copy_mib=mib, device=device, sysfs={})
            assert (Ceilings([r]).bandwidth(device) is not None) == kept
    why = verdicts(r)[MEMORY].why
    assert why == "the 1024 MiB copy is 4.0x the device's cache (unknown here: taken as 256 MiB)"


# --- the ceilings: kept, replaced, and judging later runs --------------------------------------
def test_the_best_any_backend_measured_is_the_ceiling_kept_with_its_backend_and_kernel(tmp_path):
    """The user's case: a larger roofline measured less (XLA's kernels, or a busier moment) and replaced the
    better figure, so TensorFlow's oneDNN runs 'beat' it. The best figure wins, wherever it came from."""
    small_tf = roofline_record(tmp_path, per_call({32: 50e9, 64: 52e9}), copy_s=1e-4, copy_mib=128,
                               backend="tensorflow")
    large_jax = roofline_record(tmp_path, per_call({64: 2.0e9, 128: 2.1e9}), copy_s=4e-3, copy_mib=256)
    small_tf.started_at, large_jax.started_at = "2026-01-01", "2026-01-02"
    kept = Ceilings([large_jax, small_tf])
    c = kept.flops(CPU, "float32")
    assert c is not None and c.run_id == small_tf.id and c.value == pytest.approx(52e9)
    assert c.source() == f"roofline run {small_tf.short_id}, tensorflow, n=32..64"
    assert c.measured() == c.source() + "; other processes used 0.00 of 2 cores (0%)"
    bw = kept.bandwidth(CPU)
    assert bw is not None and bw.run_id == small_tf.id and bw.value == pytest.approx(256 * MIB / 1e-4)
    assert kept.flops(CPU, "bfloat16") is None and kept.flops(Device(kind="cpu", name="other"), "float32") is None


@pytest.mark.parametrize("other, kept", [(0.4, True), (0.6, False)])
def test_a_roofline_beside_other_work_sets_no_ceiling_and_says_why(tmp_path, other, kept):
    """Other processes on more than a quarter of the cores (0.5 of 2) while it ran: its flat curve proves
    nothing, so it sets no ceiling, with the figure and what to run."""
    r = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=256 * MIB * 2 / 30e9, copy_mib=256, other=other)
    assert bool(Ceilings([r])) == kept
    if not kept:
        why = ("other processes used 0.60 of 2 cores (30%) while it ran, more than a quarter: its figures are what "
               "they left; measure it on a quieter machine (`tpulab top` shows the load)")
        assert verdicts(r)["float32"].why == why and verdicts(r)[MEMORY].why == why
        assert f"ceiling float32 | none: {why}: run `tpulab --run roofline`" in table_text(text(summary_table(r), 400))


def test_a_roofline_stops_once_four_samples_that_read_the_load_say_it_is_busy(tmp_path):
    """Samples taken at a phase's boundary, too soon after the last to read the cores, count for nothing."""
    rec = RunRecorder(RunSpec(ROOFLINE, TINY, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    rec.feed(Started(workload="roofline", device=CPU, dtype="float32", flops_per_step=None, steps_total=9,
                     per_replica_batch=0))
    for sample in [*loaded(0.9, 3), *(Sample(phase=PHASE_STEADY, mark="compiled") for _ in range(3))]:
        rec.feed(sample)
    assert rec.too_busy() is None
    rec.feed(loaded(0.9, 1)[0])
    assert rec.too_busy() == ("stopped early: other processes used 0.90 of 2 cores (45%) while it ran, more than a "
                              "quarter: its figures are what they left; measure it on a quieter machine (`tpulab "
                              "top` shows the load)")
    conv = RunRecorder(RunSpec(CONV, CONV.defaults(), "jax", "asked for", "cpu"), cpu_only(tmp_path))
    for sample in loaded(0.9, 5):
        conv.feed(sample)
    assert conv.too_busy() is None  # only a run whose figures become ceilings stops for the load


def test_a_roofline_stopped_early_sets_no_ceiling_for_why_it_stopped(tmp_path):
    """Its curve is cut short, so 'not saturated' would send the user to larger sizes: the stop's reason wins."""
    r = roofline_record(tmp_path, per_call({256: 50e9, 512: 100e9}), copy_s=1.0, copy_mib=256)
    r.status, r.error = "cancelled", "stopped early: other processes used 1.64 of 2 cores (82%) while it ran"
    assert {d: v.why for d, v in verdicts(r).items()} == {"float32": r.error, MEMORY: r.error}
    assert not Ceilings([r])


def test_a_roofline_whose_load_was_not_recorded_sets_no_ceiling(tmp_path):
    r = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=1.0, copy_mib=256, other=None)
    assert not Ceilings([r]) and verdicts(r)["float32"].why.startswith("other processes' load was not recorded")


def test_equal_rooflines_keep_the_best_and_failed_ones_count_for_nothing(tmp_path):
    slow = roofline_record(tmp_path, per_call({32: 0.5e9, 64: 0.52e9}), copy_s=1e-3)
    fast = roofline_record(tmp_path, per_call({32: 5e9, 64: 5.2e9}), copy_s=1e-3)
    failed = roofline_record(tmp_path, per_call({32: 500e9, 64: 520e9}), copy_s=1e-6)
    failed.status = "failed"
    fast.started_at, slow.started_at = "2026-01-01", "2026-01-02"
    c = Ceilings([fast, slow, failed]).flops(CPU, "float32")
    assert c is not None and c.run_id == fast.id


def test_a_later_run_shows_its_share_of_the_ceiling_and_its_bound(tmp_path):
    roof = flat_roofline(tmp_path)  # 5.24 GFLOP/s; 8.39 GB/s: ridge 0.625 FLOP/byte
    kept = Ceilings([roof])
    run = conv_record(tmp_path, kept, flops=1e9, seconds=0.5, nbytes=1e8)  # 2 GFLOP/s, 10 FLOP/byte
    s = run.summary
    assert s.ceiling_fraction == pytest.approx(2e9 / (2 * 64**3 / 1e-4))
    assert s.ceiling_source == f"roofline run {roof.short_id}, jax, n=32..64"
    assert s.intensity == pytest.approx(10.0) and s.bound == "compute"
    assert conv_record(tmp_path, kept, flops=1e9, seconds=0.5, nbytes=1e10).summary.bound == "memory"
    shown = text(summary_table(run), 80)
    assert "fraction of spec peak" in shown and "fraction of ceiling" in shown and "38.1% of the measured ceiling 5.2 GFLOP/s" in shown
    assert "10.00 FLOP/byte accessed: compute-bound" in shown
    unknown = make_record()  # TensorFlow: no bytes, so no intensity and no bound, and the summary says why
    assert unknown.summary.intensity is None and unknown.summary.bound is None
    assert "unknown: no count of the bytes" in text(summary_table(unknown), 80)


def flat_roofline(tmp_path) -> RunRecord:
    """A saturated roofline: 5.0 then 5.24 GFLOP/s (n=32, 64), a 128 MiB copy (4x the cache) at 8.39 GB/s."""
    return roofline_record(tmp_path, {32: 2 * 32**3 / 5e9, 64: 1e-4}, copy_s=32e-3, copy_mib=128)


def conv_record(tmp_path, ceilings: Ceilings, flops: float, seconds: float, nbytes: float | None) -> RunRecord:
    rec = RunRecorder(RunSpec(CONV, {**CONV.defaults(), "batch_size": 8}, "jax", "asked for", "cpu"),
                      cpu_only(tmp_path), ceilings)
    return feed(rec, [Started(workload="conv", device=CPU, dtype="float32", flops_per_step=flops, steps_total=5,
                              per_replica_batch=8, bytes_per_step=nbytes), Compiled(seconds=1.0),
                      *(Step(step=i, seconds=seconds) for i in range(2, 6))])


def test_a_run_above_the_ceiling_says_the_ceiling_was_measured_low(tmp_path):
    roof = flat_roofline(tmp_path)
    kept = Ceilings([roof])
    fast = conv_record(tmp_path, kept, flops=1e9, seconds=0.1, nbytes=None)  # 10 GFLOP/s > 5.24
    assert fast.summary.ceiling_fraction is None and fast.summary.has_flag("ceiling-measured-low")
    source = f"roofline run {roof.short_id}, jax, n=32..64"
    shown = table_text(text(summary_table(fast)))
    assert (f"above the measured ceiling 5.2 GFLOP/s from {source}: that ceiling was measured low (see its flag)"
            in shown)
    assert "beats" not in shown and "new best" not in shown
    newer = roofline_record(tmp_path, {64: 1e-5}, copy_s=1e-3, ceilings=kept, copy_mib=128)
    assert {"ceiling-measured-low", "bandwidth-measured-low"} <= {f.code for f in newer.summary.flags}
    slow = conv_record(tmp_path, kept, flops=1e9, seconds=1.0, nbytes=None)
    cmp = text(comparison_table(compare([slow, fast]), 80), 80)
    assert "ceiling" in cmp and "measured low" in cmp and "19.1%" in cmp


def test_a_run_above_the_ceiling_says_where_and_under_what_load_it_was_measured(tmp_path):
    """A real ceiling (the default preset, saturated) and a run above it: the flag names the roofline, its
    sizes, its preset and the load beside it, and the command that measures it again; it is not styled as a
    win (the spec peak's flag is the red one)."""
    roof = roofline_record(tmp_path, per_call(FLAT_RATES), copy_s=1.0, copy_mib=256, other=0.2)
    fast = conv_record(tmp_path, Ceilings([roof]), flops=400e9, seconds=1.0, nbytes=None)  # 400 > 326 GFLOP/s
    source = f"roofline run {roof.short_id}, jax, n=256..4096 (best n=512), preset default"
    flag = next(f for f in fast.summary.flags if f.code == "ceiling-measured-low")
    assert flag.message == (f"achieved 400.0 GFLOP/s, above this device's measured ceiling 326.0 GFLOP/s ({source}; "
                            "other processes used 0.20 of 2 cores (10%)): that ceiling was measured low, so no fraction "
                            "of it is shown; measure it again on a quiet machine: `tpulab --run roofline`")
    rows = {figure: style for figure, _, style in summary_rows(fast)}
    assert rows["flag: ceiling-measured-low"] == "yellow"


def test_an_older_records_beats_flags_are_read_as_measured_low(tmp_path, store, db):
    """Records kept before the rename said 'beats-ceiling' (styled as a win); read back, they say what it means."""
    fast = conv_record(tmp_path, Ceilings([flat_roofline(tmp_path)]), flops=1e9, seconds=0.1, nbytes=None)
    data = fast.to_json()
    data["summary"]["flags"] = [{**f, "code": "beats-ceiling"} for f in data["summary"]["flags"]]
    got = load_record(data)
    assert got.summary.has_flag("ceiling-measured-low") and not got.summary.has_flag("beats-ceiling")


def test_a_store_whose_roofline_was_the_smoke_preset_keeps_no_ceiling(tmp_path, store, db):
    """The user's store: a smoke roofline kept (by an older tpulab, so its runtime has no cache size)
    set 1.3 GFLOP/s, and a 47.8 GFLOP/s transformer 'beat' it. Derived again, it sets none."""
    smoke = roofline_record(tmp_path, per_call(SMOKE_RATES), copy_s=4 * MIB * 2 / 8e9, copy_mib=4, sysfs={})
    del smoke.runtime["cpu"]["llc_bytes"]
    assert smoke.params["min_size"] == 16 and smoke.params["copy_mib"] == 4  # the smoke preset's sizes
    store.save(smoke)
    kept = kept_at(db)
    assert not kept and kept.flops(CPU, "float32") is None and kept.bandwidth(CPU) is None
    later = conv_record(tmp_path, kept, flops=47.8e9, seconds=1.0, nbytes=None)
    assert not later.summary.has_flag("ceiling-measured-low") and later.summary.ceiling_source is None
    assert "no measured ceiling yet for float32" in text(summary_table(later))


def test_ceilings_come_from_the_store(tmp_path, store, db):
    assert not kept_at(db)  # no store yet: none, and none is created
    assert not db.exists()
    roof = flat_roofline(tmp_path)
    store.save(roof)
    store.save(make_record())
    c = kept_at(db).flops(CPU, "float32")
    assert c is not None and c.run_id == roof.id


def test_the_roofline_chart_draws_the_ceilings_and_the_runs(tmp_path):
    roof = flat_roofline(tmp_path)
    run = conv_record(tmp_path, Ceilings([roof]), flops=1e9, seconds=0.5, nbytes=1e8)
    plot = roofline_plot(Ceilings([roof]), [roof, run], CPU, width=78, height=16)
    assert plot is not None and "roofline" in plot and "measured ceilings" in plot and "runs" in plot
    assert max(Text.from_ansi(line).cell_len for line in plot.splitlines()) <= 80
    assert roofline_plot(Ceilings([run]), [run], CPU) is None  # no roofline: no chart


# --- parameters --------------------------------------------------------------------------------
def test_sizes_double_and_auto_dtypes_are_the_devices(cpu_machine):
    limits = Limits.of(cpu_machine)
    spec = resolve(ROOFLINE, {"min_size": "100", "max_size": "900"}, cpu_machine)
    p = spec.params
    assert sizes_of(p) == [100, 200, 400, 800] and p["dtypes"] == "float32"
    assert spec.reasons["dtypes"] == "auto: those CPU has fast units for (float32)"
    assert [k.kind for k in kernels_of(p)] == ["matmul"] * 4 + ["copy"]
    two = ROOFLINE.resolve({"dtypes": "float32+bfloat16"}, limits, "smoke")
    assert [(k.dtype, k.size) for k in kernels_of(two)][:4] == [("float32", 16), ("float32", 32), ("float32", 64),
                                                                ("bfloat16", 16)]
    with pytest.raises(ParamError, match="--max-size must be at least --min-size 64"):
        ROOFLINE.resolve({"min_size": "64", "max_size": "32"}, limits)
    with pytest.raises(ParamError, match="--dtypes must be one of auto, float32, bfloat16, float16, float32\\+"):
        ROOFLINE.resolve({"dtypes": "float64"}, limits)
    with pytest.raises(ParamError, match="no GPU was found"):
        ROOFLINE.resolve({"device": "gpu"}, limits)


# --- real runs, tiny shapes ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_roofline_runs_and_a_later_run_is_shown_against_its_ceilings(backend, tpulab_home, tmp_path):
    """The smoke preset runs for real and keeps no ceiling (its matmuls time the dispatch, its copy
    fits in the cache): it says which sizes to run. A later run is judged by a saturated one."""
    # without telemetry: a busy test machine would stop it (the hog test's case); its load is then unknown
    out = run_cli("--run", "roofline", "--no-ui", "--json", "--preset", "smoke", "--backend", backend,
                  env={"TPULAB_TELEMETRY": "off"})
    assert out.returncode == 0, out.stderr
    result = json_events(out.stdout)[-1]
    s = result["summary"]
    assert result["status"] == "finished" and result["backend"] == backend
    assert [(k["kind"], k["size"], k["count"]) for k in s["kernels"]] == [
        ("matmul", 16, 6), ("matmul", 32, 6), ("matmul", 64, 6), ("copy", 4, 6)]  # 2 rounds of 3
    best = max(k["flops_per_s"] for k in s["kernels"] if k["kind"] == "matmul")
    assert s["gflops_per_s"] == pytest.approx(best / 1e9) and s["gbytes_per_s"] > 0
    assert 0 < s["peak_fraction"] < 1
    db = tpulab_home / "results.db"
    assert not kept_at(db)  # the bug: this run kept 1.3 GFLOP/s as the CPU's ceiling
    shown = table_text(run_cli("results", "show", result["id"][:8]).stdout)
    assert "ceiling float32 | none: " in shown, shown  # still climbing, or unsteady on a busy machine
    assert "run `tpulab --run roofline --min-size 512 --max-size 4096`" in shown, shown
    device = Device(kind="cpu", name=result["device"]["name"])
    roof = roofline_record(tmp_path, per_call({1024: 0.99e15, 2048: 1e15}), copy_s=1.0, copy_mib=256, device=device)
    Store(db).save(roof)  # a saturated roofline of this CPU (1 PFLOP/s: no run beats it)
    later = run_cli("--run", "conv", "--no-ui", "--json", "--preset", "smoke", "--backend", backend)
    judged = json_events(later.stdout)[-1]["summary"]
    assert judged["ceiling_source"] == f"roofline run {roof.short_id}, jax, n=1024..2048"
    assert 0 < judged["ceiling_fraction"] < 1
    if backend == "jax":  # XLA's cost analysis gives the bytes, so the bound is known
        ridge = 1e15 / (256 * MIB * 2 / 1.0)  # the roof's FLOP/s over its bytes/s: ~1.9e6 FLOP/byte
        assert 0 < judged["intensity"] < ridge and judged["bound"] == "memory"
        shown = run_cli("results", "show", json_events(later.stdout)[-1]["id"][:8])
        assert "roofline: GFLOP/s up, FLOP/byte across" in shown.stdout, shown.stdout


@pytest.mark.slow
@pytest.mark.alone  # how soon it stops is the worker's sampler getting its turn: beside another test too, it was late
def test_a_roofline_beside_a_cpu_hog_stops_early_and_sets_no_ceiling(tpulab_home):
    """Two processes busy-looping on the 2 cores: the roofline (a plan of a minute and more) stops within
    seconds of its first steady samples, says why with the figure and what to run, and keeps no ceiling."""
    import subprocess
    import sys
    import time

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        t0 = time.monotonic()
        out = run_cli("--run", "roofline", "--no-ui", "--json", "--backend", "jax", "--min-size", "256",
                      "--max-size", "1024", "--copy-mib", "4", "--rounds", "100", timeout=240)
        took = time.monotonic() - t0
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    events = json_events(out.stdout)
    result = events[-1]
    said = [e["text"] for e in events if e.get("event") == "log" and e["text"].startswith("stopped early")]
    assert said and result["status"] == "cancelled" and result["error"] == said[0], out.stdout[-3000:]
    assert "other processes used" in said[0] and "more than a quarter" in said[0]
    assert "measure it on a quieter machine" in said[0]
    steps = [e for e in events if e.get("event") == "step"]
    assert len(steps) < ROOFLINE.total_steps({**ROOFLINE.defaults(), "min_size": 256, "max_size": 1024,
                                               "rounds": 100}) / 10 and took < 120
    assert not kept_at(tpulab_home / "results.db")
    shown = table_text(run_cli("results", "show", result["id"][:8]).stdout)
    assert "error | stopped early: other processes used" in shown, shown  # and no ceiling row says otherwise
    assert not any(line.startswith("ceiling float32 |") and "none: stopped early" not in line
                   for line in shown.splitlines()), shown


# --- the lab ------------------------------------------------------------------------------------
async def test_the_lab_draws_the_roofline_of_the_highlighted_runs_device(tmp_path, store, db, cpu_machine):
    from textual.widgets import DataTable, Static

    from tpulab.lab.app import TpulabApp

    roof = flat_roofline(tmp_path)
    run = conv_record(tmp_path, Ceilings([roof]), flops=1e9, seconds=0.5, nbytes=1e8)
    run.started_at = "9999"  # newest: the first row
    for r in (roof, run):
        store.save(r)
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await wait_for(pilot, lambda: app.query_one("#results-table", DataTable).row_count == 2, 10)
        await pilot.press("r")
        await pilot.pause()
        shown = text(app.query_one("#comparison", Static))
        assert "roofline: GFLOP/s up, FLOP/byte across" in shown and "measured ceilings" in shown


@pytest.mark.slow
async def test_a_roofline_run_in_the_lab_ends_with_its_chart(monkeypatch):
    from textual.widgets import Static

    from tpulab.lab.app import TpulabApp
    from tpulab.lab.panes.run import RunPane

    params = {"min_size": 16, "max_size": 32, "copy_mib": 4, "iterations": 2, "warmup": 1, "rounds": 1,
              "backend": "jax", "dtypes": "float32"}
    monkeypatch.setenv("TPULAB_TELEMETRY", "off")  # a busy test machine would stop it (the hog test's case)
    app = TpulabApp(probe=False, workload="roofline", params=params)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: len(app.records) > 0)
        record = app.records[0]
        assert record.status == "finished" and [k.size for k in record.summary.kernels] == [16, 32, 4]
        await pilot.pause(0.5)
        shown = text(app.query_one(RunPane).query_one("#run-summary", Static))
        # too small to set a ceiling: the run says which sizes would, and draws no roofline on none
        assert verdicts(record)["float32"].run == "tpulab --run roofline --min-size 512 --max-size 4096"
        assert "matmul float32" in shown and "ceiling float32" in shown, shown
        assert "no roofline chart: no roofline run measured both ceilings" in shown
        live = chart(app, "GFLOP/s of each matmul")
        assert live is not None and len(live.points("float32")) == 4  # 2 sizes x 2 timed calls
