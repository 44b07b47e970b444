"""A run's record, built from its event stream: the one place where its figures are put together
(the workload's own part and the judgement against the measured ceilings come from their owners).

The headless printer, the lab and the results store all read the same record, so a number
means the same thing everywhere. A run that fails or is cancelled keeps what it measured.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

from tpulab.base import plugins
from tpulab.base.events import (
    PHASE_BANDWIDTH,
    SummaryClash,
    SummaryFields,
    PHASE_PREDICT,
    Allocated,
    Cancelled,
    Compiled,
    Epoch,
    Event,
    Failed,
    Finished,
    Log,
    Parallel,
    Profile,
    Profiled,
    RunRecord,
    Sample,
    Started,
    Step,
    Probe,
    Telemetry,
    Summary,
)
from tpulab.base.figures import FigureValue, is_number
from tpulab.base.timing import Flag, Stats, median, sanity_flags, summarize
from tpulab.engine import ceilings as measured
from tpulab.engine.profile_verdicts import Levers, judge, roof
from tpulab.engine.spec import RunSpec
from tpulab.engine.telemetry_summary import SampleKeeper, load_of, steady
from tpulab.engine.telemetry_summary import summarize as summarize_telemetry
from tpulab.machine.detect import RuntimeReport
from tpulab.base.ceilings import Sourced
from tpulab.machine.peaks import device_peak
from tpulab.base.probe import MOVED
from tpulab.workloads.base import BACKEND, PHASE_EAGER, SummaryPart


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def origins(spec: RunSpec) -> dict[str, str]:
    """The plugin distributions (name and version) that brought this run's workload or backend."""
    out = {}
    for group, kind, name in ((plugins.WORKLOADS, "workload", spec.workload.name), (plugins.BACKENDS, "backend",
                                                                                     spec.backend)):
        found = plugins.discover(group)[0].get(name)
        if found is not None and not found[1].own:
            out[kind] = str(found[1])
    return out


DISTURBED_STEAL = 5.0  # percent of the cores' time the hypervisor took for other machines: past it, disturbed


def disturbance(t: Telemetry | None) -> Flag | None:
    """The `disturbed` flag of a run timed while other work used the machine: other processes past a quarter of the
    cores (the share that keeps a roofline from setting a ceiling), or the hypervisor's steal past `DISTURBED_STEAL`
    percent. None on a quiet machine, or one whose load was not sampled (the summary's rows say which)."""
    load = load_of(t)
    if t is None or load is None:
        return None
    steal = f"; the hypervisor took {t.steal_mean:.0f}% of the CPU time for other machines (steal)" \
        if t.steal_mean is not None and t.steal_mean >= 1 else ""
    if load.busy or (t.steal_mean or 0.0) > DISTURBED_STEAL:
        return Flag("disturbed", f"{load.words()} while this ran{steal}: its figures are this machine under that "
                    "load, not this machine alone")
    return None


def moved(p: Probe) -> Flag | None:
    """The `machine-moved` flag of a run whose control probe moved past `MOVED` from before the run to after it."""
    before, after = p.before_s, p.after_s
    if not before or not after or 1 / (1 + MOVED) <= after / before <= 1 + MOVED:
        return None
    return Flag("machine-moved", f"the control probe (a numpy sort, no framework) took {after / before:.2f}x as long "
                f"after the run as before it ({before * 1e3:.2f} ms, then {after * 1e3:.2f} ms): the machine itself "
                "changed while it ran (its clock, a neighbour), so its figures may not be this machine's")


def refused(workload: str, params: dict[str, Any], why: str, runtime: RuntimeReport, sweep: str | None = None) -> RunRecord:
    """The record of a run that could not start here (a sweep's point whose backend cannot run it): failed with
    why, its backend as it was asked for, since no spec was resolved and nothing decided."""
    at = now_iso()
    return RunRecord(id=uuid.uuid4().hex, workload=workload, params=dict(params), status="failed", started_at=at,
                     ended_at=at, backend=str(params.get(BACKEND.name, "")), backend_reason=why, runtime=runtime.to_dict(),
                     error=why, sweep=sweep)


