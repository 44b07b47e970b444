"""The decode figures from known step timings: each derived as its definition says, the bandwidth
it is set against (kept, else measured by the run), and figures above the hardware flagged."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import pytest

from tpulab.backends import Placement
from tpulab.base.ceilings import MEASURED, Sourced
from tpulab.base.events import (
    Accel,
    Device,
    Event,
    Log,
    RunRecord,
    Sample,
    Step,
    Summary,
    SummaryClash,
)
from tpulab.engine.ceilings import Ceilings
from tpulab.engine.job import job_of
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.machine.peaks import spec_bandwidth
from tpulab.workloads.base import SummaryPart
from tpulab.workloads.decode import DECODE, shape
from tpulab.workloads.decode.figures import PHASE_DECODE, PHASE_PREFILL, Shape, figures
from tpulab.workloads.shared.kernels import MIB, MIN_COPIES, Kernel, measure_bandwidth

from .helpers import cpu_only, decode_events

SHAPE = Shape(batch=2, prompt_len=4, cache=16, weight_bytes=1000.0, kv_bytes_per_position=10.0,
              prefill_flops=1e9)
TOKENS = [0.01, 0.02, 0.03, 0.04]  # tokens 1..4, after the prefill made token 0


def steps(prefill: float = 0.2, tokens: list[float] = TOKENS) -> list[Step]:
    return ([Step(step=0, seconds=9.9, phase=PHASE_DECODE, warmup=True),  # never counted
             Step(step=0, seconds=prefill, phase=PHASE_PREFILL)]
            + [Step(step=i, seconds=s, phase=PHASE_DECODE) for i, s in reversed(list(enumerate(tokens, 1)))])


def own(r: RunRecord) -> SimpleNamespace:
    """A record's own figures, by attribute."""
    return SimpleNamespace(**r.summary.figures)


def figured(*args, **kwargs) -> tuple[SimpleNamespace, list]:
    found, flags = figures(*args, **kwargs)
    return SimpleNamespace(**found), flags


def test_each_figure_from_known_step_timings():
    d, flags = figured(steps(), SHAPE, Sourced(110_000.0, "copy", MEASURED), None, peak_flops=1e10)
    assert d.ttft_s == pytest.approx(0.2)  # the prefill makes the first token
    assert d.prompt_tokens_per_s == pytest.approx(2 * 4 / 0.2)
    assert d.tpot_s == pytest.approx(0.025)  # the mean of the four later tokens' latencies
    assert d.decode_tokens_per_s == pytest.approx(2 / 0.025)  # across the batch
    assert d.decode_tokens_per_s_per_seq == pytest.approx(1 / 0.025)
    assert (d.itl_p50, d.itl_p90, d.itl_p99) == pytest.approx((0.025, 0.037, 0.0397))
    assert d.e2e_s == pytest.approx(0.2 + 0.1)  # = TTFT + TPOT x 4
    assert d.kv_cache_bytes == 2 * 16 * 10  # sequences x positions x bytes per position
    # a step reads the weights and the whole static cache: 1000 + 320 bytes; per token, 132 kB/s down to 33 kB/s
    assert d.bytes_per_token_step == 1320
    assert d.gbytes_per_s == pytest.approx(55_000 / 1e9)  # the median of the steps' rates
    assert d.mbu == pytest.approx(0.5) and d.bandwidth_source == "copy"
    assert d.prefill_mfu == pytest.approx(1e9 / 0.2 / 1e10)
    assert d.spec_bandwidth is None and d.spec_bandwidth_fraction is None  # a CPU has no vendor's figure
    assert flags == []


def test_figures_above_the_hardware_keep_their_value_and_are_flagged():
    d, flags = figured(steps(), SHAPE, Sourced(40_000.0, "copy", MEASURED), spec_bandwidth("gpu", "NVIDIA L4"),
                       peak_flops=1e9)
    assert d.mbu == pytest.approx(55_000 / 40_000)
    assert [f.code for f in flags] == ["bandwidth-measured-low", "beats-peak"]
    fast, flags = figured(steps(tokens=[1e-12] * 4), SHAPE, None, spec_bandwidth("gpu", "NVIDIA L4"))
    assert fast.spec_bandwidth_fraction is not None and fast.spec_bandwidth_fraction > 1
    assert [f.code for f in flags] == ["beats-spec-bandwidth"]


