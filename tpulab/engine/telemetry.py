"""Device telemetry beside the timings: a sampler thread and one small probe per device kind.

Why this shape: some device calls block for minutes or crash where no device answers (libtpu tries
the cloud metadata server first; NVML takes a driver lock), so every probe call runs on a daemon
thread with a timeout (`Caller`: one long-lived thread, replaced only when a call hangs); a call
that hangs is abandoned, its probe retired and the reason kept, and the run goes on. Probes are
chosen from what detection found and are imported lazily; nothing here imports a framework: what
only the process holding a device can read (JAX's memory statistics) comes in as a callable from
the worker. Samples are `Sample` events, posted through the run's sink.
"""

from __future__ import annotations

import importlib
import os
import queue
import re
import threading
import time
import weakref
from typing import Any, Callable, NamedTuple, Protocol

from tpulab.base.errors import one_line
from tpulab.base.events import (
    MARK_COMPILED,
    MARK_TRACING,
    PHASE_COMPILE,
    PHASE_STEADY,
    PHASE_TRACED,
    Accel,
    Compiled,
    Event,
    Sample,
    Started,
    Tracing,
)

INTERVAL_S = 0.5  # 2 Hz: NVML and the TPU runtime refresh about once a second; faster says nothing more
CALL_TIMEOUT_S = 5.0
MIN_CPU_WINDOW_S = 0.2  # psutil's CPU figures cover the time since the previous read, in 10 ms ticks: too short says nothing
GPU_EXTRA = "pip install 'tpulab[gpu]'"
TPU_METRICS = {"util": "tensorcore_util", "duty_cycle": "duty_cycle_pct",
               "mem_used": "hbm_capacity_usage", "mem_total": "hbm_capacity_total"}
Reading = dict[str, Any]  # Sample fields a probe measured; "devices": a list of Accel
MemoryStats = Callable[[], list[dict[str, Any]] | None]  # per local device: bytes_in_use, bytes_limit, ... (JAX); None: none


class Unavailable(Exception):
    """A probe cannot read anything here; the message says why."""


class Probe(Protocol):
    name: str  # cpu, gpu, tpu: the key its unavailable reasons are kept under

    def read(self, notes: dict[str, str]) -> Reading:
        """What it measures now; a field it cannot read goes into `notes` (name: why) and is left out."""
        ...


class Hung(Exception):
    pass


class Caller:
    """Runs calls one at a time on one long-lived daemon thread, each with a timeout.

    Why a thread: a call that hangs is abandoned with its thread (which ends if the call ever
    returns) and the next call gets a fresh one. Why one thread for every call, not one per call:
    libraries keep state per thread (psutil's `cpu_percent` keeps its previous read per thread: read
    from a new thread each time it compared nothing and said 0.0; a C library may set itself up per
    thread), new threads reuse dead ones' ids, and a thread per call pays a start every time. So
    NVML and libtpu's SDK are set up and read on one thread, one call at a time (NVML's own callers
    serialise it too), until a call hangs: then that probe is retired with its thread.
    """

    def __init__(self, name: str = "tpulab-telemetry-call") -> None:
        self.name = name
        self._inbox: queue.SimpleQueue[_Call | None] | None = None

    def call(self, fn: Callable[[], Any], timeout_s: float) -> Any:
        """`fn()`'s value (or its exception); Hung when it has not returned within `timeout_s`."""
        inbox = self._inbox  # one read: a close() from another thread cannot take it from under this call
        if inbox is None:
            inbox = self._inbox = queue.SimpleQueue()
            threading.Thread(target=_serve, args=(inbox,), daemon=True, name=self.name).start()
            weakref.finalize(self, inbox.put, None)  # a caller never closed still ends its thread
        job = _Call(fn)
        inbox.put(job)
        if not job.done.wait(timeout_s):
            self.close()  # the hung thread ends when (if) its call returns; the next call starts another
            raise Hung(f"did not answer within {timeout_s:g} s (abandoned)")
        if job.error is not None:
            raise job.error
        return job.value

    def close(self) -> None:
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None


