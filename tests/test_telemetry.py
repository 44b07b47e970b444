"""Device telemetry: the CPU sampler for real; NVML and libtpu's SDK as stand-in modules at the edge."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import types
from contextlib import contextmanager
from typing import Iterator

import psutil
import pytest
from rich.console import Console

from tpulab.base.events import Accel, Compiled, Device, RunRecord, Sample, Started, Step, Telemetry, Tracing
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.engine.store import Store, compare, export_csv, export_json, read_export
from tpulab.engine.telemetry import Caller, CpuProbe, GpuProbe, Hung, Sampler, TpuProbe
from tpulab.engine.telemetry_summary import SampleKeeper, summarize
from tpulab.machine.detect import detect
from tpulab.views.console import RunPrinter, comparison_table, summary_table
from tpulab.views.narrate import telemetry_rows
from tpulab.workloads import registry

from .helpers import cpu_only, json_events, make_record, run_cli, text

GiB = 2**30


def burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sum(range(1000))


# --- CPU, for real -----------------------------------------------------------------------------
def test_cpu_probe_reads_this_machine_and_this_process():
    probe = CpuProbe(os.getpid())
    burn(0.3)
    r = probe.read({})
    assert len(r["cores"]) == psutil.cpu_count() and all(0 <= c <= 100 for c in r["cores"])
    assert 0 <= r["cpu"] <= 100
    assert r["process"] > 20  # this process just burned a core for 0.3 s
    assert r["rss"] > 10 * 2**20 and 0 < r["mem_used"] <= r["mem_total"]


def test_without_psutil_the_cpu_is_said_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    sampler = Sampler([CpuProbe(os.getpid())], lambda s: None)
    first = sampler.sample()
    assert first.unavailable == {"cpu": "psutil is not installed: pip install psutil"} and first.cpu is None
    assert sampler.probes == []


def test_sampler_samples_each_phase_boundary_and_stops():
    out: list[Sample] = []
    sampler = Sampler([CpuProbe(os.getpid())], out.append, interval_s=0.25)
    sampler.start("compile")
    burn(0.6)
    sampler.mark("steady", "compiled")
    burn(0.6)
    sampler.stop()
    marks = [(s.phase, s.mark) for s in out if s.mark]
    assert marks == [("compile", "start"), ("compile", "compiled"), ("steady", "end")]
    assert [s.phase for s in out if not s.mark][:1] == ["compile"] and out[-2].phase == "steady"
    assert len(out) >= 5 and all(s.rss for s in out) and out[0].cpu is None  # nothing to measure CPU over yet
    assert sum(1 for s in out if s.cores) >= 3  # a boundary right after a periodic sample has no CPU window
    n = len(out)
    time.sleep(0.3)
    assert len(out) == n and sampler._thread is not None and not sampler._thread.is_alive()


# --- a real process under a known load, sampled from the sampler's own thread -------------------
CORE = max(os.sched_getaffinity(0))  # the core the loads below are pinned to: its figure is known
BUSY_LOOP = "while True: pass"
ON_ITS_CORE = f"""
import os
os.sched_setaffinity(0, {{{CORE}}})
try:  # its session's scheduling group first in line, so that it gets its core whatever else runs here
    with open("/proc/self/autogroup", "w") as group:
        group.write("-20")
except OSError:  # not allowed here: a fair share of the core, all of it on a quiet machine
    pass
print("go", flush=True)
"""


@contextmanager
def process_on_one_core(code: str) -> Iterator[int]:
    """A real process running `code` on CORE alone (it never leaves it); its pid, once it runs."""
    p = subprocess.Popen([sys.executable, "-c", ON_ITS_CORE + code], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)  # a session of its own: a scheduling group of its own
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "go"
        yield p.pid
    finally:
        p.kill()
        p.wait()


def sampled(pid: int, *extra, seconds: float = 1.5) -> tuple[list[Sample], Telemetry]:
    """What the sampler records of `pid` (and the `extra` probes) over `seconds`, and their summary.

    The probe is set up here and read on the sampler's thread, as in a worker."""
    keeper = SampleKeeper()
    sampler = Sampler([CpuProbe(pid), *extra], keeper.add, interval_s=0.25)
    sampler.start("steady")
    time.sleep(seconds)
    sampler.stop()
    t = summarize(keeper, None, None)
    assert t is not None
    return keeper.samples(), t


