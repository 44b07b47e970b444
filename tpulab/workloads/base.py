"""What a workload is: the contract every workload keeps, and the parameters they share.

A workload is a `Workload` subclass instance registered under the `tpulab.workloads` entry point.
Its `ParamSpec`s drive the CLI flags, the lab's form, validation, help, presets and the stored
record; nothing else lists them again. Its hooks (documented below) tell the core how much work a
step is, how many steps a run takes, how to check a combination, and which function runs it on a
backend. Declarations import no framework: the runner is imported only inside a worker, where
`tpulab.workloads.running` hands it what it needs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from tpulab.backends import choices, choose, registry
from tpulab.base.errors import UsageError, did_you_mean
from tpulab.base.events import PHASE_BANDWIDTH, PHASE_PREDICT, Started, Step
from tpulab.base.figures import Figure, FigureValue
from tpulab.base.figures import rows as figure_rows
from tpulab.base.timing import Flag
from tpulab.workloads import running
from tpulab.workloads.running import CancelToken, Runner, RunnerAt, Sink  # the worker's side, importable here as before

if TYPE_CHECKING:
    from tpulab.backends import Backend, Placement, Runtime
    from tpulab.base.capacity import Capacity
    from tpulab.base.ceilings import MeasuredCeilings as Ceilings
    from tpulab.base.charts import Chart
    from tpulab.base.step_times import StepTimes
    from tpulab.machine.detect import RuntimeReport
    from tpulab.base.ceilings import Sourced

Params = dict[str, Any]


class ParamError(UsageError):
    """A bad value: the message is one line that names the parameter and what is allowed."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ParamSpec:
    """One hyperparameter: its type, default, bounds and the words that explain it."""

    name: str
    kind: type  # int, float, str, bool
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    options: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()  # the allowed values, or where to find them
    unit: str = ""
    term: str = ""  # glossary entry that explains it
    advanced: bool = False
    backends: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()  # those it means something to (empty: all)
    why_not: str | Callable[[str], str] = ""  # what the others do instead (or, given a backend's name, its words)
    tunes: bool = True  # a knob of the configuration (a sweep sets it to the article's value to compare)
    form: str = ""  # a text value's form in words ("a shape like 32,32,3"); a path when empty
    axis: bool = True  # a sweep may vary it; else every point of a sweep takes the one value given

    @property
    def choices(self) -> tuple[str, ...]:
        return self.options() if callable(self.options) else self.options

    @property
    def only(self) -> tuple[str, ...]:
        """The backends it means something to (empty: all)."""
        return self.backends() if callable(self.backends) else self.backends

    def applies(self, backend: str) -> bool:
        return not self.only or backend in self.only

    def why(self, backend: str) -> str:
        """Why it means nothing on `backend`, and what to use instead."""
        return self.why_not(backend) if callable(self.why_not) else self.why_not

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def allowed(self, maximum: float | None = None) -> str:
        """The allowed values in words, e.g. 'an integer from 1 to 4096'."""
        hi = self.max if maximum is None else maximum
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "on or off"
        noun = "an integer" if self.kind is int else "a number"
        if self.min is not None and hi is not None:
            return f"{noun} from {_fmt(self.min)} to {_fmt(hi)}"
        if self.min is not None:
            return f"{noun} of at least {_fmt(self.min)}"
        return noun if self.kind is not str else self.form or "a path"

    def parse(self, raw: Any, maximum: float | None = None) -> Any:
        """Turn a typed value or the text a user entered into a checked value."""
        hi = self.max if maximum is None else maximum
        text = str(raw).strip()
        bad = ParamError(self.name, f"{self.flag} must be {self.allowed(maximum)} (got {text!r})")
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            words = {"on": True, "true": True, "yes": True, "1": True,
                     "off": False, "false": False, "no": False, "0": False}
            if text.lower() not in words:
                raise bad
            return words[text.lower()]
        if self.choices:
            if text not in self.choices:
                raise bad
            return text
        if self.kind is str:
            return text
        try:
            value = self.kind(text) if self.kind is float else int(text, 10)
        except ValueError:
            raise bad from None
        if value != value or (self.min is not None and value < self.min) or (hi is not None and value > hi):
            raise bad
        return value

    def show(self, value: Any) -> str:
        if self.kind is bool:
            return "on" if value else "off"
        return _fmt(value) if isinstance(value, float) else str(value)


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Limits:
    """What the machine allows, found without importing a framework: the devices and how many of each.

    Which backend runs is not a limit: `tpulab.engine.spec.resolve` decides it, with the device.
    """

    max_shards: Mapping[str, int]  # per device kind: cpu, gpu, tpu
    default_device: str = "cpu"

    @classmethod
    def of(cls, report: RuntimeReport, hosts: int = 1) -> Limits:
        """What the detected hardware allows; `hosts` bring their own devices."""
        shards = {kind: n * hosts for kind, n in report.max_shards().items()}
        return cls(shards, report.default_device)

    def device_for(self, choice: str) -> str:
        return self.default_device if choice == "auto" else choice