class _Call:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn, self.done = fn, threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller's thread as it is
            self.error = e
        finally:
            self.done.set()


def _serve(inbox: queue.SimpleQueue[_Call | None]) -> None:
    while (job := inbox.get()) is not None:
        job.run()


# --- CPU ---------------------------------------------------------------------------------------
class CpuTimes(NamedTuple):
    """The CPU counters at one moment: what two reads' busy fractions are computed from."""

    t: float  # time.monotonic()
    cores: list[Any]  # psutil.cpu_times(percpu=True)
    process: float | None  # the process's CPU seconds (user and system)


class CpuProbe:
    """The host's cores and memory, and (given a pid) that process's own CPU and resident memory.

    Busy fractions come from psutil's counters against this probe's own previous read, whatever
    thread reads it: `psutil.cpu_percent()` keeps its previous read per thread and, called from
    another thread than the last time, says 0.0 for every core. Until a window of MIN_CPU_WINDOW_S
    has passed (the counters tick every 10 ms) the CPU figures are left out, None, never 0.
    """

    name = "cpu"

    def __init__(self, pid: int | None = None) -> None:
        try:
            import psutil
        except ImportError:
            self.psutil: Any = None
            return
        self.psutil = psutil
        self.process = psutil.Process(pid) if pid is not None else None
        self.prev = self._times()

    def _times(self) -> CpuTimes:
        p = self.process.cpu_times() if self.process is not None else None
        return CpuTimes(time.monotonic(), self.psutil.cpu_times(percpu=True),
                        p.user + p.system if p is not None else None)

    def read(self, notes: dict[str, str]) -> Reading:
        if self.psutil is None:
            raise Unavailable("psutil is not installed: pip install psutil")
        ps = self.psutil
        out: Reading = {}
        if time.monotonic() - self.prev.t >= MIN_CPU_WINDOW_S:
            now = self._times()
            out.update(busy(self.prev, now))
            self.prev = now
        if self.process is not None:
            out["rss"] = float(self.process.memory_info().rss)
        freq = ps.cpu_freq() if hasattr(ps, "cpu_freq") else None
        if freq is not None and freq.current:
            out["freq_mhz"] = float(freq.current)
        vm = ps.virtual_memory()
        out["mem_used"], out["mem_total"] = float(vm.total - vm.available), float(vm.total)
        return out


def busy(a: CpuTimes, b: CpuTimes) -> Reading:
    """Percent busy from a to b: per core, of all cores (cpu), and the process's share of one core.

    Busy is every tick but idle and I/O wait; guest time is already inside user time (psutil and
    top count the same way). A core whose counters did not move (taken offline) leaves `cores` out.
    """
    out: Reading = {}
    if b.process is not None and a.process is not None:
        out["process"] = 100 * max(0.0, b.process - a.process) / (b.t - a.t)
    ticks = [_ticks(x, y) for x, y in zip(a.cores, b.cores)]
    if len(a.cores) == len(b.cores) and all(total > 0 for _, total in ticks):
        out["cores"] = [100 * used / total for used, total in ticks]
        out["cpu"] = 100 * sum(used for used, _ in ticks) / sum(total for _, total in ticks)
        if "steal" in a.cores[0]._fields:
            out["steal"] = 100 * sum(max(0.0, y.steal - x.steal) for x, y in zip(a.cores, b.cores)) / sum(
                total for _, total in ticks)
    return out


def _ticks(a: Any, b: Any) -> tuple[float, float]:
    """(busy, total) seconds of one core between two reads of its counters."""
    d = {f: max(0.0, getattr(b, f) - getattr(a, f)) for f in a._fields}  # counters can step back: clamp
    total = sum(d.values()) - d.get("guest", 0.0) - d.get("guest_nice", 0.0)
    return total - d["idle"] - d.get("iowait", 0.0), total