def test_before_any_token_there_is_nothing_to_divide_by():
    d, flags = figured([], SHAPE, Sourced(1e9, "copy", MEASURED))
    assert (d.ttft_s, d.tpot_s, d.itl_p50, d.gbytes_per_s, d.mbu) == (None, None, None, None, None)
    assert d.kv_cache_bytes == 320 and flags == []


# --- through the recorder: the run's own measured bandwidth, or the kept one -----------------------
P = {**DECODE.preset("smoke"), "device": "cpu", "backend": "jax"}


def record(tmp_path, events, ceilings: Ceilings | None = None):
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path), ceilings)
    for e in events:
        rec.feed(e)
    rec.finish("finished")
    return rec.record()


def test_a_run_without_a_kept_ceiling_is_set_against_the_copy_it_measured(tmp_path):
    r = record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01))
    d = own(r)
    assert d is not None and d.bandwidth == pytest.approx(2 * 64 * MIB / 0.01)
    assert "measured by this run" in (d.bandwidth_source or "")
    step = shape(P).weight_bytes + 2 * 32 * shape(P).kv_bytes_per_position
    assert d.mbu == pytest.approx(step / 0.005 / d.bandwidth)
    assert r.summary.median == pytest.approx(0.005)  # the step statistics are the decode steps'
    assert r.summary.throughput == pytest.approx(2 / 0.005)  # tokens/s over the batch


def test_a_runs_tokens_per_s_is_one_figure_over_the_batch_at_the_mean_step(tmp_path):
    """The summary's throughput (what a sweep ranks and draws), its decode tokens/s and a comparison's are one
    figure: the batch over TPOT (the mean step), not over the median step (p50 is the curve's other axis)."""
    r = record(tmp_path, decode_events(0.1, [0.004, 0.004, 0.010], copy_s=0.01))
    assert r.summary.median == pytest.approx(0.004) and r.summary.figures["tpot_s"] == pytest.approx(0.006)
    assert r.summary.throughput == r.summary.examples_per_s == r.summary.figures["decode_tokens_per_s"]
    assert r.summary.throughput == pytest.approx(2 / 0.006)


def test_progress_counts_the_runs_own_steps_not_the_copies_that_measured_the_bandwidth(tmp_path):
    """The copies are as many as fit their time budget: counted, a run's progress would pass its end."""
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    events = decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01)[:-1]
    for e in events:
        rec.feed(e)
    assert sum(isinstance(e, Step) and e.phase == "bandwidth" for e in events) == 3
    assert rec.steps_done() == rec.steps_total == 6
    assert rec.eta_seconds() == 0


def test_a_kept_ceiling_is_the_one_a_run_is_set_against(tmp_path):
    from tpulab.engine.ceilings import KeptCeiling as Kept
    from tpulab.engine.ceilings import key

    kept = Ceilings()
    kept.kept[key(Device(kind="cpu", name="test CPU"), "memory")] = Kept(8e9, "ab12cd34" * 4, "jax", 256, 256,
                                                                            copy=True)
    assert kept.memory_kept("cpu") == ["test CPU"] and kept.memory_kept("gpu") == []
    assert DECODE.worker_knows(P, kept)["bandwidth_kept_for"] == ["test CPU"]
    job = job_of(RunSpec(DECODE, P, "jax", "asked for", "cpu"), ceilings=kept)
    assert job.to_json()["knows"] == {"bandwidth_kept_for": ["test CPU"]} and "bandwidth_kept_for" not in job.spec.params
    d = own(record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006]), kept))
    assert d is not None and d.bandwidth == 8e9 and "roofline run ab12cd34" in (d.bandwidth_source or "")


def test_the_vendors_bandwidth_of_a_device_says_both_values_where_its_pages_disagree():
    bw = spec_bandwidth("tpu", "v5e")
    assert bw is not None and bw.value == 819e9 and bw.other == 800 * 2**30 and bw.kind == "spec"
    assert "819 GBps" in bw.source and "800 GiBps" in bw.source
    a100 = spec_bandwidth("gpu", "NVIDIA A100-SXM4-80GB", replicas=2)
    assert a100 is not None and a100.value == 2 * 2039e9
    assert spec_bandwidth("gpu", "NVIDIA L40S") is None  # not an L4


# --- the worker's side: measured first, only where no ceiling is kept ------------------------------
def placement(name: str = "test CPU") -> Placement:
    return Placement(kind="cpu", name=name, replicas=1, strategy="", devices=["cpu:0"])