@dataclass(frozen=True)
class Metric:
    """A figure a workload reports besides time: the framework's key, and a word for people."""

    key: str  # as the framework names it in its logs (validation adds "val_")
    label: str  # short, for people: "accuracy"
    higher_is_better: bool
    unit: str = ""
    headline: bool = False  # the one a comparison shows

    def show(self, value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"


@dataclass(frozen=True)
class SummaryPart:
    """A workload's own part of its run's summary, for a run whose step is not one thing (a roofline
    times many kernels): which step the timing and rates are of, and the figures only it can give."""

    seconds: list[float] | None = None  # the steady times the step statistics are of (None: every steady step)
    flops_per_step: float | None = None  # with `seconds`: the work of one of those steps
    flops_per_s: float | None = None  # with `seconds`: its rate
    fields: Mapping[str, Any] = field(default_factory=dict)  # Summary fields only it fills (a roofline's kernels)
    flags: tuple[Flag, ...] = ()
    examples_per_s: float | None = None  # its own rate, where a step's is not it (decode: tokens/s at the mean step)
    figures: Mapping[str, FigureValue] = field(default_factory=dict)  # its own figures (`Workload.figures`), by name


# --- the parameters every workload takes: the `Workload` base appends them to each declaration -------
def _profiling() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if b.no_profiler is None)


def _no_profiler(backend: str) -> str:
    found = registry().get(backend)
    return (found.no_profiler or "") if found else "no profiler is known for it"


PROFILE = ParamSpec("profile", bool, False, "after the timed steps, trace a few more and show where the time goes, "
                    "op by op (the traced steps are never timed)", term="profile", tunes=False, axis=False,
                    backends=_profiling, why_not=_no_profiler)
PROFILE_STEPS = ParamSpec("profile_steps", int, 3, "steps traced with --profile, after the timed ones", 1, 100,
                          unit="steps", term="profile", advanced=True, tunes=False, axis=False)


def _compiling() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if b.compiles)


def _compiles_otherwise(backend: str) -> str:
    found = registry().get(backend)
    if found is None:
        return "no compiler is known for it"
    return f"{found.title} always compiles with XLA" if found.xla_always else f"{found.title} compiles its steps with --xla"


COMPILE = ParamSpec("compile", str, "off", "eager steps (off), compiled ones (on: torch.compile), or both, each "
                    "timed, the compile time apart, and compared", options=("off", "on", "both"), tunes=False,
                    backends=_compiling, why_not=_compiles_otherwise)
SHARED = (PROFILE, PROFILE_STEPS, COMPILE)
PHASE_EAGER = "eager"  # with --compile both, the eager steps, timed before the compiled ones (the run's own)
PHASE_COMPILED = "compiled"  # with --compile both, the compiled pass's first call, set beside the eager one's


def variants(mode: str) -> tuple[bool, ...]:
    """The runs `--compile` asks for, in order: False eager, True compiled (both: eager first)."""
    return {"off": (False,), "on": (True,), "both": (False, True)}[mode]