# --- GPU ---------------------------------------------------------------------------------------
class GpuProbe:
    """NVIDIA GPUs through NVML (nvidia-ml-py, imported as `pynvml` on the first read).

    A figure whose call fails is said unavailable once and not asked again; the others go on.
    """

    name = "gpu"

    def __init__(self, indices: list[int] | None = None) -> None:
        self.indices = indices
        self.nvml: Any = None
        self.handles: list[tuple[int, Any]] = []
        self.dead: set[str] = set()

    def _open(self) -> None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            raise Unavailable(f"nvidia-ml-py is not installed: {GPU_EXTRA}") from None
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            wanted = self.indices if self.indices is not None else list(range(count))
            self.handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in wanted if i < count]
        except Exception as e:  # noqa: BLE001 - NVML's errors are its own class per code
            raise Unavailable(f"NVML could not start: {one_line(e)}") from None
        if not self.handles:
            raise Unavailable("NVML sees no GPU")
        self.nvml = nvml

    def _figures(self, h: Any) -> dict[str, Callable[[], float]]:
        n = self.nvml
        return {
            "util": lambda: n.nvmlDeviceGetUtilizationRates(h).gpu,
            "mem_used": lambda: n.nvmlDeviceGetMemoryInfo(h).used,
            "mem_total": lambda: n.nvmlDeviceGetMemoryInfo(h).total,
            "power_w": lambda: n.nvmlDeviceGetPowerUsage(h) / 1e3,
            "clock_mhz": lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "temp_c": lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            "energy_j": lambda: n.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,
        }

    def read(self, notes: dict[str, str]) -> Reading:
        if self.nvml is None:
            self._open()
        devices = []
        for index, h in self.handles:
            acc = Accel(kind="gpu", index=index)
            for field, call in self._figures(h).items():
                if field in self.dead:
                    continue
                try:
                    setattr(acc, field, float(call()))
                except Exception as e:  # noqa: BLE001 - this figure is unavailable; the others go on
                    self.dead.add(field)
                    notes[f"gpu {field}"] = one_line(e)
            devices.append(acc)
        return {"devices": devices}


# --- TPU ---------------------------------------------------------------------------------------
class TpuProbe:
    """TPU chips through libtpu's monitoring SDK; HBM from JAX's allocator when the worker lends it.

    The SDK reads the runtime's metrics, it does not open the chip; without a TPU its calls can
    block for minutes, which is why the sampler guards every read.
    """

    name = "tpu"

    def __init__(self, memory_stats: MemoryStats | None = None) -> None:
        self.memory_stats = memory_stats
        self.sdk: Any = None
        self.sdk_why: str | None = None
        self.metrics: dict[str, str] = {}

    def _open(self, notes: dict[str, str]) -> None:
        try:
            sdk = importlib.import_module("libtpu.sdk")
            mon = getattr(sdk, "tpumonitoring", None) or getattr(sdk, "monitoring", None)
            if mon is None:
                raise Unavailable("this libtpu has no monitoring SDK (libtpu.sdk.tpumonitoring)")
            supported = set(mon.list_supported_metrics())
        except ImportError:
            self.sdk_why = "libtpu's monitoring SDK is not installed (pip install libtpu)"
        except Unavailable as e:
            self.sdk_why = str(e)
        except Exception as e:  # noqa: BLE001 - the SDK's failure is the reason, in one line
            self.sdk_why = f"libtpu's monitoring SDK failed: {one_line(e)}"
        else:
            self.sdk = mon
            self.metrics = {f: m for f, m in TPU_METRICS.items() if m in supported}
            for f, m in TPU_METRICS.items():
                if m not in supported:
                    notes[f"tpu {f}"] = f"libtpu does not offer the metric {m}"
        if self.sdk is None:
            notes["tpu sdk"] = self.sdk_why or ""

    def read(self, notes: dict[str, str]) -> Reading:
        if self.sdk is None and self.sdk_why is None:
            self._open(notes)
        devices: dict[int, Accel] = {}
        for field, metric in list(self.metrics.items()):
            try:
                values = [_number(v) for v in self.sdk.get_metric(metric).data()]
            except Exception as e:  # noqa: BLE001 - this metric is unavailable; the others go on
                del self.metrics[field]
                notes[f"tpu {field}"] = f"{metric}: {one_line(e)}"
                continue
            for i, v in enumerate(values):
                if v is not None:
                    setattr(devices.setdefault(i, Accel(kind="tpu", index=i)), field, v)
        if self.memory_stats is not None:
            self._jax_memory(devices, notes)
        if not devices and self.sdk is None and self.memory_stats is None:
            raise Unavailable(self.sdk_why or "no TPU metrics")
        return {"devices": [devices[i] for i in sorted(devices)]}

    def _jax_memory(self, devices: dict[int, Accel], notes: dict[str, str]) -> None:
        try:
            stats = self.memory_stats() if self.memory_stats else []
        except Exception as e:  # noqa: BLE001
            self.memory_stats = None
            notes["tpu memory (JAX)"] = one_line(e)
            return
        if stats is None:  # the backend has no allocator figures to give
            self.memory_stats = None
            return
        for i, st in enumerate(stats):
            acc = devices.setdefault(i, Accel(kind="tpu", index=i))
            if acc.mem_used is None and st.get("bytes_in_use") is not None:
                acc.mem_used = float(st["bytes_in_use"])
            if acc.mem_total is None and st.get("bytes_limit") is not None:
                acc.mem_total = float(st["bytes_limit"])