@pytest.fixture(scope="module")
def one_busy_core():
    with process_on_one_core(BUSY_LOOP) as pid:
        return sampled(pid)


def test_a_process_keeping_one_core_busy_is_seen_per_core_in_total_and_in_its_share(one_busy_core):
    samples, t = one_busy_core
    measured = [s for s in samples if s.cores]
    assert len(measured) >= 4 and samples[0].cpu is None  # the first sample has no window yet: None, not 0
    n = psutil.cpu_count()
    for s in measured:  # whatever else runs here only adds to these
        assert s.cores[CORE] >= 90, s
        assert s.cpu >= 0.9 * 100 / n, s
    assert t.busiest_core_mean >= 90 and t.cpu_mean >= 0.9 * 100 / n and t.cores == n
    assert 85 <= t.process_mean <= 105 and t.process_peak <= 110  # one thread: one core at most


def test_the_cpu_probe_reads_true_figures_from_any_thread():
    """psutil's own cpu_percent keeps its previous read per thread: from a new thread it said 0.0."""
    with process_on_one_core(BUSY_LOOP) as pid:
        probe = CpuProbe(pid)
        for _ in range(2):
            time.sleep(0.3)
            read = on_a_new_thread(lambda: probe.read({}))
            assert read["cores"][CORE] >= 90 and read["process"] >= 85, read


def on_a_new_thread(fn):
    box: list = []
    reader = threading.Thread(target=lambda: box.append(fn()))
    reader.start()
    reader.join()
    return box[0]


def one_thread(t) -> list[str]:
    """The verdict a one-thread load gets: one-busy-core, unless other work here filled every other core (then the
    load's verdict says every core was busy, and no core was the only busy one: issue 64)."""
    load = next((v.message for v in t.verdicts if v.code == "busy-machine"), "")
    if "every core was busy" in load:
        assert f"the worker's {t.process_mean:.0f}%" in load
        return []
    return ["one-busy-core"]


def test_one_busy_core_is_a_verdict_with_its_figures(one_busy_core):
    _, t = one_busy_core
    if not one_thread(t):
        return
    (v,) = [v for v in t.verdicts if v.code == "one-busy-core"]
    # whatever else runs here comes first, as busy-machine (tests/test_why_verdicts.py); the rest is the load's own
    assert [v.code for v in t.verdicts if v.code != "busy-machine"] == ["one-busy-core"]
    assert f"{t.busiest_core_mean:.0f}% on average" in v.message and f"{t.process_mean:.0f}% of a core" in v.message


# --- GPU: a stand-in NVML ------------------------------------------------------------------------
class NVMLError(Exception):
    pass


