"""The vocabulary every part of a run speaks: typed events, and the record they build.

A worker writes events as JSON lines; the recorder, the headless printer, the lab and the store
read them back as these classes. Each class knows its JSON form, so the `--json` stream and the
stored records keep one schema (`SCHEMA`), and display code asks typed objects, not nested dicts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Mapping

from tpulab.base.figures import FigureValue
from tpulab.base.timing import Flag, Stats
from tpulab.base.schema import CONFIG, MAY_BE_NAN, PLAIN, build, plain

SCHEMA = 5  # 2: backend, backend_reason, sweep and hosts joined the record; 3: plugins, model, telemetry;
# 4: the summary's profile (op table) and a workload's own part; 5: a workload's figures, flat (older records read)
STATUSES = ("finished", "failed", "cancelled")
PHASE_COMPILE, PHASE_STEADY = "compile", "steady"  # a Sample's phase: before and after the first call
PHASE_TRACED = "traced"  # a Sample's phase while --profile traces its extra steps: not the steady state's
PHASE_TRAIN, PHASE_PREDICT = "train", "predict"  # a Step's phase in a run that trains, then infers
PHASE_BANDWIDTH = "bandwidth"  # a Step measuring the machine before a run (a timed copy): not one of the run's steps
MARK_COMPILED = "compiled"  # the Sample taken as the first call ended
MARK_TRACING = "tracing"  # the Sample taken as the traced steps began

Measured = Annotated[float, MAY_BE_NAN]  # what the model computed (a loss, a checksum): NaN when training diverged
JSON = Annotated[Any, PLAIN]  # what a field leaves open (a parameter's value, the detection report): finite numbers


@dataclass(kw_only=True)
class Device:
    """Where a run ran: what peaks are looked up by, and how many replicas shared the work."""

    kind: str  # cpu, gpu, tpu
    name: str  # CPU model, GPU name or TPU generation
    replicas: int = 1  # devices, over all hosts
    strategy: str = ""
    hosts: int = 1  # processes joined into one run (multi-host)
    machines: int = 1  # distinct machines among the hosts (local processes share one)

    def label(self, short: bool = False) -> str:
        """'CPU AMD EPYC x4', 'CPU AMD EPYC, 2 hosts x 2 devices' (without the name when short)."""
        name = "" if short else " " + self.name
        if self.hosts > 1:
            return f"{self.kind.upper()}{name}, {self.hosts} hosts x {self.replicas // self.hosts} devices"
        reps = f" x{self.replicas}" if self.replicas > 1 else ""
        return f"{self.kind.upper()}{name}{reps}".strip()


# --- events ----------------------------------------------------------------------------------
@dataclass(kw_only=True)
class Event:
    """What happened in a run, and when (Unix time, set by the worker)."""

    name: ClassVar[str] = ""
    t: float | None = None
    synthetic: bool = False  # the inputs are random stand-ins: said on every event of such a run

    def to_json(self) -> dict[str, Any]:
        return {"event": self.name, **asdict(self)}


@dataclass(kw_only=True)
class Started(Event):
    name: ClassVar[str] = "started"
    workload: str
    device: Device
    dtype: str
    flops_per_step: float | None
    steps_total: int
    per_replica_batch: int
    versions: dict[str, str] = field(default_factory=dict)
    backend: str = ""  # the worker names it
    note: str | None = None  # e.g. why auto fell back to the CPU
    dataset: str | None = None  # what the inputs are and where they live
    bytes_per_step: float | None = None  # memory traffic of a step, as the compiler counts it (None: unknown)
    model: dict[str, JSON] | None = None  # what the worker learnt of the model it built (its parameter count)
    decided: dict[str, JSON] = field(default_factory=dict)  # parameters only the worker could decide (a user's
    # example input's batch), as run: the record's parameters take them



@dataclass(kw_only=True)
class Compiled(Event):
    name: ClassVar[str] = "compiled"
    seconds: float  # the first execution: trace, compile and its steps
    steps: int = 1
    phase: str = ""
    cache_hit: bool | None = None  # its programs loaded from the persistent compilation cache (None: no cache)


@dataclass(kw_only=True)
class Step(Event):
    name: ClassVar[str] = "step"
    step: int  # index of the last step covered
    seconds: float  # per step
    steps: int = 1  # steps this measurement covered
    warmup: bool = False
    examples_per_s: float | None = None
    metrics: dict[str, Measured] = field(default_factory=dict)
    value: Measured | None = None  # the checksum that was fetched (conv)
    phase: str = ""  # PHASE_TRAIN, PHASE_PREDICT (the inference phase); "" for a workload with one phase
    host_seconds: list[float] | None = None  # per host, when several processes share the step
    kernel: dict[str, JSON] | None = None  # a run of several kernels: which one (kind, dtype, size, flops, bytes)


@dataclass(kw_only=True)
class Epoch(Event):
    name: ClassVar[str] = "epoch"
    epoch: int
    seconds: float
    metrics: dict[str, Measured] = field(default_factory=dict)


@dataclass(kw_only=True)
class Log(Event):
    name: ClassVar[str] = "log"
    text: str


@dataclass(kw_only=True)
class Finished(Event):
    name: ClassVar[str] = "finished"


@dataclass(kw_only=True)
class Cancelled(Event):
    name: ClassVar[str] = "cancelled"


@dataclass(kw_only=True)
class Failed(Event):
    name: ClassVar[str] = "failed"
    error: str
    type: str = ""


@dataclass(kw_only=True)
class Allocated(Event):
    """The framework's allocator after the run, on its fullest device (bytes): what the run's tensors took at
    their peak (`allocated`) and the pool it held for them (`reserved`), where NVML sees only the pool."""

    name: ClassVar[str] = "allocated"
    device: int = 0
    allocated: float
    reserved: float | None = None
    limit: float | None = None  # the device's memory, as the framework counts it


@dataclass(kw_only=True)
class Accel:
    """One accelerator's reading in a telemetry sample; None where it could not be read."""

    kind: str  # gpu, tpu
    index: int
    util: float | None = None  # percent busy (GPU utilisation, TPU TensorCore utilisation)
    duty_cycle: float | None = None  # percent (TPU)
    mem_used: float | None = None  # bytes
    mem_total: float | None = None
    power_w: float | None = None
    clock_mhz: float | None = None  # SM clock
    temp_c: float | None = None
    energy_j: float | None = None  # counter since the driver loaded: differences are what mean something