class Workload(ABC):
    """A workload's declaration: its parameters and presets, what it reports, and its hooks.

    Subclasses set the class attributes and implement `flops_per_step`, `total_steps` and
    `runner`; the other hooks have defaults that fit most workloads. The core calls the hooks
    with checked parameters (`Params`: every declared parameter, by name).
    """

    name: str
    title: str
    summary: str
    params: tuple[ParamSpec, ...]
    presets: Mapping[str, Mapping[str, Any]] = {}
    unit: str = "step"  # what one timed step is called
    trains: bool = False  # a training run: loss and metrics per step, epochs with validation
    metrics: tuple[Metric, ...] = ()
    charts: tuple[Chart, ...] = ()  # the live charts the lab draws (see tpulab.base.charts)
    how: tuple[str, ...] = ()  # parameters that choose how the work is done (see `configuration`)
    sizes: tuple[str, ...] = ()  # parameters that set how big one step's work is, beside the batch (`size_words`)
    runners: Mapping[str, Callable[[], Runner]] = {}  # backend name -> a function that imports its runner
    throughput_unit: str = "examples/s"  # what its throughput counts: "images/s", "tokens/s"
    headlines: tuple[str, ...] = ("throughput",)  # the summary's figures it leads with, by dotted path, first first
    figures: tuple[Figure, ...] = ()  # its own figures (`summary_part` gives them): every front end shows them
    phases: tuple[str, ...] = ()  # its steps' own phases, each a program of its own: their first calls are named
    latency: str | None = None  # its figure of one step's latency (lower is better), where its steps are a user's
    # wait (a token's): its sweep sets throughput against it, a curve, and `--max-itl` bounds it
    capacity: Capacity | None = None  # what its sweep over a load finds: the highest load within an SLO, and the knee
    model_flops: bool = False  # `flops_per_step` are the model's FLOPs by the standard formula: shown as MFU
    flop_rates: bool = True  # its FLOP/s and their shares of peak and ceiling say how well it runs (a step bound by
    # memory, a decode's, says it by its bandwidth instead: comparisons leave them out)
    synthetic_data: str = "random inputs and targets"  # its stand-in data in words (a run on it says so)
    quiet: bool = False  # its figures become ceilings: it stops once other processes' load would make them none
    shared: tuple[ParamSpec, ...] = SHARED  # what it takes besides its own parameters: appended to them

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """The parameters every workload shares (`SHARED`: --profile...) join each declaration once,
        after its own, so that no workload lists them again and a plugin's gets them too."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("params")
        if own is not None:
            cls.params = (*own, *(s for s in cls.shared if s not in own))

    # --- hooks ---------------------------------------------------------------------------------
    @abstractmethod
    def flops_per_step(self, p: Params) -> float | None:
        """Floating-point operations in one timed step, or None when unknown (no fraction of peak is shown)."""

    @abstractmethod
    def total_steps(self, p: Params) -> int:
        """Every step the run executes, the first call included: progress and ETA count them."""

    def runner(self, backend: Backend) -> Callable[[], Runner] | None:
        """The one answer to which function runs this workload on `backend`: what imports it (call it in
        the worker only), or None where it does not run there.

        The workload's own `runners` first, else what the backend brings for it (a plugin backend
        may run tpulab's workloads).
        """
        return self.runners.get(backend.name) or backend.runner_for(self)

    def runs_on(self, backend: Backend) -> bool:
        return self.runner(backend) is not None

    def compute_dtype(self, p: Params) -> str:
        """The number format the math runs in: the device's peak is looked up for it."""
        return "float32"

    def dtype_words(self, p: Mapping[str, Any], dtype: str) -> str:
        """The number formats a kept run's summary names, from its parameters and its compute `dtype`: that dtype,
        unless some of the run's numbers are in another (decode's weights quantized: 'q4_0 weights, float32 cache')."""
        return dtype

    def batch_size(self, p: Params) -> int:
        """Examples in one timed step, over all replicas: throughput is this over the step's time."""
        return int(p[BATCH_SIZE])

    def items_per_example(self, p: Params) -> int:
        """What one example holds of `throughput_unit` (tokens in a sequence; 1 for an image)."""
        return 1

    def replicas(self, p: Params) -> int:
        """Devices the run spreads over (the shards)."""
        return int(p.get(SHARDS.name, 1))

    def processes(self, p: Params) -> int:
        """Processes joined into one run (multi-host)."""
        return int(p.get(PROCESSES.name, 1))

    def configuration(self, p: Params) -> dict[str, Any]:
        """What decides how the work is done, not how much: kept runs with the same values are the same
        configuration to an estimate (the backend, device and compute dtype are compared besides)."""
        return {name: p.get(name) for name in (SHARDS.name, PROCESSES.name, *self.how)}

    def check(self, p: Params, limits: Limits) -> None:
        """Checks across parameters, after each was parsed: raise `ParamError` naming the parameter."""
        check_shards(p, limits)

    def shorten(self, p: Params, steps: int) -> Params:
        """The same configuration timed over `steps` steps (a sweep's point)."""
        return p

    def seconds_left(self, p: Params, steps: list[Step]) -> float | None:
        """How long the rest of the run will take, from its steps so far, where its steps are not alike (a
        roofline's grow with their size). None: the steps left at the recent step's time."""
        return None

    def work_words(self, p: Params, per_replica_batch: int) -> str:
        """What one run's work is, in the run's header: 'global batch 256 = 128 per replica'."""
        return f"global batch {self.batch_size(p)} = {per_replica_batch} per replica"

    def size_words(self, p: Mapping[str, Any]) -> str:
        """How big the problem is, from the `sizes` declared: 'image size 32 px, filters 16' ('' for none). A rate
        far below the peak on a tiny problem is the problem's, not the machine's: the summary says which it was."""
        shown = [(self.spec(name), p[name]) for name in self.sizes if p.get(name) is not None]
        return ", ".join(f"{spec.name.replace('_', ' ')} {spec.show(value)}" + (f" {spec.unit}" if spec.unit else "")
                         for spec, value in shown)

    def timed_seconds(self, steps: Iterable[Step], phase: str = "") -> list[float]:
        """The steady step times of training (or of `phase`: PHASE_PREDICT for inference), one per step, in order:
        what the median, its interval and a comparison's verdict are computed from."""
        inference = phase == PHASE_PREDICT
        return [s.seconds for s in steps if not s.warmup and s.phase != PHASE_BANDWIDTH
                and self.is_inference(s.phase) == inference for _ in range(s.steps)]

    def timed_repeats(self, steps: list[Step], starts: list[int], phase: str = "") -> list[list[float]]:
        """`timed_seconds` of each fresh process of a run (`--repeat`) in turn; `starts`: where each one's steps
        begin in `steps` (empty: the run ran one)."""
        bounds = [*(starts or [0]), len(steps)]
        return [self.timed_seconds(steps[a:b], phase) for a, b in zip(bounds, bounds[1:])]

    def is_inference(self, phase: str) -> bool:
        """Whether steps of `phase` are an inference phase, kept apart from training's figures: a training
        workload's `predict` after `fit`. (A workload that does not train may time its steps with `predict`.)"""
        return self.trains and phase == PHASE_PREDICT

    def synthetic_warning(self) -> str:
        """'random tokens: the loss means nothing': what every figure of a run on stand-in data travels with."""
        labels = [m.label for m in self.metrics]
        if not labels:
            return f"{self.synthetic_data}: only the speed means something"
        return f"{self.synthetic_data}: the {' and '.join(labels)} {'means' if len(labels) == 1 else 'mean'} nothing"

    def describe_data(self, p: Params) -> str:
        """What the inputs are and where they live, in words, for the run's record."""
        return ""

    def model_info(self, p: Params) -> dict[str, Any] | None:
        """What identifies the model when the parameters do not (a user's file): kept in the record."""
        return None

    def summary_part(self, steps: list[Step], started: Started, ceilings: Ceilings, p: Params,
                     peak: Sourced | None) -> SummaryPart | None:
        """This workload's own part of its summary (None: a step is one thing, timed as it comes); `peak`: the
        run's device's, as the record computed it once."""
        return None

    def figure_rows(self, values: Mapping[str, FigureValue]) -> list[tuple[str, str]]:
        """(label, value) rows of its own figures in a run's summary: as declared, unless it has words to add."""
        return figure_rows(self.figures, values)

    def step_cells(self, step: Step, steps: list[Step]) -> list[tuple[str, str]] | None:
        """Its own words for a step of its own phase, as (text, style) cells; [] to say nothing of it; None for
        the step line every run prints (`steps`: the run's so far, this one last; read, never copied whole)."""
        return None

    def worker_knows(self, p: Params, ceilings: Ceilings) -> dict[str, Any]:
        """What only the parent knows (the kept ceilings) that this workload's runner reads in the worker
        (`running.handed().knows`): never a parameter, never in the record."""
        return {}

    def sweep_baseline(self, point: Params, axes: Mapping[str, Any]) -> Params | None:
        """The values a sweep point's speedup is measured against (None: the article's configuration)."""
        return None

    # --- derived -------------------------------------------------------------------------------
    def backends(self) -> list[str]:
        """The registered backends this workload runs on."""
        return [name for name, b in registry().items() if self.runs_on(b)]

    def metric(self, key: str) -> Metric | None:
        return next((m for m in self.metrics if m.key == key), None)

    @property
    def headline(self) -> Metric | None:
        return next((m for m in self.metrics if m.headline), None)

    def label(self, key: str) -> str:
        """A metric key as people read it: 'val_sparse_categorical_accuracy' -> 'validation accuracy'."""
        base = key.removeprefix("val_")
        m = self.metric(base)
        word = m.label if m else base.replace("_", " ")
        return f"validation {word}" if key.startswith("val_") else word

    def spec(self, name: str) -> ParamSpec:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def defaults(self) -> Params:
        return {p.name: p.default for p in self.params}

    def preset(self, name: str | None) -> Params:
        """The defaults, then the named preset's values."""
        params = self.defaults()
        if name is not None:
            if name not in self.presets:
                raise ParamError("preset", f"--preset must be one of {', '.join(self.presets)} (got {name!r})"
                                 + did_you_mean(name, self.presets))
            params.update(self.presets[name])
        return params

    def parse(self, values: Mapping[str, Any], preset: str | None = None) -> Params:
        """Defaults, then the preset, then the user's values, each checked on its own.

        Processes given without shards take one device each. A value the workload set itself that
        is no parameter (`shorten`'s, for a sweep's point) is kept as it is.
        """
        params = self.preset(preset)
        for name, raw in values.items():
            if raw is not None:
                params[name] = self.spec(name).parse(raw) if name in self._names else raw
        if values.get(SHARDS.name) is None and PROCESSES.name in params and SHARDS.name in params:
            params[SHARDS.name] = max(params[SHARDS.name], params[PROCESSES.name])
        return params

    def resolve(self, values: Mapping[str, Any], limits: Limits, preset: str | None = None) -> Params:
        """`parse`, then the checks across parameters: what a form shows before a run is resolved
        (`tpulab.engine.spec.resolve` decides every `auto` and checks again)."""
        params = self.parse(values, preset)
        self.validate(params, limits)
        return params

    def validate(self, params: Params, limits: Limits) -> None:
        """The checks across parameters: what the backend ignores, then the workload's own."""
        backend = params.get(BACKEND.name, "auto")
        processes = params.get(PROCESSES.name, 1)
        for spec in self.params:  # (with no backend resolved yet, the run's spec says what is missing)
            if backend != "auto" and not spec.applies(backend) and params[spec.name] != self.default_of(spec, params):
                raise ParamError(spec.name, f"{spec.flag} means nothing on --backend {backend}: {spec.why(backend)}")
        if processes > 1:
            self.check_processes(params, processes)
        self.check(params, limits)

    def check_processes(self, params: Params, processes: int) -> None:
        """What a run over `processes` processes cannot do on its backend (`Backend.one_process`) or with this
        workload's runner there (`RunnerAt.one_process`): a `ParamError` naming the parameter. Asked of
        `--processes`, and of a run joined elsewhere (torchrun's, --coordinator) once it is resolved."""
        backend = params.get(BACKEND.name, "auto")
        chosen = registry().get(backend)
        if chosen is None:
            return
        for name, why in chosen.one_process.items():
            if name in self._names and params.get(name, self.spec(name).default) != self.spec(name).default:
                raise ParamError(name, f"{self.spec(name).flag} {self.spec(name).show(params[name])} with "
                                 f"--processes {processes} on --backend {backend}: {why}")
        runner = self.runners.get(backend)
        if isinstance(runner, RunnerAt) and runner.one_process:
            raise ParamError(PROCESSES.name, f"--processes {processes} on --backend {backend}: {runner.one_process}")

    def default_of(self, spec: ParamSpec, params: Params) -> Any:
        """A parameter's value when none is given: its default, but --shards's is --processes (one device each)."""
        return max(spec.default, params.get(PROCESSES.name, 1)) if spec.name == SHARDS.name else spec.default

    def backend_hint(self, p: Params) -> tuple[str, str] | None:
        """The backend these parameters call for when --backend is auto, and why (a user's nn.Module: torch);
        None: `auto` decides by the backends' own preferences."""
        return None

    def backend_for(self, p: Params, report: RuntimeReport) -> tuple[str, str]:
        """The backend that runs these parameters here, and why (`tpulab.engine.spec.resolve` decides by it; a
        form greys by it): `auto` takes the workload's hint first, where that backend is installed."""
        asked, device = p.get(BACKEND.name, "auto"), p.get(DEVICE.name, "auto")
        hint = self.backend_hint(p) if asked == "auto" else None
        if hint is not None:
            return choose(hint[0], report, device)[0], hint[1]
        return choose(asked, report, device)

    def resolve_auto(self, p: Params, device: str, report: RuntimeReport) -> tuple[Params, dict[str, str]]:
        """The workload's own `auto` values decided for `device` (cpu, gpu, tpu), with the reason for each:
        (the parameters as run, {name: why}). The backend and the device are decided before."""
        return p, {}

    def begin(self, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime, dataset: str,
              **options: Any) -> tuple[Placement, StepTimes]:
        """`tpulab.workloads.running.begin` for this workload (what runners called before it moved)."""
        return running.begin(self, p, sink, cancel, runtime, dataset, **options)

    def set_by_sweeps(self, steps: int) -> set[str]:
        """The declared parameters a sweep sets itself (through `shorten`), which its grid cannot hold (`shorten`
        may set a shared key that this workload does not declare, as validation for one that never validates)."""
        defaults = self.defaults()
        return {k for k, v in self.shorten(defaults, steps).items() if k in self._names and v != defaults.get(k)}

    def changed(self, params: Params) -> str:
        """The values that differ from the defaults, for a log line: 'batch_size=8, shards=2'."""
        return ", ".join(f"{k}={v}" for k, v in params.items() if k in self._names and v != self.spec(k).default)

    @property
    def _names(self) -> set[str]:
        return {p.name for p in self.params}