def fake_nvml(**override) -> types.ModuleType:
    """pynvml as nvidia-ml-py shapes it: one GPU with fixed figures; `override` replaces functions."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU = 1, 0
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=73, memory=40)
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2 * GiB, total=16 * GiB)
    m.nvmlDeviceGetPowerUsage = lambda h: 150_000  # mW
    m.nvmlDeviceGetClockInfo = lambda h, kind: 1410 if kind == 1 else 0
    m.nvmlDeviceGetTemperature = lambda h, kind: 61
    m.nvmlDeviceGetTotalEnergyConsumption = lambda h: 5_000_000  # mJ
    for name, fn in override.items():
        setattr(m, name, fn)
    return m


def raise_(*_):
    raise NVMLError("Not Supported")


def test_gpu_probe_reads_nvml_in_its_units(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    s = Sampler([GpuProbe()], lambda s: None).sample()
    assert s.unavailable == {}
    (d,) = s.devices
    assert (d.kind, d.index, d.util, d.mem_used, d.mem_total) == ("gpu", 0, 73, 2 * GiB, 16 * GiB)
    assert (d.power_w, d.clock_mhz, d.temp_c, d.energy_j) == (150, 1410, 61, 5000)


def test_gpu_figure_that_raises_is_said_unavailable_once_and_the_others_go_on(monkeypatch):
    calls = []

    def energy(h):
        calls.append(h)
        raise NVMLError("Not Supported")

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(nvmlDeviceGetTotalEnergyConsumption=energy))
    sampler = Sampler([GpuProbe()], lambda s: None)
    first, second = sampler.sample(), sampler.sample()
    assert first.unavailable == {"gpu energy_j": "NVMLError: Not Supported"} and second.unavailable == {}
    assert first.devices[0].energy_j is None and second.devices[0].util == 73
    assert calls == ["h0"]  # not asked again


@pytest.mark.parametrize("module, why", [
    (None, "nvidia-ml-py is not installed: pip install 'tpulab[gpu]'"),
    (fake_nvml(nvmlInit=raise_), "NVML could not start: NVMLError: Not Supported"),
    (fake_nvml(nvmlDeviceGetCount=lambda: 0), "NVML sees no GPU"),
])
def test_gpu_unavailable_says_why_once_and_the_cpu_goes_on(monkeypatch, module, why):
    monkeypatch.setitem(sys.modules, "pynvml", module)  # None: the import fails, as when it is not installed
    sampler = Sampler([CpuProbe(), GpuProbe()], lambda s: None)
    first, second = sampler.sample(), sampler.sample()
    assert first.unavailable == {"gpu": why} and second.unavailable == {}
    assert first.devices == [] and first.mem_total and second.mem_total
    assert [p.name for p in sampler.probes] == ["cpu"]


def test_a_hung_call_is_abandoned_and_the_sampling_goes_on(monkeypatch):
    release = threading.Event()
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(
        nvmlDeviceGetUtilizationRates=lambda h: release.wait(30)))
    sampler = Sampler([CpuProbe(), GpuProbe()], lambda s: None, timeout_s=0.2)
    try:
        t0 = time.monotonic()
        first = sampler.sample()
        assert time.monotonic() - t0 < 2
        assert first.unavailable == {"gpu": "did not answer within 0.2 s (abandoned)"}
        assert first.mem_total and [p.name for p in sampler.probes] == ["cpu"]
        t0 = time.monotonic()
        assert sampler.sample().mem_total and time.monotonic() - t0 < 0.2  # not asked again
    finally:
        release.set()


def test_calls_run_on_one_long_lived_thread_replaced_only_after_a_hang():
    caller = Caller()
    threads = {caller.call(threading.current_thread, 1.0) for _ in range(3)}
    (kept,) = threads
    assert kept is not threading.current_thread()
    with pytest.raises(ZeroDivisionError):
        caller.call(lambda: 1 / 0, 1.0)  # the call's own error, on the caller's side
    release = threading.Event()
    with pytest.raises(Hung):
        caller.call(lambda: release.wait(30), 0.1)
    fresh = caller.call(threading.current_thread, 1.0)
    assert fresh is not kept and fresh.is_alive()
    release.set()
    kept.join(2)
    assert not kept.is_alive()  # the abandoned thread ends once its call returns
    caller.close()
    fresh.join(2)
    assert not fresh.is_alive()


SLOW_PIPELINE = """
def batches():  # the slow source: every example made in Python, one pixel at a time
    while True:
        yield [[(i * 7919) % 255 / 255 for i in range(28 * 28)] for _ in range(16)]
for batch in batches():
    pass  # the device takes each batch at once