@dataclass(kw_only=True)
class Sample(Event):
    """What the host and its devices were doing at `t`, taken beside the steps by the telemetry sampler."""

    name: ClassVar[str] = "sample"
    host: int = 0  # the process that took it (multi-host runs)
    phase: str = ""  # compile, steady (or "" outside a run: `tpulab top`)
    mark: str = ""  # start, compiled, end: the samples taken at a phase's boundary
    cpu: float | None = None  # percent of all cores, since the previous sample
    cores: list[float] = field(default_factory=list)  # percent per core
    process: float | None = None  # the worker's own CPU, percent of one core
    steal: float | None = None  # percent of all cores' time the hypervisor gave to other machines (Linux's steal)
    freq_mhz: float | None = None  # the cores' mean clock, where the kernel says it
    rss: float | None = None  # the worker's resident memory, bytes
    mem_used: float | None = None  # the host's memory in use, bytes
    mem_total: float | None = None
    devices: list[Accel] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # what cannot be read, and why: said once



@dataclass(kw_only=True)
class OpRow:
    """One op (or fusion) of a profiled step: where the step's time went. Per step: `calls`, `seconds`,
    `flops`, `bytes`; `share` is a fraction (0 to 1) of the step. The figures against the ceilings are
    filled where the op's FLOPs and bytes are known, None otherwise."""

    name: str  # as the trace names it: an HLO instruction ("fusion.12"), a TF node ("dense/MatMul")
    type: str = ""  # the framework's op type: an HLO opcode or fusion kind, a TF op ("MatMul")
    category: str = "other"  # one of OP_CATEGORIES
    calls: float = 0.0
    seconds: float = 0.0
    share: float = 0.0
    flops: float | None = None
    bytes: float | None = None
    gflops_per_s: float | None = None
    gbytes_per_s: float | None = None
    intensity: float | None = None  # FLOP per byte
    ceiling_fraction: float | None = None  # of the ceiling it sits under (compute or memory), measured or spec
    ceiling: str | None = None  # what that is a fraction of: "the compute ceiling" (measured), "the spec peak"...
    bound: str | None = None  # "compute" or "memory": which side of the ridge its intensity puts it


