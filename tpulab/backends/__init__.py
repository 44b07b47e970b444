"""The framework boundary: the contract a backend keeps, and the registry that finds them.

A backend is one module (`tensorflow.py`, `jax.py` beside this one, or a plugin's) holding a
`Backend` object registered under the `tpulab.backends` entry point. Its framework-free part
(install hint, the environment its worker sets before the import, how much `auto` prefers it,
its doctor verdicts) is asked in any process; `runtime()` imports the framework and is called
only inside a worker, where it places shards, joins other hosts and probes the machine.
What only a framework knows (whether this process holds the TPU, what a dead worker's stderr
means, which packages drive a TPU) is its backend's word: nothing outside `backends/` and the
per-backend workload files keys on a backend's name, but a workload's `runners` declaration
(tests/test_plugins.py checks it).
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from tpulab.base import plugins
from tpulab.base.declared import Declared
from tpulab.base.errors import TpulabError, UsageError
from tpulab.base.events import Device
from tpulab.base.figures import FigureValue
from tpulab.base.hidden import UNUSED_BY_RUNS, hidden

if TYPE_CHECKING:
    from pathlib import Path

    from tpulab.base.events import Profile
    from tpulab.machine.detect import RuntimeReport
    from tpulab.machine.verdict import Verdict


# tpulab's own backends, as pyproject.toml registers them (found here too when its metadata is stale).
BUILTIN = {
    "tensorflow": "tpulab.backends.tensorflow:BACKEND",
    "jax": "tpulab.backends.jax:BACKEND",
    "torch": "tpulab.backends.torch:BACKEND",
    "llamacpp": "tpulab.backends.llamacpp:BACKEND",
    "server": "tpulab.backends.server:BACKEND",
}


class BackendError(UsageError):
    """A backend cannot run here; the message names the command that fixes it."""


class DeviceError(TpulabError):
    """The requested device cannot be used; the message says why and what to do."""


@dataclass
class Placement:
    """Where a run's replicas live, as a backend set them up; workloads use only these fields."""

    kind: str  # cpu, gpu, tpu
    name: str  # what peaks are looked up by: CPU model, GPU name, TPU generation
    replicas: int
    strategy: str  # how the replicas are driven, in the framework's words
    devices: list[Any]  # one framework device (or device name) per replica
    handle: Any = None  # the framework's distribution object: a tf.distribute.Strategy, a jax Mesh
    note: str | None = None  # e.g. why auto fell back to the CPU
    master: str | None = None  # a TPU session target (TensorFlow's batch_parallel)
    hosts: int = 1
    machines: int = 1
    scope: Callable[[], AbstractContextManager[Any]] = field(default=nullcontext)

    def device(self) -> Device:
        return Device(kind=self.kind, name=self.name, replicas=self.replicas, strategy=self.strategy,
                      hosts=self.hosts, machines=self.machines)


JOIN_TIMEOUT_S = 60  # every process must have joined a multi-host run by then
HEARTBEAT_TIMEOUT_S = 30  # a process silent this long fails the run (JAX's coordination service)
LAUNCHER_ENV = "env://"  # a cluster's coordinator when its launcher's environment says the rest (torchrun's)
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # what torchrun gives each process it starts


@dataclass(frozen=True)
class Cluster:
    """Several processes as one run: JAX's distributed runtime joins them, process 0 keeps the record.

    `coordinator` is HOST:PORT, or "auto" on a TPU pod slice, where JAX finds its peers by itself.
    `local`: every process on this machine (`--processes N`), so the CPU's peak is counted once.
    """

    coordinator: str
    processes: int
    process_id: int
    local: bool = False
    join_timeout_s: int = JOIN_TIMEOUT_S  # every process must have joined by then

    ENV = ("TPULAB_COORDINATOR", "TPULAB_NUM_PROCESSES", "TPULAB_PROCESS_ID", "TPULAB_LOCAL_PROCESSES",
           "TPULAB_JOIN_TIMEOUT_S")

    def env(self) -> dict[str, str]:
        return dict(zip(self.ENV, (self.coordinator, str(self.processes), str(self.process_id),
                                   "1" if self.local else "", str(self.join_timeout_s))))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Cluster | None:
        """The cluster a worker was started into, or None for a run on one process."""
        if not environ.get("TPULAB_COORDINATOR"):
            return None
        return cls(environ["TPULAB_COORDINATOR"], int(environ.get("TPULAB_NUM_PROCESSES") or 0),
                   int(environ.get("TPULAB_PROCESS_ID") or 0), bool(environ.get("TPULAB_LOCAL_PROCESSES")),
                   int(environ.get("TPULAB_JOIN_TIMEOUT_S") or JOIN_TIMEOUT_S))

    @classmethod
    def torchrun(cls, environ: Mapping[str, str]) -> Cluster | None:
        """A process torchrun started (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_WORLD_SIZE), of a run over
        several: torch.distributed joins it from that environment (`LAUNCHER_ENV`); None outside torchrun, or for one
        process. Local when every process is on this machine."""
        if not all(environ.get(k) for k in TORCHRUN_ENV) or int(environ["WORLD_SIZE"] or 1) < 2:
            return None
        world = int(environ["WORLD_SIZE"])
        return cls(LAUNCHER_ENV, world, int(environ["RANK"]), local=int(environ.get("LOCAL_WORLD_SIZE") or 0) == world)

    @classmethod
    def tpu_pod(cls, environ: Mapping[str, str]) -> Cluster | None:
        """A TPU pod slice's worker (several hosts in TPU_WORKER_HOSTNAMES): JAX discovers the rest."""
        hosts = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
        if len(hosts) < 2:
            return None
        return cls("auto", len(hosts), int(environ.get("TPU_WORKER_ID") or 0))