def _backend_choices() -> tuple[str, ...]:
    return choices()


# --- the parameters workloads share: declared once, reused by each ---------------------------------
BATCH_SIZE = "batch_size"


def batch_size(default: int, maximum: int, unit: str = "examples", what: str = "examples per step") -> ParamSpec:
    """The global batch: the work of one step, split evenly over the shards."""
    return ParamSpec(BATCH_SIZE, int, default, f"{what}, split evenly across the shards (global batch)", 1, maximum,
                     unit=unit, term="batch")


def _sharding() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if b.no_shards is None)


def _no_shards(backend: str) -> str:
    found = registry().get(backend)
    return (found.no_shards if found else None) or f"use --backend {' or '.join(_sharding())}"


SHARDS = ParamSpec("shards", int, 1, "replicas the batch is split over (1 = no sharding)", 1, 64, term="shard",
                   backends=_sharding, why_not=_no_shards)
PRECISION = ParamSpec("precision", str, "float32", "float32, or mixed: bfloat16/float16 compute with float32 weights",
                      options=("float32", "mixed_bfloat16", "mixed_float16"), term="precision")
COMPUTE_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
DEVICE = ParamSpec("device", str, "auto", "where to run: auto picks TPU, then GPU, then CPU",
                   options=("auto", "cpu", "gpu", "tpu"), tunes=False)
