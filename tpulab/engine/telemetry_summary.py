"""What a run's telemetry samples say: bounded keeping, the summary figures, and verdicts with their figures.

Called by the recorder, so the headless printer, the lab, comparisons and exports read one summary.
Means cover the steady state when it was sampled (compile is another kind of work), else every sample; it
ends at the run's last timed step (after it, a framework may idle while it tears down: TensorFlow's `predict`
waited 0-13 s with the worker at 0% of a core, which the means would have counted as the run's).
Verdicts are given only for patterns with a clear cause, each naming the figures behind it; other processes' load
comes first, since a core they held explains a half-used machine before the run's own threads do.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Callable, Iterable

from tpulab.base import fmt
from tpulab.base.events import MARK_COMPILED, PHASE_STEADY, Sample, Telemetry
from tpulab.base.timing import Flag

MAX_PER_HOST = 600  # samples kept per host: 5 minutes at 2 Hz whole, longer runs thinned evenly
INPUT_BOUND_DEVICE = 50.0  # device busy below this (percent) ...
INPUT_BOUND_HOST = 80.0  # ... while the worker used this much of a core (or the host this much of all)
BUSY_CORE = 85.0  # a core this busy on average, while the worker used about one core (up to ONE_THREAD) ...
ONE_THREAD = 115.0  # ... percent of a core: more is the work of several threads
MEMORY_NEAR_FULL = 0.90
GPU_POOL_NOTE = "NVML's figure includes the memory the framework reserves up front"
THROTTLE = 0.90  # steady clock below this fraction of the run's peak
BUSY_SHARE = 0.25  # other processes using more of the cores than this: the run's figures are partly theirs


@dataclass(frozen=True)
class Load:
    """How much of the machine other processes used while a run ran: the steady mean of the host's busy
    cores minus the worker's own (the telemetry samples both)."""

    other: float  # cores
    cores: int

    @property
    def busy(self) -> bool:
        return self.other > BUSY_SHARE * self.cores

    def words(self) -> str:
        """'other processes used 0.93 of 2 cores (47%)'."""
        return f"other processes used {self.other:.2f} of {self.cores} cores ({self.other / self.cores:.0%})"


def load_of(t: Telemetry | None) -> Load | None:
    """Other processes' load from a run's telemetry (None: not sampled)."""
    if t is None or t.cpu_mean is None or t.process_mean is None or not t.cores:
        return None
    return Load(max(0.0, t.cpu_mean / 100 * t.cores - t.process_mean / 100), t.cores)


class SampleKeeper:
    """At most `limit` samples per host, evenly spaced: when full, every other one goes and from then on
    only every other one is kept (a stride that doubles); phase boundaries always stay."""

    def __init__(self, limit: int = MAX_PER_HOST) -> None:
        self.limit = limit
        self.by_host: dict[int, list[Sample]] = {}
        self._seq: dict[int, list[int]] = {}  # each kept sample's arrival number
        self._seen: dict[int, int] = {}
        self._stride: dict[int, int] = {}
        self.unavailable: dict[str, str] = {}

    def add(self, s: Sample) -> None:
        self.unavailable.update({k: v for k, v in s.unavailable.items() if k not in self.unavailable})
        h = s.host
        n = self._seen[h] = self._seen.get(h, -1) + 1
        stride = self._stride.get(h, 1)
        if n % stride and not s.mark:
            return
        kept, seq = self.by_host.setdefault(h, []), self._seq.setdefault(h, [])
        kept.append(s)
        seq.append(n)
        if len(kept) > self.limit:
            stride = self._stride[h] = stride * 2
            keep = [i for i, (x, k) in enumerate(zip(kept, seq)) if k % stride == 0 or x.mark]
            kept[:], seq[:] = [kept[i] for i in keep], [seq[i] for i in keep]

    def samples(self) -> list[Sample]:
        return [s for host in sorted(self.by_host) for s in self.by_host[host]]


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return fmean(vals) if vals else None