@pytest.mark.parametrize("llc, mib", [(32 * MIB, 128), (None, 1024)])
def test_the_run_measures_the_bandwidth_first_in_several_copies_within_2_s_and_says_so(monkeypatch, llc, mib):
    """The copy is 4x the last-level cache the code reads (given here: 32 MiB, or none read, taken as 256 MiB), on any
    machine; at least 5 copies, enough for their median's interval."""
    from tpulab.workloads.shared import kernels

    monkeypatch.setattr(kernels, "probe_llc", lambda root: llc)
    said: list[Event] = []
    ticks = iter(x * 0.3 for x in range(1000))  # each read of the clock: 0.3 s later
    calls: list[int] = []
    measure_bandwidth(["another CPU"], placement(),
                      lambda k: (lambda: calls.append(k.size)), said.append, clock=lambda: next(ticks))
    copies = [e for e in said if isinstance(e, Step)]
    assert copies and all(e.phase == "bandwidth" and e.kernel and e.kernel["kind"] == "copy" for e in copies)
    # each read of the clock 0.3 s on: a call takes 0.3 s; 5 copies at least, and a sixth would end 3.6 s on
    assert [e.seconds for e in copies] == pytest.approx([0.3] * MIN_COPIES) and MIN_COPIES == 5
    assert len(calls) == len(copies) + 1  # the first call (compile, first touch) is not timed
    assert calls[0] == mib  # 4x the last-level cache
    assert isinstance(said[-1], Log) and "no bandwidth ceiling is kept for test CPU" in said[-1].text
    assert f"the best of 5 copies of {mib} MiB (" in said[-1].text
    assert f"not comparable across runs; `tpulab --run roofline --copy-mib {mib}` on a quiet machine" in said[-1].text


def test_a_runs_own_bandwidth_is_the_best_of_its_copies_and_its_mbu_is_set_against_it(tmp_path):
    """Known copies (64 MiB read and written in 20, 10 and 16 ms) and known token steps: the bandwidth is the
    fastest copy's, the source says which and the spread, and the MBU is the steps' median rate over it."""
    events = decode_events(0.1, [0.004, 0.005, 0.006])
    copies = [Step(step=i, seconds=x, phase="bandwidth", kernel=Kernel("copy", "float32", 64).to_json())
              for i, x in enumerate([0.02, 0.01, 0.016])]
    d = own(record(tmp_path, events[:1] + copies + events[1:]))
    best = 2 * 64 * MIB / 0.01  # 13.4 GB/s
    assert d is not None and d.bandwidth == pytest.approx(best)
    assert d.bandwidth_source == ("measured by this run before its prefill: the best of 3 copies of 64 MiB "
                                  "(6.7 GB/s to 13.4 GB/s)")
    step = shape(P).weight_bytes + 2 * 32 * shape(P).kv_bytes_per_position  # the bytes of a token step
    assert d.mbu == pytest.approx(step / 0.005 / best)  # the median step's rate over the best copy


def test_a_kept_ceiling_is_checked_by_fewer_copies(monkeypatch):
    """A kept ceiling stays the denominator; the run still copies, in a quarter of the time, to check it."""
    from tpulab.workloads.shared import kernels

    monkeypatch.setattr(kernels, "probe_llc", lambda root: 32 * MIB)

    def copies(kept: list[str]) -> list[Event]:
        said: list[Event] = []
        ticks = iter(x * 0.05 for x in range(1000))  # a copy takes 0.05 s
        measure_bandwidth(kept, placement(), lambda k: (lambda: None), said.append, clock=lambda: next(ticks))
        return said

    checked, measured = copies(["test CPU"]), copies([])
    assert sum(isinstance(e, Step) for e in checked) == MIN_COPIES < sum(isinstance(e, Step) for e in measured)
    assert isinstance(checked[-1], Log) and checked[-1].text.startswith("checking the kept bandwidth ceiling of "
                                                                         "test CPU: this run's copies read up to")


# --- what MBU divides by, said: the kept ceiling (the copies check it), else this run's own copies --------------
COPY_S = [0.0100, 0.0110, 0.0105, 0.0102, 0.0108, 0.0104]  # 64 MiB read and written: 12.8 down to 12.2 GB/s


def with_copies(times: list[float]) -> list[Event]:
    """A decode run's events (no copy of their own) with copies of 64 MiB that took `times`, before its prefill."""
    events = decode_events(0.1, [0.004, 0.005, 0.006])
    return events[:1] + [Step(step=i, seconds=x, phase="bandwidth", kernel=Kernel("copy", "float32", 64).to_json())
                         for i, x in enumerate(times)] + events[1:]