def _multi_host() -> tuple[str, ...]:
    return tuple(name for name, b in registry().items() if b.multi_host is None)


def _no_multi_host(backend: str) -> str:
    found = registry().get(backend)
    return (found.multi_host if found else None) or f"use --backend {' or '.join(_multi_host())}"


PROCESSES = ParamSpec("processes", int, 1, "processes joined into one run over loopback, each with its share of the "
                      "devices: the multi-host path of a TPU pod, on this machine", 1, 8, term="multi-host",
                      backends=_multi_host, why_not=_no_multi_host)
BACKEND = ParamSpec("backend", str, "auto", "framework that runs it: auto keeps TensorFlow where it can drive the "
                    "device, else Keras 3 on JAX (today's TPUs), else PyTorch", options=_backend_choices,
                    term="backend")


def check_shards(params: Params, limits: Limits, device_param: str = "device") -> None:
    """Shards must fit the device and divide the global batch evenly."""
    device = limits.device_for(params[device_param])
    maximum = limits.max_shards.get(device, 0)
    if maximum < 1:
        raise ParamError(device_param, f"--{device_param} {device}: no {device.upper()} was found on this machine (see `tpulab doctor`)")
    shards = params["shards"]
    processes = params.get("processes", 1)
    if processes > 1 and device != "cpu":
        raise ParamError("processes", f"--processes starts local processes sharing this machine's CPU (got --device "
                         f"{device}); on a TPU pod slice, run the same command on every host instead")
    if shards % processes:
        raise ParamError("shards", f"--shards must be a multiple of --processes {processes}: each process takes an "
                         f"equal share of the devices (got {shards})")
    if shards > maximum:
        why = {"cpu": "the stated bound for logical CPU devices", "gpu": "the number of GPUs",
               "tpu": "the number of TPU cores"}[device]
        raise ParamError("shards", f"--shards must be an integer from 1 to {maximum} on {device.upper()} ({why}) (got {shards})")
    if params["batch_size"] % shards:
        raise ParamError("batch_size", f"--batch-size must be divisible by --shards {shards} (got {params['batch_size']})")