"""


def test_a_slow_generator_feeding_an_idle_gpu_is_input_bound(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=3, memory=1)))
    with process_on_one_core(SLOW_PIPELINE) as pid:
        _, t = sampled(pid, GpuProbe())
    assert t.device_util_mean == 3 and t.process_mean >= 80
    found = [v for v in t.verdicts if v.code != "busy-machine"]  # (whatever else runs here: its own verdict)
    assert [v.code for v in found] == ["input-bound", *one_thread(t)]
    assert "GPU was busy 3% of the time" in found[0].message


def test_a_gpu_run_without_nvml_goes_on_and_says_why(monkeypatch):
    """The worker's side: the run's Started starts the sampler for its device kind, Compiled marks the steady state."""
    from tpulab.engine.telemetry import RunSampling

    monkeypatch.setitem(sys.modules, "pynvml", None)
    stream: list = []
    sampling = RunSampling(stream.append, host=1, interval_s=0.25)
    sink = sampling.wrap(stream.append)
    sink(Started(workload="conv", device=Device(kind="gpu", name="Tesla T4"), dtype="float32", flops_per_step=1.0,
                 steps_total=2, per_replica_batch=8))
    burn(0.3)
    sink(Compiled(seconds=0.3))
    sink(Step(step=2, seconds=0.01))
    burn(0.3)
    sink(Tracing(steps=3))  # --profile's traced steps: no longer the steady state
    burn(0.3)
    sampling.stop()
    kinds = [type(e).__name__ for e in stream]
    assert kinds[0] == "Started" and "Compiled" in kinds and "Step" in kinds
    samples = [e for e in stream if isinstance(e, Sample)]
    assert [s.mark for s in samples if s.mark] == ["start", "compiled", "tracing", "end"]
    assert [s.phase for s in samples if s.mark] == ["compile", "compile", "steady", "traced"]  # each closes a window
    assert {s.host for s in samples} == {1}
    said = [s.unavailable for s in samples if s.unavailable]
    assert said == [{"gpu": "nvidia-ml-py is not installed: pip install 'tpulab[gpu]'"}]
    assert all(s.rss for s in samples)


# --- TPU: a stand-in libtpu monitoring SDK -------------------------------------------------------
def fake_libtpu(monkeypatch, metrics: dict[str, object], module: str = "tpumonitoring") -> None:
    """libtpu.sdk.<module> offering `metrics`: a list of per-chip strings, or a callable standing in for data()."""
    def get_metric(name):
        value = metrics[name]
        return types.SimpleNamespace(description=lambda: name, data=value if callable(value) else lambda: value)

    mon = types.SimpleNamespace(list_supported_metrics=lambda: list(metrics), get_metric=get_metric)
    sdk = types.ModuleType("libtpu.sdk")
    setattr(sdk, module, mon)
    monkeypatch.setitem(sys.modules, "libtpu", types.ModuleType("libtpu"))
    monkeypatch.setitem(sys.modules, "libtpu.sdk", sdk)


@pytest.mark.parametrize("module", ["tpumonitoring", "monitoring"])  # older libtpu names it monitoring
def test_tpu_probe_reads_each_chip_through_the_sdk(monkeypatch, module):
    fake_libtpu(monkeypatch, {"tensorcore_util": ["55.5", "44.0"], "duty_cycle_pct": ["0: 90", "1: 80"],
                              "hbm_capacity_usage": [str(3 * GiB), str(4 * GiB)],
                              "hbm_capacity_total": [str(16 * GiB), str(16 * GiB)]}, module)
    s = Sampler([TpuProbe()], lambda s: None).sample()
    assert s.unavailable == {}
    assert [(d.kind, d.index, d.util, d.duty_cycle, d.mem_used, d.mem_total) for d in s.devices] == [
        ("tpu", 0, 55.5, 90, 3 * GiB, 16 * GiB), ("tpu", 1, 44.0, 80, 4 * GiB, 16 * GiB)]


def test_tpu_metric_missing_or_raising_is_said_and_jax_memory_fills_in(monkeypatch):
    def broken():
        raise RuntimeError("metadata server: HTTP 403")

    fake_libtpu(monkeypatch, {"tensorcore_util": ["50"], "duty_cycle_pct": broken})
    stats = lambda: [{"bytes_in_use": 5 * GiB, "bytes_limit": 15 * GiB}]  # noqa: E731 - JAX's memory_stats()
    sampler = Sampler([TpuProbe(stats)], lambda s: None)
    first, second = sampler.sample(), sampler.sample()
    assert first.unavailable == {
        "tpu mem_used": "libtpu does not offer the metric hbm_capacity_usage",
        "tpu mem_total": "libtpu does not offer the metric hbm_capacity_total",
        "tpu duty_cycle": "duty_cycle_pct: RuntimeError: metadata server: HTTP 403"}
    assert second.unavailable == {}
    (d,) = second.devices
    assert (d.util, d.duty_cycle, d.mem_used, d.mem_total) == (50, None, 5 * GiB, 15 * GiB)


def test_tpu_without_the_sdk_says_why_and_uses_jax_memory_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "libtpu", None)
    alone = Sampler([TpuProbe(lambda: [{"bytes_in_use": GiB, "bytes_limit": 2 * GiB}])], lambda s: None).sample()
    assert alone.unavailable == {"tpu sdk": "libtpu's monitoring SDK is not installed (pip install libtpu)"}
    assert alone.devices[0].mem_used == GiB
    nothing = Sampler([TpuProbe()], lambda s: None)
    first = nothing.sample()
    assert first.unavailable["tpu"] == "libtpu's monitoring SDK is not installed (pip install libtpu)"
    assert first.devices == [] and nothing.probes == []


def test_tpu_call_that_hangs_is_abandoned(monkeypatch):
    release = threading.Event()
    fake_libtpu(monkeypatch, {"tensorcore_util": lambda: release.wait(30) or ["1"]})
    sampler = Sampler([CpuProbe(), TpuProbe()], lambda s: None, timeout_s=0.2)
    try:
        s = sampler.sample()
        assert s.unavailable["tpu"] == "did not answer within 0.2 s (abandoned)" and s.mem_total
    finally:
        release.set()


# --- the record: summary, verdicts, bounds, export and import -----------------------------------
def gpu_run(util: float, process: float, mem_used: float = 2 * GiB, clocks: tuple[float, float] = (1400, 1400),
            cores: int = 8, busiest: float = 20, median: float = 0.1, batch: int = 8, kind: str = "gpu") -> RunRecord:
    """A GPU run's record, built as every run builds it: events, samples among them, fed to the recorder."""
    w = registry()["conv"]
    rec = RunRecorder(RunSpec(w, {**w.defaults(), "batch_size": batch, "shards": 1}, "tensorflow", "asked for", "cpu"),
                      cpu_only_report())
    rec.feed(Started(workload="conv", device=Device(kind=kind, name="Tesla T4" if kind == "gpu" else "v5e"), dtype="float32",
                     flops_per_step=1e9, steps_total=20, per_replica_batch=batch, t=0.0))

    def sample(t: float, phase: str, mark: str = "", clock: float = clocks[1]) -> Sample:
        rest = (cores - 1) * [5.0]
        return Sample(t=t, phase=phase, mark=mark, cpu=(busiest + sum(rest)) / cores, cores=[busiest, *rest],
                      process=process, rss=GiB, mem_used=4 * GiB, mem_total=32 * GiB,
                      devices=[Accel(kind=kind, index=0, util=util, mem_used=mem_used, mem_total=16 * GiB,
                                     power_w=70, clock_mhz=clock, temp_c=80, energy_j=1000 + 50 * t)])

    rec.feed(sample(0.0, "compile", "start", clocks[0]))
    rec.feed(Compiled(seconds=1.0, t=1.0))
    rec.feed(sample(1.0, "compile", "compiled", clocks[0]))
    for i in range(10):
        rec.feed(Step(step=i + 2, seconds=median, t=1.0 + i))
        rec.feed(sample(1.5 + i, "steady"))
    rec.feed(sample(11.0, "steady", "end"))
    rec.finish("finished")
    return rec.record()