def _peak(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def steady(samples: list[Sample], until: float | None = None) -> list[Sample]:
    """The steady state's samples (from the end of compile to the last timed step, at `until`), else all of
    them up to it."""
    timed = [s for s in samples if until is None or s.t is None or s.t <= until]
    out = [s for s in timed if s.phase == PHASE_STEADY or s.mark == MARK_COMPILED]
    return out if len(out) >= 2 else timed


def device_power(samples: list[Sample]) -> float | None:
    """Mean power of the devices over these samples, in watts: from the energy counter when there is one."""
    with_energy = [s for s in samples if s.devices and all(d.energy_j is not None for d in s.devices)]
    if len(with_energy) >= 2 and with_energy[-1].t and with_energy[0].t and with_energy[-1].t > with_energy[0].t:
        joules = sum(d.energy_j or 0 for d in with_energy[-1].devices) - sum(d.energy_j or 0 for d in with_energy[0].devices)
        return joules / (with_energy[-1].t - with_energy[0].t)
    return _mean(sum(d.power_w for d in s.devices if d.power_w is not None) if any(d.power_w is not None for d in s.devices)
                 else None for s in samples)


def summarize(keeper: SampleKeeper, median_step_s: float | None, batch: int | None,
              until: float | None = None) -> Telemetry | None:
    """The samples' figures; `until`: when the run's last timed step ended (no later sample is the steady
    state's)."""
    hosts = keeper.by_host
    everything = keeper.samples()
    if not everything:
        return None
    runs = {h: steady(ss, until) for h, ss in hosts.items()}
    # the sample closing compile marks where the steady state's energy starts; its window was compile's
    cur = [s for ss in runs.values() for s in ss if s.mark != "compiled"] or everything

    def mean(get: Callable[[Sample], float | None]) -> float | None:
        """Over the steady state; over the whole run when the steady state was too short to measure it."""
        found = _mean(get(s) for s in cur)
        return found if found is not None else _mean(get(s) for s in everything)

    devs = [d for s in cur for d in s.devices]
    all_devs = [d for s in everything for d in s.devices]
    fullest = max((d for d in all_devs if d.mem_used is not None), key=lambda d: d.mem_used or 0, default=None)
    powers = [device_power(ss) for ss in runs.values()]
    power = sum(p for p in powers if p is not None) if any(p is not None for p in powers) else None
    per_step = power * median_step_s if power is not None and median_step_s else None
    cores = max((len(s.cores) for s in everything), default=0) or None
    times = [s.t for s in everything if s.t is not None]
    t = Telemetry(
        samples=len(everything), hosts=len(hosts), cores=cores, span_s=max(times) - min(times) if times else None,
        cpu_mean=mean(lambda s: s.cpu), cpu_peak=_peak(s.cpu for s in everything),
        busiest_core_mean=mean(lambda s: max(s.cores) if s.cores else None),
        process_mean=mean(lambda s: s.process), process_peak=_peak(s.process for s in everything),
        steal_mean=mean(lambda s: s.steal), freq_mean_mhz=mean(lambda s: s.freq_mhz),
        freq_max_mhz=_peak(s.freq_mhz for s in everything),
        rss_peak=_peak(s.rss for s in everything),
        host_mem_peak=_peak(s.mem_used for s in everything), host_mem_total=_peak(s.mem_total for s in everything),
        device_kind=all_devs[0].kind if all_devs else None,
        device_util_mean=_mean(d.util for d in devs), device_util_peak=_peak(d.util for d in all_devs),
        device_mem_peak=fullest.mem_used if fullest else None,
        device_mem_total=(_peak(d.mem_total for d in all_devs if d.index == fullest.index) if fullest else None),
        power_mean_w=power, temp_peak_c=_peak(d.temp_c for d in all_devs),
        clock_peak_mhz=_peak(d.clock_mhz for d in all_devs), clock_steady_mhz=_mean(d.clock_mhz for d in devs),
        energy_per_step_j=per_step, energy_per_example_j=per_step / batch if per_step is not None and batch else None,
        host_cpu_mean=[_mean(s.cpu for s in runs[h] if s.mark != "compiled") for h in sorted(hosts)] if len(hosts) > 1 else None,
        host_rss_peak=[_peak(s.rss for s in hosts[h]) for h in sorted(hosts)] if len(hosts) > 1 else None,
        unavailable=dict(keeper.unavailable))
    t.verdicts = verdicts(t)
    return t


def verdicts(t: Telemetry) -> list[Flag]:
    """The patterns with a clear cause, each with its figures: other processes' load first (what they held
    was not the run's to use, so it explains an idle core before the run's threads do)."""
    out: list[Flag] = []
    kind = (t.device_kind or "device").upper()
    load = load_of(t)
    busy = load if load is not None and load.busy else None
    one_thread = (t.cores and t.cores >= 2 and t.busiest_core_mean is not None and t.process_mean is not None
                  and t.busiest_core_mean >= BUSY_CORE and BUSY_CORE <= t.process_mean <= ONE_THREAD)
    every_core = busy is not None and (t.cpu_mean or 0) >= BUSY_CORE  # all busy: no core was the only busy one
    if busy is not None:
        out.append(Flag("busy-machine", f"more than a quarter of the {busy.cores} cores ({busy.other:.2f}) were "
                        "other processes' (the disturbed flag): they explain a half-used machine before the run's "
                        "threads do; judge threads and precision on a quieter machine (`tpulab top` shows the load)"
                        + (f"; every core was busy (all cores averaged {fmt.pct(t.cpu_mean)}), the worker's "
                           f"{fmt.pct(t.process_mean)} of one among them, so how many threads the work runs on "
                           "cannot be told here" if every_core and one_thread else "")))
    host_busy = (t.process_mean or 0) >= INPUT_BOUND_HOST or (t.cpu_mean or 0) >= INPUT_BOUND_HOST
    if t.device_util_mean is not None and t.device_util_mean < INPUT_BOUND_DEVICE and host_busy:
        out.append(Flag("input-bound", f"the {kind} was busy {t.device_util_mean:.0f}% of the time while the host "
                        f"was busy (the worker {fmt.pct(t.process_mean)} of a core, CPU {fmt.pct(t.cpu_mean)} "
                        "of all cores): the host side (input pipeline, Python per step) "
                        "sets the pace; try a larger batch, prefetching, or fewer host operations per step"))
    # the worker's own share tells one thread from several; the load, whether a second one had a core to run on
    if one_thread and not every_core:
        assert t.busiest_core_mean is not None and t.process_mean is not None and t.cores  # (one_thread says so)
        said = (f"one core was busy ({t.busiest_core_mean:.0f}% on average) while the worker used "
                f"{t.process_mean:.0f}% of a core, one of {t.cores} (all cores averaged {fmt.pct(t.cpu_mean)})")
        if busy is not None and t.cores - t.process_mean / 100 - busy.other < 1:  # no core left idle for a thread
            out.append(Flag("one-busy-core", f"{said}: other processes held the rest ({busy.other:.2f} cores), so "
                            "no core was idle for a second thread: a quieter machine shows how many threads the work "
                            "runs on"))
        else:
            out.append(Flag("one-busy-core", f"{said}: the work runs on one thread"))
    # NVML counts the pool TensorFlow and JAX reserve up front (most of the GPU), not what the run uses:
    # a GPU's figure cannot say how near the largest batch is, so only a TPU's (the allocator's) is judged.
    if (t.device_kind == "tpu" and t.device_mem_peak and t.device_mem_total
            and t.device_mem_peak / t.device_mem_total >= MEMORY_NEAR_FULL):
        out.append(Flag("memory-near-full", f"{kind} memory peaked at {fmt.bytes_(t.device_mem_peak)} of "
                        f"{fmt.bytes_(t.device_mem_total)} ({t.device_mem_peak / t.device_mem_total:.0%}): "
                        "the largest batch that fits is near"))
    elif (t.device_kind is None and t.host_mem_peak and t.host_mem_total
          and t.host_mem_peak / t.host_mem_total >= MEMORY_NEAR_FULL):
        out.append(Flag("memory-near-full", f"host memory peaked at {fmt.bytes_(t.host_mem_peak)} of "
                        f"{fmt.bytes_(t.host_mem_total)} ({t.host_mem_peak / t.host_mem_total:.0%}; the worker "
                        f"{fmt.bytes_(t.rss_peak)}): the largest batch that fits is near"))
    if t.clock_peak_mhz and t.clock_steady_mhz is not None and t.clock_steady_mhz < THROTTLE * t.clock_peak_mhz:
        heat = f", temperature up to {t.temp_peak_c:.0f} C" if t.temp_peak_c is not None else ""
        power = f", {t.power_mean_w:.0f} W on average" if t.power_mean_w is not None else ""
        out.append(Flag("throttled", f"the {kind} clock averaged {t.clock_steady_mhz:.0f} MHz in the steady state, "
                        f"below the {t.clock_peak_mhz:.0f} MHz it reached{heat}{power}: clock or power throttling"))
    return out