OP_CATEGORIES = ("matmul/conv", "elementwise", "reduction", "data movement", "collective", "host-to-device", "other")
OTHER_OPS = "other"  # the row that sums the ops below the top ones


@dataclass(kw_only=True)
class Profile:
    """A run's op-level profile: the few steps traced after the timed ones, read in the worker."""

    steps: int = 0  # steps traced
    step_seconds: float | None = None  # a traced step's wall time (its annotation), the median
    ops: list[OpRow] = field(default_factory=list)  # by time, the top ones and one `other` row
    host_gap: float | None = None  # seconds per step in which no op ran: the device waited on the host
    host_gap_share: float | None = None  # of the step, 0 to 1
    trace_path: str | None = None  # the raw trace (a folder), under tpulab's home; removed with the run
    profiler: str = ""  # what took it: "jax.profiler", "tf.profiler"
    where: str = ""  # the trace's lines the ops were read from ("/host:CPU", "/device:GPU:0")
    no_flops: str | None = None  # why ops have no FLOPs (None: where known, they are given)
    against: str | None = None  # the ceilings each op is set against, and where each came from (measured, spec)
    verdicts: list[Flag] = field(default_factory=list)



@dataclass
class Tracing(Event):
    """The steps traced for the profile begin: none is timed, and the telemetry's steady state ended."""

    name: ClassVar[str] = "tracing"
    steps: int = 0


@dataclass
class Profiled(Event):
    """The op table of the steps traced after the timed ones (never part of the timing statistics)."""

    name: ClassVar[str] = "profiled"
    profile: Profile = field(default_factory=Profile)



@dataclass(kw_only=True)
class Parallel(Event):
    """A run over several processes, after its timed steps: the figures of its processes (`tpulab.base.figures.PARALLEL`:
    threads, the all-reduce probe, one process's step), which the summary keeps with the workload's own."""

    name: ClassVar[str] = "parallel"
    figures: dict[str, FigureValue] = field(default_factory=dict)


EVENTS: dict[str, type[Event]] = {c.name: c for c in (Started, Compiled, Step, Epoch, Log, Finished, Cancelled, Failed,
                                                       Sample, Tracing, Profiled, Allocated, Parallel)}


def event_from_json(data: Mapping[str, Any]) -> Event:
    """An event from its JSON object; anything unknown becomes a log line rather than an error."""
    cls = EVENTS.get(str(data.get("event")))
    if cls is None:
        return Log(text=json.dumps(dict(data)), t=data.get("t"))
    return build(cls, data)


def from_dicts(sink: Callable[[Event], None], synthetic: bool = False) -> Callable[[Mapping[str, Any]], None]:
    """A sink for the public `StepTimer`, which speaks plain dicts, feeding a sink of typed events."""
    return lambda data: sink(event_from_json({**data, "synthetic": synthetic or data.get("synthetic", False)}))


def parse_line(line: str) -> Event | None:
    """One line of a worker's stdout: an event, or the line itself as a log event."""
    line = line.strip()
    if not line:
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return Log(text=line)
    return event_from_json(data) if isinstance(data, dict) else Log(text=line)


# --- the record ------------------------------------------------------------------------------
@dataclass(kw_only=True)
class Telemetry:
    """What the samples say about a run, derived by the recorder; None where nothing was measured."""

    samples: int = 0
    hosts: int = 1
    cores: int | None = None
    span_s: float | None = None  # from the first sample to the last: a run too short for a CPU figure says so
    cpu_mean: float | None = None  # percent of all cores (steady state when there is one)
    cpu_peak: float | None = None
    busiest_core_mean: float | None = None  # the busiest core of each sample, averaged
    process_mean: float | None = None  # the worker's, percent of one core
    process_peak: float | None = None
    steal_mean: float | None = None  # percent of all cores' time taken by the hypervisor for other machines
    freq_mean_mhz: float | None = None  # the cores' clock over the steady state, where the kernel says it
    freq_max_mhz: float | None = None
    rss_peak: float | None = None  # bytes
    host_mem_peak: float | None = None
    host_mem_total: float | None = None
    device_kind: str | None = None
    device_util_mean: float | None = None  # percent, over the devices
    device_util_peak: float | None = None
    device_mem_peak: float | None = None  # bytes, the fullest device
    device_mem_total: float | None = None
    power_mean_w: float | None = None  # over the devices, summed
    temp_peak_c: float | None = None
    clock_peak_mhz: float | None = None
    clock_steady_mhz: float | None = None
    energy_per_step_j: float | None = None
    energy_per_example_j: float | None = None
    allocated_peak: float | None = None  # bytes: the framework allocator's peak on its fullest device (`Allocated`)
    reserved_peak: float | None = None  # bytes: the pool it held there
    host_cpu_mean: list[float | None] | None = None  # per host (multi-host runs); None: not measured
    host_rss_peak: list[float | None] | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    verdicts: list[Flag] = field(default_factory=list)