def cpu_only_report():
    """A CPU-only machine for records built outside a test's tmp_path (its fake tree read, then gone)."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as root:
        return cpu_only(Path(root))


def codes(r: RunRecord) -> list[str]:
    assert r.summary.telemetry is not None
    return [v.code for v in r.summary.telemetry.verdicts]


def test_summary_figures_and_energy_per_step():
    r = gpu_run(util=90, process=60)
    t = r.summary.telemetry
    assert t is not None and t.samples == 13 and t.hosts == 1 and t.cores == 8
    assert t.device_util_mean == 90 and t.device_mem_peak == 2 * GiB and t.device_mem_total == 16 * GiB
    assert t.process_mean == 60 and t.rss_peak == GiB
    assert t.power_mean_w == pytest.approx(50)  # from the energy counter: 50 J/s, not the 70 W readings
    assert t.energy_per_step_j == pytest.approx(5.0) and t.energy_per_example_j == pytest.approx(5.0 / 8)
    assert codes(r) == []  # a busy GPU, room in memory, a steady clock: nothing to say


def test_verdicts_name_the_figures_behind_them():
    assert codes(gpu_run(util=20, process=95)) == ["input-bound"]
    (v,) = gpu_run(util=20, process=95).summary.telemetry.verdicts  # type: ignore[union-attr]
    assert "busy 20% of the time" in v.message and "the worker 95% of a core" in v.message
    tpu = gpu_run(util=90, process=50, mem_used=15.5 * GiB, kind="tpu")
    assert codes(tpu) == ["memory-near-full"] and "15.5 GiB of 16.0 GiB (97%)" in tpu.summary.telemetry.verdicts[0].message  # type: ignore[union-attr]
    # NVML's figure holds the pool a framework reserves up front: a full GPU says nothing about the batch
    assert codes(gpu_run(util=90, process=50, mem_used=15.5 * GiB)) == []
    assert "reserves up front" in text(summary_table(gpu_run(util=90, process=50)))
    hot = gpu_run(util=90, process=50, clocks=(1800, 1200))
    assert codes(hot) == ["throttled"] and "1200 MHz" in hot.summary.telemetry.verdicts[0].message  # type: ignore[union-attr]
    one = gpu_run(util=90, process=100, busiest=98)
    assert codes(one) == ["one-busy-core"] and "98% on average" in one.summary.telemetry.verdicts[0].message  # type: ignore[union-attr]
    # the worker's own share tells one thread (about one core) from several, on two cores as on eight
    assert codes(gpu_run(util=90, process=100, busiest=98, cores=2)) == ["one-busy-core"]
    assert codes(gpu_run(util=90, process=190, busiest=98, cores=2)) == []


def test_samples_are_bounded_per_host_keeping_the_phase_boundaries():
    keeper = SampleKeeper(limit=100)
    for host in (0, 1):
        for i in range(1000):
            mark = {0: "start", 500: "compiled", 999: "end"}.get(i, "")
            keeper.add(Sample(t=float(i), host=host, mark=mark, cpu=1.0))
    for host in (0, 1):
        kept = keeper.by_host[host]
        assert 50 <= len(kept) <= 100
        assert kept[0].t == 0 and kept[-1].t == 999 and any(s.mark == "compiled" for s in kept)
        gaps = {b.t - a.t for a, b in zip(kept, kept[1:]) if not (a.mark or b.mark)}
        assert len(gaps) == 1  # thinned evenly


def test_telemetry_survives_the_store_export_and_import(tmp_path, store):
    r = gpu_run(util=20, process=95)
    store.save(r)
    export_json(store.records(), tmp_path / "x.json")
    fresh = Store(tmp_path / "b.db")
    assert fresh.import_records(read_export(tmp_path / "x.json")).runs == 1
    back = fresh.get(r.id)
    assert back.summary.telemetry == r.summary.telemetry and codes(back) == ["input-bound"]
    assert back.telemetry == r.telemetry and isinstance(back.telemetry[0].devices[0], Accel)
    export_csv([back], tmp_path / "x.csv")
    import csv

    (row,) = csv.DictReader((tmp_path / "x.csv").open())
    assert float(row["telemetry_device_util_mean"]) == 20 and float(row["telemetry_energy_per_step_j"]) == pytest.approx(5.0)
    assert row["telemetry_verdicts"] == "input-bound"


def test_a_record_from_before_telemetry_still_reads(tmp_path, store):
    old = make_record().to_json()
    old["schema"] = 2
    del old["telemetry"], old["summary"]["telemetry"]
    (tmp_path / "old.json").write_text(json.dumps({"format": "tpulab-results", "records": [old]}))
    assert store.import_records(read_export(tmp_path / "old.json")).runs == 1
    back = store.get(old["id"])
    assert back.telemetry == [] and back.summary.telemetry is None
    assert "J/step" not in text(comparison_table(compare([back, back]), 80), 80)


def test_compare_and_summary_show_the_telemetry_at_80_columns():
    runs = [gpu_run(util=90, process=60), gpu_run(util=20, process=95, median=0.2)]
    shown = text(comparison_table(compare(runs), 80), 80)
    assert all(len(line) <= 80 for line in shown.splitlines())
    for figure in ("CPU", "dev util", "peak mem", "J/step", "90%", "20%", "2.0 GiB", "10", "speedup"):
        assert figure in shown, figure
    summary = text(summary_table(runs[1]), 80)
    assert "GPU utilisation" in summary and "why: input-bound" in summary and "J per iteration" in summary


def test_a_sweep_shows_its_points_telemetry_in_a_second_table_at_80_columns():
    from tpulab.engine.sweep import Point, findings
    from tpulab.views.sweep import sweep_table, telemetry_table

    points = [Point({"batch_size": b, "image_size": 256, "filters": 32, "shards": 1}, {}, records=[r])
              for b, r in ((8, gpu_run(util=20, process=95, batch=8)), (64, gpu_run(util=90, process=60, batch=64)))]
    found = findings(points, None)
    table = telemetry_table(points, list(points[0].values), found)
    assert table is not None
    shown = text(sweep_table(points, list(points[0].values), found, "sweep"), 80) + text(table, 80)
    assert all(len(line) <= 80 for line in shown.splitlines())
    rows = [line for line in text(table, 80).splitlines() if line.lstrip().startswith(("8 ", "64 "))]
    assert len(rows) == 2 and "20%" in rows[[r.lstrip()[:2] for r in rows].index("8 ")] and "J/step" in text(table, 80)
    plain = [Point({"batch_size": 8}, {}, records=[make_record()])]
    assert telemetry_table(plain, ["batch_size"], findings(plain, None)) is None  # nothing measured: no table


def test_headless_printer_says_unavailable_once_and_a_line_every_few_seconds(cpu_machine):
    buf = io.StringIO()
    w = registry()["conv"]
    spec = RunSpec(w, w.defaults(), "tensorflow", "asked for", "cpu")
    printer = RunPrinter(RunRecorder(spec, cpu_machine), Console(file=buf, width=120))
    printer(Sample(t=0.0, cpu=10, unavailable={"gpu": "nvidia-ml-py is not installed"}))
    for t in (1.0, 2.0, 6.0):
        printer(Sample(t=t, cpu=50, process=98, rss=GiB, cores=[50.0, 50.0]))
    out = buf.getvalue()
    assert out.count("gpu unavailable: nvidia-ml-py is not installed") == 1
    assert out.count("telemetry CPU") == 2 and "CPU 50% (worker 98% of a core, 1.0 GiB)" in out


# --- the command line --------------------------------------------------------------------------
def test_top_json_prints_exactly_count_samples():
    with process_on_one_core(BUSY_LOOP):
        out = run_cli("top", "--json", "--count", "2", "--interval", "0.3", timeout=60)
    assert out.returncode == 0, out.stderr
    lines = json_events(out.stdout)
    assert len(lines) == 2 and all(e["event"] == "sample" for e in lines)
    assert all(len(e["cores"]) == psutil.cpu_count() and e["mem_total"] > 0 and e["cpu"] is not None for e in lines)
    assert all(e["cores"][CORE] >= 90 for e in lines)  # the first sample too: a core kept busy reads busy
    assert lines[1]["t"] > lines[0]["t"]
    bad = run_cli("top", "--count", "0", timeout=60)
    assert bad.returncode == 2 and "--count must be a positive integer" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["on", "off"])
def test_a_run_keeps_its_samples_and_the_switch_turns_them_off(tmp_path, switch):
    """Any backend's worker samples, and reads the switch: JAX, the quicker to start (its 500 steps last over the
    sampler's half second)."""
    out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--batch-size", "8", "--image-size", "64",
                  "--filters", "16", "--iterations", "500", "--warmup", "1", "--db", str(tmp_path / "r.db"),
                  "--telemetry", switch)
    assert out.returncode == 0, out.stderr
    events = json_events(out.stdout)
    samples = [e for e in events if e["event"] == "sample"]
    result = events[-1]
    if switch == "off":
        assert samples == [] and result["telemetry"] == [] and result["summary"]["telemetry"] is None
        return
    assert [s["mark"] for s in samples if s["mark"]] == ["start", "compiled", "end"]
    assert any(s["process"] for s in samples)  # a sample at least 0.2 s after the previous one measures the CPU
    kinds = [e["event"] for e in events]
    assert kinds.index("started") < kinds.index("sample") and kinds[-3:] == ["sample", "finished", "result"]
    assert len(result["telemetry"]) == len(samples)
    t = result["summary"]["telemetry"]
    assert t["samples"] == len(samples) and t["rss_peak"] > 50 * 2**20 and t["process_mean"] > 0
    for s in samples:  # the host's busy cores hold at least the worker's own share (10 ms ticks: a little slack)
        if s["process"] is not None:
            assert sum(s["cores"]) >= 0.8 * s["process"] and s["process"] > 0, s
    shown = run_cli("results", "--db", str(tmp_path / "r.db"), "show", result["id"][:8]).stdout
    assert "worker" in shown and "of a core" in shown