class Runtime(ABC):
    """A backend's framework side, inside a worker (`Backend.runtime()` returns one); the machine it runs
    on is the `RuntimeReport` (`tpulab.machine.detect`).

    `place` and `versions` each backend defines; every other member has the answer of a framework
    that runs in one process, compiles only when asked, and has no compilation cache, allocator
    figures or compiler cost analysis to give.
    """

    @abstractmethod
    def place(self, device: str, shards: int) -> Placement:
        """`shards` replicas on `device` (auto, cpu, gpu, tpu); before any other framework op."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """The framework's and Keras's versions, kept in the record."""

    def join(self, cluster: Cluster) -> None:
        """Join the other processes of a multi-host run; before anything else touches a device."""
        raise DeviceError("this backend runs in one process: it cannot join others")

    def leave(self) -> None:  # noqa: B027 - one process: nothing joined, nothing to leave
        """Leave it together, after the last step (every process gets here after the same step)."""

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every process's `values`, in process order (a collective: every process calls it)."""
        return [values]

    def keras_parallel(self, model: Any, placement: Placement) -> None:  # noqa: B027 - nothing to do by default
        """After a Keras model is compiled: what makes `fit` train it across the joined processes where
        `keras_scope` did not (Keras has no distribution on PyTorch: DistributedDataParallel does it there)."""

    def parallel_figures(self, batch: int = 0, step: Callable[[int], Callable[[], Any]] | None = None
                         ) -> dict[str, FigureValue]:
        """A run over several processes, after its timed steps (a collective: every process calls it, and only
        process 0's answer is said): the figures of its processes (`tpulab.base.figures.PARALLEL`): the threads
        each ran, the all-reduce bandwidth between them, and, with `step` (a function making one training step
        on N examples) and the global `batch`, that step timed in one process alone, against which the run's
        step gives its scaling efficiency. {} on one process, or where the backend measures none."""
        return {}

    def probe(self) -> dict[str, Any]:
        """The framework's view of the machine: {"tpu_cores", "gpus": [{"name"}], versions...}."""
        return dict(self.versions())

    def keras_scope(self, placement: Placement) -> AbstractContextManager[Any]:
        """Where a Keras model is built and compiled so that `fit` runs over the placement's replicas."""
        return placement.scope()

    def keras_inputs(self, x: Any, y: Any, batch: int, seed: int, train: bool, pipeline: str, shards: int) -> Any:
        """What `fit` reads: `x`, `y` (numpy) in global batches of `batch` over `shards` replicas, shuffled
        and repeated when `train`.

        `pipeline` is the workload's choice ("tf.data", "generator"); a backend without that pipeline
        uses this numpy one. Sharded batches split evenly over the replicas: validation takes the
        largest batch that does (and divides the examples, where one does, so every example is kept).
        """
        from tpulab.backends.keras_inputs import Batches, count, random_slices, validation_batch  # Keras

        if train:
            if pipeline == "generator":
                return random_slices(x, y, batch, seed)
            return Batches(x, y, batch, seed, shuffle=True)
        batch = validation_batch(count(x), batch, shards)
        return Batches(x, y, batch, seed, shuffle=False, steps=max(1, count(x) // batch))

    def keras_jit(self, requested: bool) -> bool | str:
        """`jit_compile` for `Model.compile`: the backend's answer to the workload's `--xla` setting."""
        return requested

    def keras_step_cost(self, model: Any, x: Any, y: Any) -> tuple[float | None, float | None]:
        """(FLOPs, bytes accessed) of one Keras training step on the batch `x`, `y`, as the compiler
        counts them before it runs; None for what it does not count."""
        return None, None

    def cache_hit(self) -> bool | None:
        """Whether every program compiled so far came from the persistent compilation cache (None: no cache)."""
        return None

    def profiler(self) -> Profiler:
        """What takes and reads a trace of a few steps here (`--profile`), where the backend profiles: its
        `Backend.no_profiler` is None. (A run asking elsewhere is refused when it is resolved, never here.)"""
        raise DeviceError("this backend brings no profiler")

    def memory_stats(self) -> list[dict[str, Any]] | None:
        """This process's allocator figures per local device (bytes_in_use, bytes_limit...), where the
        framework is the only one that can read them (a TPU's HBM); None where it has none to give."""
        return None


class Profiler(ABC):
    """A framework's profiler, inside a worker: it traces a few steps and reads back where their time went.

    A runner traces its extra steps inside `trace(folder)`, each inside `step(n)`, then calls `read`:
    the op table is read here, in the worker, with no TensorBoard and no server.
    """

    name: str  # what takes the trace, in the record: "jax.profiler"

    @abstractmethod
    def trace(self, folder: Path) -> AbstractContextManager[None]:
        """Trace what runs inside into `folder` (only one trace at a time per process)."""

    @abstractmethod
    def step(self, number: int) -> AbstractContextManager[None]:
        """Mark one traced step (inside `trace`, around work that is finished when it exits): the op table is
        the median step's, its shares fractions of it."""

    @abstractmethod
    def read(self, folder: Path, programs: list[Any] | None = None) -> Profile:
        """The op table of the steps traced into `folder` (its `trace_path`). `programs`: what the runner can
        give of the compiled step (a JAX `Compiled` or its optimized HLO text, a TensorFlow concrete function
        or graph), from which ops' FLOPs and bytes are known; without them `Profile.no_flops` says so."""

    def keras_programs(self, model: Any, x: Any, y: Any) -> list[Any]:
        """`read`'s programs for a Keras model's training step on the batch `x`, `y`, as `fit` compiled it;
        [] where the backend cannot give them."""
        return []

    def untraced(self) -> AbstractContextManager[None] | None:
        """Inside `trace`, where the profiler can pause: a context whose work runs untraced, timed, so that `read`
        sets a traced step against the same step without the profiler (its own overhead); None where it cannot
        (a JAX or TensorFlow trace runs until it stops)."""
        return None


@dataclass(frozen=True)
class Fitness:
    """Whether a backend can drive a device here, and why; `auto` takes the most preferred that can."""

    usable: bool
    why: str
    preference: int = 0


class Backend:
    """A framework tpulab runs workloads on: its framework-free declaration.

    Subclasses set the attributes and override `fitness`, `verdicts` and `runtime`. Every method
    but `runtime` is called in processes that must never import the framework (the lab, the CLI).
    """

    name: str
    title: str
    short: str  # for narrow tables
    distributions: tuple[str, ...]  # any one installed means the framework is there
    install: str  # the command that installs it
    excludes: tuple[str, ...] = ()  # frameworks its worker must never load (they would compete for a TPU)
    keras: bool = False  # Keras 3 runs on it: every Keras workload runs here through the shared runner
    keras_step_arguments: tuple[str, ...] = ("data",)  # what Keras passes a model's own train_step here
    article: bool = False  # the article's framework: what sweeps compare against, and what schema-1 records ran on
    chosen_by_auto: bool = True  # False: it runs where asked for by name alone (a few workloads), so `auto` never
    # takes it, and no "install one" hint offers it
    framework: bool = True  # False: no framework runs the work (the client of a server tpulab did not start): what
    # lists the frameworks (`tpulab detect`, its probes, a card's `all`) leaves it out
    reference: str | None = None  # an engine people serve with, not a framework: what its line adds beside a
    # framework's on a machine card (which runs it once, on the entries that declare its variants); `all` leaves it out
    multi_host: str | None = None  # None: runs over several processes; else why not, and what to use instead
    one_process: Mapping[str, str] = {}  # parameters that keep their default in a run over several processes here:
    # {name: why} (DDP's steps run eager on PyTorch: --compile), refused naming the parameter
    no_shards: str | None = None  # None: splits a batch over several replicas (--shards); else why not, and instead
    tpu_install: str | None = None  # how to make it drive a TPU, where it can
    tpu_packages: tuple[str, ...] = ()  # with a TPU here, any one installed means it may drive it
    packages: tuple[str, ...] = ()  # the others its verdicts read (CUDA libraries...): detection reads them
    no_flops: str = "no compiler cost analysis on this backend"  # why a step's FLOPs can be unknown here
    xla_always: bool = False  # it compiles every step with XLA: a workload's --xla means nothing here
    fuser: str | None = None  # the compiler that fuses its ops ('XLA', 'torch.compile'): what a verdict may advise
    compiles: bool = False  # --compile off|on|both chooses eager or compiled steps here (torch.compile), not --xla
    first_call: str = "trace + compile"  # what a program's first call does besides its work, reported apart from the
    # steady state: the words of its line and of the summary's row ("first call (trace+compile)")
    no_profiler: str | None = "it brings no profiler to trace a step with"  # why --profile means nothing here; None:
    # its runtime brings a `Profiler` (`Runtime.profiler`), and --profile runs here

    def installed(self, packages: Mapping[str, str | None]) -> bool:
        return any(packages.get(d) for d in self.distributions)

    def version(self, packages: Mapping[str, str | None]) -> str | None:
        return next((v for d in self.distributions if (v := packages.get(d))), None)

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        """What the worker's environment must hold before the framework is imported."""
        return {"KERAS_BACKEND": self.name} if self.keras else {}

    def fitness(self, report: RuntimeReport, device: str) -> Fitness:
        """Whether it drives `device` (cpu, gpu, tpu) here, and how much `auto` prefers it."""
        return Fitness(self.installed(report.packages), f"{self.title} is installed")

    def verdicts(self, report: RuntimeReport, others: list[Backend]) -> list[Verdict]:
        """The doctor's findings about this framework on the devices found; `others` may drive them instead."""
        return []

    def runner_for(self, workload: Declared) -> Callable[[], Callable[..., None]] | None:
        """What imports its own runner for a workload declared elsewhere, or None; nothing imported yet.

        Asked only by `Workload.runner`, after the workload's own `runners`."""
        return None

    def holds_device(self) -> bool:
        """Whether this process has initialised the framework on a TPU, which only one process may
        open; read from what is already imported, importing nothing."""
        return False

    def death(self, stderr: str, processes: int) -> str | None:
        """Why a worker of a run over `processes` processes died, read in its framework's words from
        its `stderr` ("could not join the others in time"), or None where they say nothing known."""
        return None

    def runtime(self) -> Runtime:
        """The framework side (imports the framework: call it in a worker only, before anything else)."""
        raise NotImplementedError

    def load(self) -> Runtime:
        """`runtime()`, after making the frameworks it excludes unimportable in this process.

        An attempt to import one then raises ImportError, which Keras and others take as "not installed".
        """
        for name in self.excludes:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
        with hidden(*UNUSED_BY_RUNS):
            runtime = self.runtime()
        if not isinstance(runtime, Runtime):
            raise BackendError(f"backend {self.name}: runtime() returned {type(runtime).__name__}, not a "
                               "tpulab.backends.Runtime: subclass it (define place and versions)")
        return runtime


def keras_version() -> str:
    """Keras's version, for the record, read from its metadata: a run that builds no Keras model never
    imports it (a second on JAX, four on PyTorch)."""
    from importlib import metadata

    return metadata.version("keras")


def registry() -> dict[str, Backend]:
    """Every backend that loaded, tpulab's own first, by name."""
    return {name: obj for name, (obj, _) in plugins.discover(plugins.BACKENDS)[0].items()}


def get(name: str) -> Backend:
    found = registry()
    if name not in found:
        raise BackendError(f"--backend must be one of {', '.join(choices())} (got {name!r})")
    return found[name]


def choices() -> tuple[str, ...]:
    return ("auto", *registry())


def article() -> Backend | None:
    """The article's framework, where one is registered."""
    return next((b for b in registry().values() if b.article), None)


def install_one(ranked: list[Backend]) -> tuple[str, str]:
    """The command that installs the first of `ranked`, and the others' in words: " (or pip install ...)"."""
    first, *rest = [b.install.split("  #")[0] for b in ranked]
    return first, f" (or {', or '.join(rest)})" if rest else ""


def choose(requested: str, report: RuntimeReport, device: str = "auto") -> tuple[str, str]:
    """The backend a run uses, and why: `auto` takes the most preferred installed backend that drives the device
    (of those it may choose: `Backend.chosen_by_auto`)."""
    backends = {name: b for name, b in registry().items() if b.chosen_by_auto}
    if requested != "auto":
        b = get(requested)
        if not b.installed(report.packages):
            raise BackendError(f"--backend {requested}: {b.title} is not installed; install it with: {b.install}")
        return requested, f"you chose {requested}"
    kind = device if device != "auto" else "tpu" if report.tpu is not None else report.default_device
    ranked = sorted(backends.values(), key=lambda b: -b.fitness(report, kind).preference)
    passed: list[str] = []
    for b in ranked:
        fit = b.fitness(report, kind)
        if fit.usable and b.installed(report.packages):
            return b.name, "; ".join([*passed, fit.why])
        passed.append(fit.why)
    if not any(b.installed(report.packages) for b in ranked):
        first, alternatives = install_one(ranked)
        raise BackendError(f"neither {' nor '.join(b.title for b in ranked)} is installed; "
                           f"install one with: {first}{alternatives}")
    fix = next((b.tpu_install for b in ranked if kind == "tpu" and b.tpu_install), None)
    raise BackendError("; ".join(passed) + (f"; install it with: {fix}" if fix else ""))