@dataclass(kw_only=True)
class KernelFigure:
    """One kernel of a run that times several (a roofline's matmul at one size): its median and rate."""

    kind: str  # matmul, copy
    dtype: str
    size: int  # matrix side, or MiB copied
    median_s: float
    count: int
    flops_per_s: float | None = None
    bytes_per_s: float | None = None  # read and written


@dataclass(kw_only=True)
class Probe:
    """A framework-free kernel timed on the machine just before a run's first process and just after its last: a
    machine that really changed while the run went (its clock, a neighbour) moves it, whatever the run's own steps say."""

    before_s: float | None = None  # the probe's median call, seconds
    after_s: float | None = None

    @property
    def moved(self) -> float | None:
        """After over before: 1.0 is a machine that stayed as it was."""
        return self.after_s / self.before_s if self.before_s and self.after_s else None


SummaryFields = dict[str, Any]  # a slice of the summary's fields by name, as one part of the recorder makes it


class SummaryClash(TypeError):
    """Two parts of a summary set the same field."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"two parts of a summary set {', '.join(names)}")
        self.names = names


@dataclass(kw_only=True)
class Summary:
    """The figures a run is judged by, derived once by the recorder."""

    compile_seconds: float | None = None
    compile_phases: dict[str, float] | None = None  # each program's first call, where a run compiles several apart
    # (a prefill and the step after it): `compile_seconds` is their sum
    cache_hit: bool | None = None  # the first call loaded its programs from the compilation cache (None: no cache)
    step_seconds: Stats | None = None  # the steady state
    flops_per_step: float | None = None
    gflops_per_s: float | None = None  # at the median
    peak_flops: float | None = None
    peak_source: str | None = None
    peak_fraction: float | None = None
    examples_per_s: float | None = None
    throughput: float | None = None  # examples/s in the workload's own unit (`throughput_unit`: tokens/s...)
    throughput_unit: str = "examples/s"
    mfu: float | None = None  # model FLOPs utilisation: the model's FLOPs by formula, as a fraction of peak
    inference_compile_seconds: float | None = None  # the inference phase (predict), timed apart from training
    inference_step_seconds: Stats | None = None
    inference_throughput: float | None = None  # in `throughput_unit`
    final_metrics: dict[str, Measured] | None = None
    validation: dict[str, Measured] | None = None
    flags: list[Flag] = field(default_factory=list)
    host_seconds: list[float] | None = None  # median step time per host (multi-host runs)
    telemetry: Telemetry | None = None
    ceiling_flops: float | None = None  # this device's measured ceiling for the dtype (a roofline run's best)
    ceiling_source: str | None = None  # the roofline run, backend and size it came from
    ceiling_fraction: float | None = None  # None above the ceiling: a "ceiling-measured-low" flag says so instead
    bandwidth: float | None = None  # this device's measured memory ceiling, bytes/s
    bytes_per_step: float | None = None  # as the compiler counts them (XLA's cost analysis)
    intensity: float | None = None  # FLOP per byte accessed
    bound: str | None = None  # "compute" or "memory": which ceiling the intensity puts the run under
    gbytes_per_s: float | None = None  # a roofline's copy: bytes read and written per second, best size
    kernels: list[KernelFigure] = field(default_factory=list)
    profile: Profile | None = None  # the op table of the traced steps (`--profile`)
    figures: dict[str, FigureValue] = field(default_factory=dict)  # the workload's own (`Workload.figures`)
    process_medians: list[float] | None = None  # each fresh process's median step (`--repeat`), in the order they ran
    probe: Probe | None = None  # the machine itself, timed before the run and after it (`tpulab.base.probe`)

    @classmethod
    def of(cls, *parts: Mapping[str, Any], **rest: Any) -> Summary:
        """A summary from its parts (`SummaryFields`), flat as the record keeps it: a field that two parts both set
        is refused, by name (a workload's own part cannot overwrite the record's)."""
        flat: dict[str, Any] = dict(rest)
        for part in parts:
            if taken := sorted(flat.keys() & part.keys()):
                raise SummaryClash(taken)
            flat.update(part)
        return cls(**flat)

    @property
    def median(self) -> float | None:
        return self.step_seconds.median if self.step_seconds else None

    def has_flag(self, code: str) -> bool:
        return any(f.code == code for f in self.flags)

    def figure(self, path: str) -> Any:
        """A figure by its dotted path ('figures.ttft_s', 'step_seconds.median'); None where a part is absent."""
        found: Any = self
        for part in path.split("."):
            found = found.get(part) if isinstance(found, Mapping) else getattr(found, part, None)
            if found is None:
                return None
        return found


@dataclass(kw_only=True)
class RunRecord:
    """One run, whole: what was asked, where it ran, every step, and the summary."""

    id: str
    workload: str
    params: dict[str, JSON]
    status: str  # running, finished, failed, cancelled
    started_at: str
    schema: int = SCHEMA
    ended_at: str | None = None
    device: Device | None = None
    dtype: str | None = None
    per_replica_batch: int | None = None
    dataset: str | None = None
    synthetic: bool = False
    versions: dict[str, str] | None = None
    backend: str = ""  # schema-1 records have none: the store fills in the article's framework
    backend_reason: str | None = None
    note: str | None = None
    runtime: dict[str, JSON] = field(default_factory=dict)
    summary: Summary = field(default_factory=Summary)
    steps: list[Step] = field(default_factory=list)
    epochs: list[Epoch] = field(default_factory=list)
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    sweep: str | None = None  # the sweep this run is a point of
    plugins: dict[str, str] = field(default_factory=dict)  # "workload"/"backend" -> the plugin's "name version"
    model: dict[str, JSON] | None = None  # what identifies a user's model (its file, function, hash, parameters)
    telemetry: list[Sample] = field(default_factory=list)  # bounded: thinned evenly per host
    repeats: list[int] = field(default_factory=list)  # `--repeat N`: where each fresh process's steps begin in `steps`
    # (empty: one process)
    __pydantic_config__: ClassVar[dict[str, Any]] = CONFIG

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """A record from the JSON object tpulab wrote (an import checks it first: `tpulab.base.schema.problem`)."""
        return build(cls, data)

    def to_json(self) -> dict[str, Any]:
        return plain(self)

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @property
    def batch(self) -> int | None:
        """Examples in one step, over all replicas."""
        return self.per_replica_batch * self.device.replicas if self.per_replica_batch and self.device else None

    @property
    def median(self) -> float | None:
        return self.summary.median

    def device_label(self, short: bool = False) -> str:
        return self.device.label(short) if self.device else "-"

    def metric(self, key: str) -> float | None:
        """A metric's value at the end: the validation figure when there is one, else training's."""
        val = (self.summary.validation or {}).get("val_" + key)
        return val if val is not None else (self.summary.final_metrics or {}).get(key)


# --- sweeps, kept ------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class SweepPoint:
    """One configuration of a kept sweep: its values, and the ids of its runs (kept as runs)."""

    values: dict[str, JSON]
    runs: list[str]
    article: bool = False  # the article's configuration, run because the grid lacked it


@dataclass(kw_only=True)
class SweepRecord:
    """A sweep, as kept: its grid, its points' run ids, and what it found (indices into `points`)."""

    id: str
    workload: str
    started_at: str
    status: str
    axes: dict[str, list[JSON]]
    base: dict[str, JSON]
    steps: int
    points: list[SweepPoint]
    ended_at: str | None = None
    stopped: str | None = None
    repeat: int = 1
    article_values: dict[str, JSON] | None = None
    findings: dict[str, JSON] = field(default_factory=dict)
    __pydantic_config__: ClassVar[dict[str, Any]] = CONFIG

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepRecord:
        """A sweep from the JSON object tpulab wrote (an import checks it first: `tpulab.base.schema.problem`)."""
        return build(cls, data)

    def to_json(self) -> dict[str, Any]:
        return plain(self)

    @property
    def short_id(self) -> str:
        return self.id[:8]

    def run_ids(self) -> list[str]:
        return sorted({i for p in self.points for i in p.runs})