def test_the_steady_state_ends_at_the_last_timed_step():
    """A worker that idles after its last step (TensorFlow's `predict` tearing down its input): the samples
    after that step are never the steady state's, so the busy core reads busy."""
    t0 = 1.77e9
    rec = RunRecorder(RunSpec(registry()["conv"], {**registry()["conv"].defaults(), "device": "cpu"}, "tensorflow",
                              "asked for", "cpu"), detect())
    events = [Started(t=t0, workload="conv", device=Device(kind="cpu", name="test CPU"), dtype="float32",
                      flops_per_step=1e9, steps_total=5, per_replica_batch=8),
              Sample(t=t0, phase="compile", mark="start", rss=8e8),
              Compiled(t=t0 + 1, seconds=1.0), Sample(t=t0 + 1, phase="steady", mark="compiled", cpu=60, process=90)]
    events += [e for i in range(1, 5) for e in (
        Sample(t=t0 + 1 + i * 0.5 - 0.25, phase="steady", cpu=55, cores=[100, 10], process=100),
        Step(t=t0 + 1 + i * 0.5, step=i, seconds=0.5))]
    events += [Sample(t=t0 + 3 + i * 0.5, phase="steady", cpu=5, cores=[5, 5], process=0) for i in range(1, 9)]
    events.append(Sample(t=t0 + 7.5, phase="steady", mark="end", cpu=5, cores=[5, 5], process=0))
    for e in events:
        rec.feed(e)
    rec.finish("finished")
    t = rec.record().summary.telemetry
    assert t is not None and (t.process_mean, t.cpu_mean, t.busiest_core_mean) == (100, 55, 100)
    assert t.process_peak == 100 and t.samples == len([e for e in events if isinstance(e, Sample)])


