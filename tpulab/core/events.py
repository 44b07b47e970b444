"""The vocabulary every part of a run speaks: typed events, and the record they build.

A worker writes events as JSON lines; the recorder, the headless printer, the lab and the store
read them back as these classes. Each class knows its JSON form, so the `--json` stream and the
stored records keep one schema (`SCHEMA`), and display code asks typed objects, not nested dicts.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from tpulab.core.timing import Flag, Stats

SCHEMA = 3  # 2: backend, backend_reason, sweep and hosts joined the record; 3: plugins and model
STATUSES = ("finished", "failed", "cancelled")

T = TypeVar("T")


def _known(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build a dataclass from a mapping, ignoring keys it does not know (older or newer writers)."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


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
    model: dict[str, Any] | None = None  # what the worker learnt of the model it built (its parameter count)

    def __post_init__(self) -> None:
        if isinstance(self.device, Mapping):
            self.device = _known(Device, self.device)


@dataclass(kw_only=True)
class Compiled(Event):
    name: ClassVar[str] = "compiled"
    seconds: float  # the first execution: trace, compile and its steps
    steps: int = 1
    phase: str = ""


@dataclass(kw_only=True)
class Step(Event):
    name: ClassVar[str] = "step"
    step: int  # index of the last step covered
    seconds: float  # per step
    steps: int = 1  # steps this measurement covered
    warmup: bool = False
    examples_per_s: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    value: float | None = None  # the checksum that was fetched (conv)
    phase: str = ""  # "train", "predict" (the inference phase); "" for a workload with one phase
    host_seconds: list[float] | None = None  # per host, when several processes share the step


@dataclass(kw_only=True)
class Epoch(Event):
    name: ClassVar[str] = "epoch"
    epoch: int
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)


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


EVENTS: dict[str, type[Event]] = {c.name: c for c in (Started, Compiled, Step, Epoch, Log, Finished, Cancelled, Failed)}


def event_from_json(data: Mapping[str, Any]) -> Event:
    """An event from its JSON object; anything unknown becomes a log line rather than an error."""
    cls = EVENTS.get(str(data.get("event")))
    if cls is None:
        return Log(text=json.dumps(dict(data)), t=data.get("t"))
    return _known(cls, data)


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
class Summary:
    """The figures a run is judged by, derived once by the recorder."""

    compile_seconds: float | None = None
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
    final_metrics: dict[str, float] | None = None
    validation: dict[str, float] | None = None
    flags: list[Flag] = field(default_factory=list)
    host_seconds: list[float] | None = None  # median step time per host (multi-host runs)

    def __post_init__(self) -> None:
        if isinstance(self.step_seconds, Mapping):
            self.step_seconds = _known(Stats, self.step_seconds)
        if isinstance(self.inference_step_seconds, Mapping):
            self.inference_step_seconds = _known(Stats, self.inference_step_seconds)
        self.flags = [f if isinstance(f, Flag) else _known(Flag, f) for f in self.flags]

    @property
    def median(self) -> float | None:
        return self.step_seconds.median if self.step_seconds else None

    def has_flag(self, code: str) -> bool:
        return any(f.code == code for f in self.flags)


@dataclass(kw_only=True)
class RunRecord:
    """One run, whole: what was asked, where it ran, every step, and the summary."""

    id: str
    workload: str
    params: dict[str, Any]
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
    runtime: dict[str, Any] = field(default_factory=dict)
    summary: Summary = field(default_factory=Summary)
    steps: list[Step] = field(default_factory=list)
    epochs: list[Epoch] = field(default_factory=list)
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    sweep: str | None = None  # the sweep this run is a point of
    plugins: dict[str, str] = field(default_factory=dict)  # "workload"/"backend" -> the plugin's "name version"
    model: dict[str, Any] | None = None  # what identifies a user's model (its file, function, hash, parameters)

    def __post_init__(self) -> None:
        if isinstance(self.device, Mapping):
            self.device = _known(Device, self.device)
        if isinstance(self.summary, Mapping):
            self.summary = _known(Summary, self.summary)
        if not (self.device is None or isinstance(self.device, Device)) or not isinstance(self.summary, Summary):
            raise TypeError("'device' and 'summary' must be objects")
        self.steps = [s if isinstance(s, Step) else _known(Step, s) for s in self.steps]
        self.epochs = [e if isinstance(e, Epoch) else _known(Epoch, e) for e in self.epochs]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        return _known(cls, data)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

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