def _number(text: Any) -> float | None:
    """A metric's value per chip: the SDK gives strings ('12.5', or '0: 12.5'); the last number counts."""
    if isinstance(text, (int, float)):
        return float(text)
    found = re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", str(text))
    return float(found[-1]) if found else None


# --- the sampler -------------------------------------------------------------------------------
class Sampler:
    """Samples every probe at `interval_s` on its own thread, and at once on `mark` (a phase boundary).

    Each probe call is guarded: a probe that raises `Unavailable` or hangs is retired, and its reason
    goes out once, on the next sample's `unavailable`. `emit` must be safe to call from this thread.
    """

    def __init__(self, probes: list[Probe], emit: Callable[[Sample], None], interval_s: float = INTERVAL_S,
                 host: int = 0, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.probes = list(probes)
        self.emit = emit
        self.interval_s = interval_s
        self.host = host
        self.timeout_s = timeout_s
        self.phase = ""
        self.said: dict[str, str] = {}  # reasons already given
        self.pending: dict[str, str] = {}  # reasons to give on the next sample
        self._marks: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.caller = Caller()

    def note(self, key: str, why: str) -> None:
        """A reason something is unavailable, given once."""
        if key not in self.said:
            self.said[key] = self.pending[key] = why

    def start(self, phase: str = "", mark: str = "start") -> None:
        self.mark(phase, mark)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tpulab-telemetry")
        self._thread.start()

    def mark(self, phase: str, mark: str) -> None:
        """A sample now (on the sampler's thread, off the caller's path), then `phase` from here on."""
        self._marks.put((phase, mark))
        self._wake.set()

    def stop(self, mark: str = "end") -> None:
        """A last sample, then the thread ends; waits at most about one guarded call."""
        if self._thread is None:
            return
        self._marks.put((self.phase, mark))
        self._stop.set()
        self._wake.set()
        self._thread.join(self.timeout_s * max(1, len(self.probes)) + 1.0)
        if not self._thread.is_alive():  # else its call still runs: the daemon thread goes with the process
            self.caller.close()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            marked = False
            while not self._marks.empty():
                phase, mark = self._marks.get()  # a boundary's sample belongs to the phase it closes
                self.emit(self.sample(mark, phase if mark == "start" else self.phase))
                self.phase, marked = phase, True
            if self._stop.is_set():
                return
            if not marked:
                self.emit(self.sample())

    def sample(self, mark: str = "", phase: str | None = None) -> Sample:
        """One sample of every live probe (also used directly, without the thread, by `tpulab top`)."""
        out = Sample(t=time.time(), host=self.host, phase=self.phase if phase is None else phase, mark=mark)
        for probe in list(self.probes):
            notes: dict[str, str] = {}
            try:
                reading = self.caller.call(lambda p=probe, n=notes: p.read(n), self.timeout_s)  # type: ignore[misc]
            except (Unavailable, Hung) as e:
                self.probes.remove(probe)
                self.note(probe.name, str(e))
                continue
            except Exception as e:  # noqa: BLE001 - a probe that breaks is retired, the run goes on
                self.probes.remove(probe)
                self.note(probe.name, one_line(e))
                continue
            finally:
                for key, why in notes.items():
                    self.note(key, why)
            for key, value in reading.items():
                if key == "devices":
                    out.devices.extend(value)
                else:
                    setattr(out, key, value)
        if self.pending:
            out.unavailable, self.pending = self.pending, {}
        return out


def probes_for(kinds: list[str], pid: int | None = None, gpu_indices: list[int] | None = None,
               memory_stats: MemoryStats | None = None) -> list[Probe]:
    """The CPU always; a GPU or TPU probe only for a kind detection found (the caller decides)."""
    probes: list[Probe] = [CpuProbe(pid)]
    if "gpu" in kinds:
        probes.append(GpuProbe(gpu_indices))
    if "tpu" in kinds:
        probes.append(TpuProbe(memory_stats))
    return probes


def visible_gpus(environ: dict[str, str] | None = None) -> list[int] | None:
    """The NVML indices CUDA_VISIBLE_DEVICES leaves to this process (None: all of them)."""
    env = os.environ if environ is None else environ
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or not all(p.strip().isdigit() for p in value.split(",") if p.strip()):
        return None
    return [int(p) for p in value.split(",") if p.strip()]


def enabled(environ: dict[str, str] | None = None) -> bool:
    """The switch: TPULAB_TELEMETRY=off (what `--telemetry off` sets for the worker) turns sampling off."""
    env = os.environ if environ is None else environ
    return env.get("TPULAB_TELEMETRY", "on").lower() not in ("off", "0", "no", "false")


class RunSampling:
    """The sampler's life in a worker: its Started event starts it (probes for the run's device kind),
    Compiled marks the steady state's start, Tracing its end (the profile's traced steps, which are not
    the steady state's), `stop()` takes the last sample before the run's last word.

    Samples go to `emit` (the process's own stream), not through the run's shared sink: in a run of
    several processes each samples its own host under its index, and the parent keeps them per host.
    """

    def __init__(self, emit: Callable[[Sample], None], host: int = 0, memory_stats: MemoryStats | None = None,
                 interval_s: float = INTERVAL_S) -> None:
        self.emit, self.host, self.memory_stats, self.interval_s = emit, host, memory_stats, interval_s
        self.sampler: Sampler | None = None

    def wrap(self, sink: Callable[[Event], None]) -> Callable[[Event], None]:
        def wrapped(event: Event) -> None:
            sink(event)
            if isinstance(event, Started) and self.sampler is None:
                kind = event.device.kind
                try:
                    probes = probes_for([kind], os.getpid(), visible_gpus(),
                                        self.memory_stats if kind == "tpu" else None)
                except Exception as e:  # noqa: BLE001 - telemetry never fails a run: it says why it is absent
                    self.emit(Sample(host=self.host, unavailable={"telemetry": one_line(e)}))
                    return
                self.sampler = Sampler(probes, self.emit, self.interval_s, self.host)
                self.sampler.start(PHASE_COMPILE)
            elif isinstance(event, Compiled) and self.sampler is not None:
                self.sampler.mark(PHASE_STEADY, MARK_COMPILED)
            elif isinstance(event, Tracing) and self.sampler is not None:
                self.sampler.mark(PHASE_TRACED, MARK_TRACING)
        return wrapped

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