def test_a_run_too_short_to_sample_says_so():
    """No two CPU reads 0.2 s apart: the summary says how long the run was sampled, never a dash."""
    keeper = SampleKeeper()
    for t, mark in ((100.0, "start"), (100.3, "compiled"), (100.4, "end")):
        keeper.add(Sample(t=t, phase="steady", mark=mark, rss=5e8, mem_used=4e9, mem_total=8e9))
    t = summarize(keeper, 0.01, 8)
    assert t is not None and t.span_s == pytest.approx(0.4) and t.process_mean is None
    rows = dict(telemetry_rows(t))
    assert rows["host CPU, all processes"] == "too short to sample: 0.4 s"
    assert rows["this run's worker"].startswith("CPU too short to sample: 0.4 s, memory peak")
    assert " - " not in rows["this run's worker"]


@pytest.mark.slow
def test_a_tensorflow_convs_steady_telemetry_reads_its_busy_core_as_busy(tmp_path):
    """Its own steps are the known load: oneDNN's convolution (the default one, on 32 images: 0.1-0.2 s a step
    here, 2-3 s in all) keeps the worker on at least one core while they run, and the idle after the last one is
    not in the steady means (measured beside other work here: the worker's mean was 0.6-1.0 of a core with it left
    out)."""
    pytest.importorskip("tensorflow")
    out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "tensorflow", "--device", "cpu",
                  "--batch-size", "32", "--iterations", "16", "--db", str(tmp_path / "r.db"), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json_events(out.stdout)[-1]
    t = result["summary"]["telemetry"]
    last = max(s["t"] for s in result["steps"])
    after = [s for s in result["telemetry"] if s["t"] > last]
    assert after and after[-1]["mark"] == "end"  # the worker was sampled after its last step, left out:
    assert t["process_mean"] >= 50, t  # the busy core reads busy