RECENT = 10  # the latest steady steps an estimate of the time left is taken from


class RunRecorder:
    """One run's events, fed as they come, and the record and summary derived from them at any moment."""

    def __init__(self, spec: RunSpec, runtime: RuntimeReport, ceilings: measured.Ceilings | None = None,
                 run_id: str | None = None) -> None:
        """`runtime`: the machine it ran on (as detected); `ceilings`: the measured ceilings kept so far
        (from the store's roofline runs), to judge this run by; `run_id`: its job's (`RunJob.id`). A spec's
        `repeat` runs it in that many fresh processes, one after another: `begin_repeat` says each next one."""
        self.workload = spec.workload
        self.params = dict(spec.params)
        self.runtime = runtime
        self.backend = spec.backend
        self.backend_reason = spec.backend_reason
        self.sweep = spec.sweep
        self.plugins = origins(spec)
        self.model = spec.workload.model_info(spec.params)
        self.id = run_id or uuid.uuid4().hex
        self.started_at = now_iso()
        self.ended_at: str | None = None
        self.status = "running"
        self.info: Started | None = None
        self.compile_seconds: float | None = None
        self.inference_compile_seconds: float | None = None
        self.compile_steps = 0
        self.compile_phases: dict[str, float] = {}  # the first call of each phase's program (a prefill's and a token step's)
        self.cache_hit: bool | None = None
        self.steps: list[Step] = []
        self._counted: list[Step] = []  # the run's own steps (`counted`), kept as they come: a live view reads them
        self._done = 0  # per event, and a run of 100,000 steps must not cost 100,000 passes over them
        self.epochs: list[Epoch] = []
        self.steps_at_epoch_end = 0
        self.logs: list[str] = []
        self.error: str | None = None
        self.telemetry = SampleKeeper()
        self.allocated: Allocated | None = None  # the framework allocator's peaks, said after the run
        self.parallel: dict[str, FigureValue] = {}  # a run over several processes: its processes' figures (`Parallel`)
        self.ceilings = ceilings or measured.Ceilings()
        self.profiled: Profile | None = None  # the traced steps' op table, as the worker read it
        self.stopped: str | None = None  # why the run stopped itself (`too_busy`), not by the user's word
        self.repeat = spec.repeat
        self.repeat_starts: list[int] = []  # where each fresh process's steps begin, once a second one began
        self.probe = Probe()  # the machine timed before the first process and after the last (`Run` sets it)
        self.overhead_s: float | None = None  # the first process's time beyond its steps: what each further one adds

    # --- feeding --------------------------------------------------------------------------
    def feed(self, event: Event) -> None:
        match event:
            case Started():
                self.info = event
                self.params.update(event.decided)
                if self.model is not None and event.model:  # the identity the parent knew, and the worker's count
                    self.model = {**self.model, **event.model}
            case Compiled() if self.repeat_starts:  # a later process's first call: the first process's is the run's
                self.compile_steps += event.steps
            case Compiled():
                if self.workload.is_inference(event.phase):
                    self.inference_compile_seconds = event.seconds
                else:  # a run of several kernels compiles each: their first calls add up; an eager pass set beside
                    # the compiled one (--compile both) is another program of the same steps, its first call apart
                    if event.phase != PHASE_EAGER:
                        self.compile_seconds = (self.compile_seconds or 0.0) + event.seconds
                    if event.phase:
                        self.compile_phases[event.phase] = self.compile_phases.get(event.phase, 0.0) + event.seconds
                    self.cache_hit = event.cache_hit if self.cache_hit is None else self.cache_hit and event.cache_hit
                self.compile_steps += event.steps
            case Step():
                self.steps.append(event)
                if event.phase != PHASE_BANDWIDTH:
                    self._counted.append(event)
                    self._done += event.steps
            case Epoch():
                self.epochs.append(event)
                self.steps_at_epoch_end = self.steps_done()
            case Sample():
                self.telemetry.add(event)
            case Allocated():
                self.allocated = event
            case Parallel():
                self.parallel.update(event.figures)
            case Profiled():
                self.profiled = event.profile
            case Log() if event.text:
                self.logs.append(event.text)
            case Finished():
                self.finish("finished")
            case Cancelled():
                self.finish("cancelled")
            case Failed():
                self.finish("failed", event.error)

    def begin_repeat(self) -> None:
        """The run's next fresh process starts (`--repeat`): its steps follow the others' as one more repeat, and the
        run is running again until it ends."""
        self.repeat_starts = self.repeat_starts or [0]
        self.repeat_starts.append(len(self.steps))
        self.status, self.ended_at = "running", None

    def finish(self, status: str, error: str | None = None) -> None:
        if self.status == "running":
            self.status = status
            self.error = error or (self.stopped if status == "cancelled" else None)
            self.ended_at = now_iso()

    # --- derived figures ------------------------------------------------------------------
    @property
    def steps_total(self) -> int | None:
        """Every step the run will take: each of its processes' (`--repeat`)."""
        return self.info.steps_total * self.repeat if self.info and self.info.steps_total else None

    def too_busy(self) -> str | None:
        """Why a run whose figures become ceilings (`Workload.quiet`) should stop now: other processes used more
        than a quarter of the cores over its steady samples so far (at least `LOAD_SAMPLES` that read both the
        host and the worker), so it would set none (`tpulab.engine.ceilings.busy`, the same rule applied to its
        record). None: go on."""
        read = [s for s in steady(self.telemetry.samples()) if s.cpu is not None and s.process is not None]
        if not self.workload.quiet or len(read) < measured.LOAD_SAMPLES:
            return None
        t = summarize_telemetry(self.telemetry, None, 0)
        load = load_of(t)
        return f"stopped early: {measured.busy(t)}" if load is not None and load.busy else None

    def steady_seconds(self, phase: str = "") -> list[float]:
        """The steady step times of training (or of `phase`: PHASE_PREDICT for inference), as the workload counts them."""
        return [x for xs in self.steady_repeats(phase) for x in xs]

    def steady_repeats(self, phase: str = "") -> list[list[float]]:
        """The steady step times of each fresh process in turn (one list where the run ran one)."""
        return self.workload.timed_repeats(self.steps, self.repeat_starts, phase)

    def last_step_t(self) -> float | None:
        """When the run's last timed step ended (its event's time): the steady state's telemetry ends there."""
        return max((s.t for s in self.counted() if s.t is not None), default=None)

    def counted(self) -> list[Step]:
        """The run's own steps, which `steps_total` counts: not the copies that measured the machine first
        (as many as fit their time budget). The recorder's own list: read it, never change it."""
        return self._counted

    def steps_done(self) -> int:
        return self.compile_steps + self._done

    def recent_steady(self) -> list[float]:
        """The latest steady steps' times (at most `RECENT`): what the time left is taken from, past any warm-up
        of the first ones (a decode's first tokens ran 10x slower than its later ones here)."""
        return self.workload.timed_seconds(self._counted[-4 * RECENT:])[-RECENT:]

    def eta_seconds(self) -> float | None:
        """The steps still to come at the median of the latest steady ones (and the epochs' own overhead)."""
        own = self.workload.seconds_left(self.params, self.counted())
        if own is not None:
            return own
        total = self.steps_total
        per_step = median(self.recent_steady())
        if not total or per_step is None:
            return None
        left = max(0, total - self.steps_done())
        processes_left = self.repeat - max(1, len(self.repeat_starts))
        epoch_extra = (self.overhead_s or 0.0) * processes_left
        if self.epochs and left:  # validation and epoch overhead, as seen so far
            per_epoch = self.steps_at_epoch_end / len(self.epochs)
            overhead = sum(e.seconds for e in self.epochs) - per_step * self.steps_at_epoch_end
            epoch_extra += max(0.0, overhead / len(self.epochs)) * -(-left // max(1, round(per_epoch)))
        return left * per_step + epoch_extra

    def summary(self) -> Summary:
        """The run's figures, built from its parts: the workload's own (a roofline's kernels), the step's
        timing, its rates against the device's peak and measured ceilings, the inference phase, the
        metrics, the telemetry and the profile. The record keeps them flat, as one `Summary`."""
        info = self.info
        peak = self.peak()
        own = (self.workload.summary_part(self.steps, info, self.ceilings, self.params, peak) if info else None) \
            or SummaryPart()
        repeats = self.steady_repeats()
        stats = summarize([x for xs in repeats for x in xs], repeats) if own.seconds is None else summarize(own.seconds)
        work = self.work(stats, own)
        rates, flags = self.rates(stats, work, own, peak)
        against, beaten = self.against(work)
        telemetry = self.telemetry_summary(stats.median if stats else None)
        flags += [f for f in (disturbance(telemetry), moved(self.probe)) if f]
        try:
            summary = Summary.of(self.timing(stats), rates, against, self.inference(), self.metrics(), own.fields,
                                 flags=[*flags, *beaten, *own.flags], profile=self.profile(), telemetry=telemetry,
                                 figures={**own.figures, **self.parallel_figures(stats)},
                                 process_medians=[median(xs) or 0.0 for xs in repeats] if len(repeats) > 1 else None,
                                 probe=self.probe if self.probe.before_s is not None else None)
        except SummaryClash as e:  # the record's own parts are disjoint: the workload's named one of their fields
            raise TypeError(f"{self.workload.name}'s summary part sets {', '.join(e.names)}, which the record's own "
                            "parts fill: a workload adds its own fields (its rate goes in SummaryPart.examples_per_s)"
                            ) from None
        return summary

    def parallel_figures(self, stats: Stats | None) -> dict[str, FigureValue]:
        """Its processes' figures (`PARALLEL`), with the scaling efficiency: one process's step over the run's median
        step (each the time of the same work: this machine's share of the global batch; None where either is unknown)."""
        if not self.parallel:
            return {}
        alone = self.parallel.get("one_process_step_s")
        efficiency = alone / stats.median if is_number(alone) and stats and stats.median > 0 else None
        return {**self.parallel, "scaling_efficiency": efficiency}

    def telemetry_summary(self, median_step_s: float | None) -> Telemetry | None:
        """The samples' figures, with the framework allocator's peaks where the worker said them."""
        t = summarize_telemetry(self.telemetry, median_step_s, self.workload.batch_size(self.params),
                                self.last_step_t())
        if self.allocated is not None:
            t = t or Telemetry()
            t.allocated_peak, t.reserved_peak = self.allocated.allocated, self.allocated.reserved
        return t

    def profile(self) -> Profile | None:
        """The traced steps' op table, each op set against this machine's ceilings, with its verdicts (advising only
        what this machine and framework can use)."""
        info = self.info
        if self.profiled is None or info is None:
            return self.profiled
        return judge(self.profiled, roof(info.device, info.dtype, self.ceilings, self.runtime.cpu),
                     Levers.of(self.backend, info.device.kind, info.dtype, self.runtime.cpu))

    def timing(self, stats: Stats | None) -> SummaryFields:
        """The first call and the steady step, on each host too."""
        return dict(compile_seconds=self.compile_seconds, cache_hit=self.cache_hit, step_seconds=stats,
                          compile_phases=dict(self.compile_phases) if len(self.compile_phases) > 1 else None,
                          host_seconds=self.host_medians())

    def peak(self) -> Sourced | None:
        """The spec peak of the devices the run used (this machine's CPU as detected), once it said `Started`."""
        d = self.info.device if self.info is not None else None
        return device_peak(d.kind, d.name, self.info.dtype, d.replicas, self.runtime.cpu, d.machines) \
            if d is not None and self.info is not None else None

    def work(self, stats: Stats | None, own: SummaryPart) -> tuple[float | None, float | None]:
        """The FLOPs of the step the statistics are of, and their rate at its median: the workload's own step
        where it names one (a call of a roofline's best matmul)."""
        if own.seconds is not None:
            return own.flops_per_step, own.flops_per_s
        flops = self.info.flops_per_step if self.info else None
        return flops, flops / stats.median if stats and flops and stats.median > 0 else None

    def rates(self, stats: Stats | None, work: tuple[float | None, float | None], own: SummaryPart,
              peak: Sourced | None) -> tuple[SummaryFields, list[Flag]]:
        """The step's `work` (FLOPs, FLOP/s) against the device's spec `peak`, with the flags that say when a figure
        cannot be trusted; the workload's own rate (tokens/s at a token's mean step) where it gives one."""
        info, w = self.info, self.workload
        flops, flops_per_s = work
        peak_fraction = flops_per_s / peak.value if flops_per_s and peak else None
        flags = sanity_flags(peak_fraction, stats)
        if info is not None and info.synthetic:
            flags.append(Flag("synthetic-data", f"{'trained' if w.trains else 'ran'} on {w.synthetic_warning()}"))
        batch = w.batch_size(self.params)
        items = batch * w.items_per_example(self.params)
        step = stats.median if stats and stats.median > 0 else None
        examples = own.examples_per_s if own.examples_per_s is not None else batch / step if step and batch else None
        throughput = own.examples_per_s if own.examples_per_s is not None else items / step if step and items else None
        return dict(flops_per_step=flops, gflops_per_s=flops_per_s / 1e9 if flops_per_s else None,
                         peak_flops=peak.value if peak else None, peak_source=peak.source if peak else None,
                         peak_fraction=peak_fraction, mfu=peak_fraction if w.model_flops else None,
                         examples_per_s=examples, throughput=throughput, throughput_unit=w.throughput_unit), flags

    def against(self, work: tuple[float | None, float | None]) -> tuple[SummaryFields, list[Flag]]:
        """The step's `work` (FLOPs, FLOP/s) against this device's measured ceilings (`Ceilings.judge`), with a flag
        where it beat one."""
        info = self.info
        flops, flops_per_s = work
        return self.ceilings.judge(info.device if info else None, info.dtype if info else None, flops_per_s, flops,
                                   info.bytes_per_step if info else None)

    def inference(self) -> SummaryFields:
        """The inference phase (a training run's `predict`), timed apart from training."""
        stats = summarize(self.steady_seconds(PHASE_PREDICT))
        items = self.workload.batch_size(self.params) * self.workload.items_per_example(self.params)
        return dict(inference_compile_seconds=self.inference_compile_seconds, inference_step_seconds=stats,
                             inference_throughput=items / stats.median if stats and items and stats.median > 0 else None)

    def metrics(self) -> SummaryFields:
        """The model's last training metrics and its last validation."""
        return dict(final_metrics=next((s.metrics for s in reversed(self.steps) if s.metrics), None),
                           validation={k: v for k, v in (self.epochs[-1].metrics if self.epochs else {}).items()
                                       if k.startswith("val_")} or None)

    def host_medians(self) -> list[float] | None:
        """Each host's median steady step time, when several processes shared the steps."""
        rows = [s.host_seconds for s in self.steps if s.host_seconds and not s.warmup]
        if not rows:
            return None
        return [median([row[i] for row in rows if i < len(row)]) or 0.0 for i in range(max(len(row) for row in rows))]

    def record(self) -> RunRecord:
        info = self.info
        return RunRecord(
            id=self.id, workload=self.workload.name, params=self.params, status=self.status,
            started_at=self.started_at, ended_at=self.ended_at,
            device=info.device if info else None, dtype=info.dtype if info else None,
            per_replica_batch=info.per_replica_batch if info else None,
            dataset=info.dataset if info else None, synthetic=bool(info and info.synthetic),
            versions=info.versions if info else None, backend=self.backend, backend_reason=self.backend_reason,
            note=info.note if info else None, runtime=self.runtime.to_dict(), summary=self.summary(),
            steps=list(self.steps), epochs=list(self.epochs), error=self.error, logs=self.logs[-50:],
            sweep=self.sweep, plugins=self.plugins, model=self.model, telemetry=self.telemetry.samples(),
            repeats=list(self.repeat_starts))
