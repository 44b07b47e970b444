"""What a workload is: its parameters, declared once, and the contract its runner keeps.

The CLI flags, the TUI form, validation, help, presets and the stored record are all
derived from a workload's `ParamSpec`s; nothing else lists them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from tpulab.backends import CHOICES
from tpulab.core.events import Started

if TYPE_CHECKING:
    from tpulab.backends import Placement
    from tpulab.core.events import Event
    from tpulab.runtime.detect import RuntimeReport

Params = dict[str, Any]
Sink = Callable[["Event"], None]


class ParamError(ValueError):
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
    choices: tuple[str, ...] = ()
    unit: str = ""
    term: str = ""  # glossary entry that explains it
    advanced: bool = False
    backends: tuple[str, ...] = ()  # the backends it means something to (empty: all)
    why_not: str = ""  # what the others do instead, e.g. "JAX always compiles with XLA"
    tunes: bool = True  # a knob of the configuration (a sweep sets it to the article's value to compare)

    def applies(self, backend: str) -> bool:
        return not self.backends or backend in self.backends

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
        return noun if self.kind is not str else "a path"

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
    """What the chosen hardware allows, found without importing a framework."""

    max_shards: Mapping[str, int]  # per device kind: cpu, gpu, tpu
    default_device: str = "cpu"
    default_backend: str = "tensorflow"  # what `--backend auto` resolves to here
    backends: Mapping[str, str] = field(default_factory=dict)  # ... for each --device, where it differs

    @classmethod
    def of(cls, report: RuntimeReport, hosts: int = 1) -> Limits:
        """What the detected hardware and the installed frameworks allow; `hosts` bring their own devices."""
        from tpulab.backends import BackendError, choose

        backends = {}
        for device in ("auto", "cpu", "gpu", "tpu"):
            try:
                backends[device] = choose("auto", report, device)[0]
            except BackendError:
                backends[device] = "tensorflow"  # nothing installed: a run says so, with the install command
        shards = {kind: n * hosts for kind, n in report.max_shards().items()}
        return cls(shards, report.default_device, backends["auto"], backends)

    def device_for(self, choice: str) -> str:
        return self.default_device if choice == "auto" else choice

    def backend_for(self, choice: str, device: str = "auto") -> str:
        """The backend `choice` means for a run on `device` (auto keeps TensorFlow where it drives it)."""
        return self.backends.get(device, self.default_backend) if choice == "auto" else choice


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
class Chart:
    """A live chart the lab draws for a workload; `quantity` is one of CHART_QUANTITIES."""

    quantity: str
    title: str


CHART_QUANTITIES = ("time", "gflops", "throughput", "metrics")


@dataclass(frozen=True)
class Workload:
    """A workload's declaration; `runner` names the module whose `run()` does the work."""

    name: str
    title: str
    summary: str
    params: tuple[ParamSpec, ...]
    runners: Mapping[str, str]  # backend name -> module whose `run(params, sink, cancel)` does the work
    flops_per_step: Callable[[Params], float]
    check: Callable[[Params, Limits], None]
    total_steps: Callable[[Params], int]  # every step the run executes, the first call included
    compute_dtype: Callable[[Params], str]  # the number format the math runs in, for peaks
    shorten: Callable[[Params, int], Params]  # the same configuration, timed over this many steps (sweeps)
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    unit: str = "step"  # what one timed step is called
    trains: bool = False  # a training run: loss and metrics per step, epochs with validation
    metrics: tuple[Metric, ...] = ()
    charts: tuple[Chart, ...] = ()

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
                raise ParamError("preset", f"--preset must be one of {', '.join(self.presets)} (got {name!r})")
            params.update(self.presets[name])
        return params

    def resolve(self, values: Mapping[str, Any], limits: Limits, preset: str | None = None) -> Params:
        """Defaults, then the preset, then the user's values; each checked, then the whole."""
        params = self.preset(preset)
        for name, raw in values.items():
            if raw is not None:
                params[name] = self.spec(name).parse(raw)
        self.validate(params, limits)
        return params

    def validate(self, params: Params, limits: Limits) -> None:
        """The checks across parameters: what the backend ignores, then the workload's own."""
        backend = limits.backend_for(params.get("backend", "auto"), params.get("device", "auto"))
        for spec in self.params:
            if not spec.applies(backend) and params[spec.name] != spec.default:
                raise ParamError(spec.name, f"{spec.flag} means nothing on --backend {backend}: {spec.why_not}")
        self.check(params, limits)

    def started(self, p: Params, placement: Placement, versions: dict[str, str], backend: str,
                dataset: str, synthetic: bool = False) -> Started:
        """The first event of every run of this workload, whatever the backend."""
        return Started(workload=self.name, device=placement.device(), dtype=self.compute_dtype(p),
                       flops_per_step=self.flops_per_step(p), steps_total=self.total_steps(p),
                       per_replica_batch=p["batch_size"] // p["shards"], versions=versions, backend=backend,
                       note=placement.note, dataset=dataset, synthetic=synthetic)

    def set_by_sweeps(self, steps: int) -> set[str]:
        """The parameters a sweep sets itself (through `shorten`), which its grid cannot hold."""
        defaults = self.defaults()
        return {k for k, v in self.shorten(defaults, steps).items() if v != defaults.get(k)}

    def changed(self, params: Params) -> str:
        """The values that differ from the defaults, for a log line: 'batch_size=8, shards=2'."""
        return ", ".join(f"{k}={v}" for k, v in params.items() if k in self._names and v != self.spec(k).default)

    @property
    def _names(self) -> set[str]:
        return {p.name for p in self.params}


class CancelToken:
    """Set once to ask a run to stop after its current step."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


DEVICE = ParamSpec("device", str, "auto", "where to run: auto picks TPU, then GPU, then CPU",
                   choices=("auto", "cpu", "gpu", "tpu"), tunes=False)
PROCESSES = ParamSpec("processes", int, 1, "processes joined into one run over loopback, each with its share of the "
                      "devices: the multi-host path of a TPU pod, on this machine", 1, 8, term="multi-host",
                      backends=("jax",), why_not="multi-host runs go through JAX's distributed runtime "
                      "(TensorFlow's MultiWorkerMirroredStrategy fails under Keras 3 fit): use --backend jax")
BACKEND = ParamSpec("backend", str, "auto", "framework that runs it: auto keeps TensorFlow where it can drive the "
                    "device, else Keras 3 on JAX (today's TPUs)", choices=CHOICES,
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