def kept_at(value: float) -> Ceilings:
    """A store's kept bandwidth ceiling of the test CPU, `value` bytes/s."""
    from tpulab.engine.ceilings import KeptCeiling, key

    kept = Ceilings()
    kept.kept[key(Device(kind="cpu", name="test CPU"), "memory")] = KeptCeiling(value, "ab12cd34" * 4, "jax", 256, 256,
                                                                                copy=True)
    return kept


def test_without_a_kept_ceiling_the_record_says_mbu_is_against_its_own_copies_with_their_interval(tmp_path):
    from tpulab.base.noise import interval
    from tpulab.base.timing import median

    d = own(record(tmp_path, with_copies(COPY_S)))
    rates = [2 * 64 * MIB / x for x in COPY_S]
    assert d is not None and d.bandwidth_basis == "run" and d.bandwidth == pytest.approx(max(rates))
    assert d.copies_count is not None and d.copy_mib == 64 and d.copies_count == 6
    assert d.copies_median == pytest.approx(median(rates))
    assert (d.copies_low, d.copies_high) == pytest.approx(interval(rates))  # the copies' median's 95% interval
    few = own(record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01)))
    assert few is not None and few.copies_count is not None and few.copies_count == 3 and few.copies_low is None
    again = own(RunRecord.from_json(record(tmp_path, with_copies(COPY_S)).to_json()))
    assert again == d  # kept, and read back whole


@pytest.mark.parametrize("ceiling, says", [
    (12.5e9, None),  # the copies' median: they agree
    (25e9, "below it beyond the noise threshold ±10%: this run was disturbed, or the machine changed"),
    (6e9, "above it beyond the noise threshold ±10%: the ceiling was measured low, or the machine changed"),
])
def test_a_kept_ceiling_is_the_denominator_and_the_runs_copies_check_it(tmp_path, ceiling, says):
    from tpulab.workloads.decode.figures import BANDWIDTH_CHECK

    r = record(tmp_path, with_copies(COPY_S), kept_at(ceiling))
    d = own(r)
    assert d is not None and d.bandwidth == ceiling and d.bandwidth_basis == "kept"
    assert d.copies_count is not None and d.copies_count == 6  # kept, as the check
    flags = [f.message for f in r.summary.flags if f.code == BANDWIDTH_CHECK]
    assert flags == [] if says is None else len(flags) == 1 and says in flags[0] and "this run's 6 copies" in flags[0]
    no_copies = record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006]), kept_at(ceiling))
    assert not any(f.code == BANDWIDTH_CHECK for f in no_copies.summary.flags)  # nothing to check it by


def test_joules_per_token_where_the_telemetry_reads_power(tmp_path):
    """A GPU drawing 300 W (its samples stand in for a GPU this machine lacks): each token step of 5 ms
    makes 2 tokens, so a token (a decode run's example) costs 300 x 0.005 / 2 J."""
    gpu = [Accel(kind="gpu", index=0, power_w=300.0)]
    events = decode_events(0.1, [0.005] * 4, copy_s=0.01)
    samples = [Sample(t=float(i), phase="steady", devices=gpu) for i in range(3)]
    d = record(tmp_path, events[:-1] + samples + events[-1:]).summary.telemetry
    assert d.energy_per_example_j == pytest.approx(300 * 0.005 / 2)
    assert record(tmp_path, events).summary.telemetry is None  # no sample, no power read: unknown


def test_the_prefills_mfu_is_set_against_the_peak_of_the_machine_the_record_names(tmp_path):
    """The record computes its device's peak once, from the machine it was given (here a fake tree's CPU, not
    this host's), and decode's prefill MFU reads that very peak."""
    r = record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01))
    d, peak = own(r), r.summary.peak_flops
    assert d is not None and d.ttft_s and peak and d.prefill_mfu == pytest.approx(shape(P).prefill_flops / d.ttft_s / peak)


def test_a_decode_runs_tokens_per_second_is_its_examples_per_second_and_no_part_overwrites_anothers(tmp_path):
    """Decode gives its own rate (tokens/s at the mean step) through its part's typed rate; a workload whose
    own fields name one the record fills is refused, naming the field, instead of silently winning."""
    r = record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01))
    d = own(r)
    assert d is not None and r.summary.examples_per_s == r.summary.throughput == d.decode_tokens_per_s

    class Greedy(type(DECODE)):  # type: ignore[misc]
        def summary_part(self, steps, started, ceilings, p, peak):
            return SummaryPart(fields={"gflops_per_s": 1e6})

    rec = RunRecorder(RunSpec(Greedy(), P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    for e in decode_events(0.1, [0.004, 0.005, 0.006]):
        rec.feed(e)
    with pytest.raises(TypeError, match="summary part sets gflops_per_s, which the record's own parts fill"):
        rec.summary()


def test_the_summarys_parts_are_disjoint_slices_of_its_flat_fields_and_its_json_stays_flat(tmp_path):
    """Timing, rates, ceilings, inference and metrics: each part the recorder makes names the summary's own fields,
    no two parts name one, and two that do are refused by name; the record keeps the summary flat, and reads it
    back whole."""
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    for e in decode_events(0.1, [0.004, 0.005, 0.006]):
        rec.feed(e)
    stats = rec.summary().step_seconds
    work = rec.work(stats, SummaryPart())
    parts = [rec.timing(stats), rec.rates(stats, work, SummaryPart(), rec.peak())[0], rec.against(work)[0],
             rec.inference(), rec.metrics()]
    names = [name for part in parts for name in part]
    assert len(names) == len(set(names)) and set(names) <= {f.name for f in fields(Summary)}
    r = record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01))
    flat = r.to_json()["summary"]
    assert flat["compile_seconds"] == r.summary.compile_seconds and flat["throughput"] == r.summary.throughput
    assert not {"timing", "rates", "ceilings", "inference", "metrics"} & set(flat)
    assert RunRecord.from_json(r.to_json()).summary == r.summary
    with pytest.raises(SummaryClash, match="two parts of a summary set compile_seconds$"):
        Summary.of(parts[0], {"compile_seconds": 2.0})


def test_a_workload_declares_the_figures_it_leads_with(tmp_path):
    """Decode leads with tokens/s, time to first token, the median inter-token latency and MBU; the notebook's
    result reads them from the summary by those paths, and a workload that declares none leads with throughput."""
    from tpulab.notebook.results import RunResult
    from tpulab.workloads.base import Workload

    r = RunResult(record(tmp_path, decode_events(0.1, [0.004, 0.005, 0.006], copy_s=0.01)))
    d = own(r.record)
    assert r.headlines == {"figures.decode_tokens_per_s": d.decode_tokens_per_s, "figures.ttft_s": d.ttft_s,
                           "figures.itl_p50": d.itl_p50, "figures.mbu": d.mbu}
    assert r.figures["ttft_s"] == d.ttft_s and list(r.timed) == [0.004, 0.005, 0.006]  # each token after the prefill
    assert Workload.headlines == ("throughput",) and r.record.summary.figure("figures.nothing.here") is None


def test_a_slow_token_is_named_where_tokens_per_s_says_less_than_the_steady_step(tmp_path):
    """Constant tokens: tokens/s and the steady step agree, nothing to say. One slow token: the mean (TPOT, what
    tokens/s counts) is above the median, and a flag says why, naming the token."""
    even = record(tmp_path / "even", decode_events(0.1, [0.004] * 8, copy_s=0.01))
    assert even.summary.throughput == pytest.approx(2 / even.summary.median)
    assert not [f for f in even.summary.flags if f.code == "tokens-per-s-below-steady"]
    slow = record(tmp_path / "slow", decode_events(0.1, [0.004] * 7 + [0.040], copy_s=0.01))
    [flag] = [f.message for f in slow.summary.flags if f.code == "tokens-per-s-below-steady"]
    assert "TPOT 8.5 ms, the mean of 8" in flag and "median (4.0 ms)" in flag and "token 8 40.0 ms" in flag


def test_the_time_left_at_half_way_is_the_latest_tokens_not_the_warm_up(tmp_path):
    """A replayed decode whose first tokens ran 10x slower (a warm-up, as seen on torch here): at half-way the time
    left is within 20% of the tokens still to come at the steady time."""
    tokens = [0.05] * 14 + [0.005] * 34  # the latest 20 at half-way: half of them warm-up
    rec = RunRecorder(RunSpec(DECODE, P, "jax", "asked for", "cpu"), cpu_only(tmp_path))
    events = decode_events(0.1, tokens, copy_s=0.01)
    half = next(i for i, e in enumerate(events) if isinstance(e, Step) and e.phase == "decode" and e.step == 24)
    for e in events[:half + 1]:
        rec.feed(e)
    left = rec.eta_seconds()
    assert left == pytest.approx(24 * 0.005, rel=0.2)
