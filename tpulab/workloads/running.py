"""The worker's side of a workload: what a runner is handed and what it does first.

A workload's declaration (`tpulab.workloads.base.Workload`) says what a run is; inside a worker,
its runner gets the checked parameters, a `Sink` for its events and a `CancelToken`, then calls
`begin`: the replicas placed, `Started` said, the step timer made (`StepTimes`, no Keras callback:
a runner that drives its own loop calls its hooks). No framework is imported here, nor is the
declaration imported at run time: `Workload.begin` delegates here.

After its timed steps, a runner calls `profile_calls` (its own loop) or enters `profiling` (a
`fit` of extra steps, as the shared Keras runner does): with `--profile`, a few more steps are
traced, never timed, and their op table is said as `Profiled`.
"""

from __future__ import annotations

import tempfile
import importlib
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol

from tpulab.base.events import Profile, Profiled, Started, Tracing, from_dicts
from tpulab.base.step_times import StepTimes

if TYPE_CHECKING:
    from tpulab.backends import Placement, Profiler, Runtime
    from tpulab.base.events import Event

Params = dict[str, Any]  # a workload's checked parameters (as `tpulab.workloads.base` names them)
Sink = Callable[["Event"], None]
Programs = Callable[["Profiler"], "list[Any] | None"]  # the compiled step, as `Profiler.read` takes it


class Planned(Protocol):
    """What the worker's side reads of a workload's declaration (`tpulab.workloads.base.Workload`
    has it), so that this module imports nothing of the declaration, for types either."""

    @property
    def name(self) -> str: ...
    def compute_dtype(self, p: Params) -> str: ...
    def flops_per_step(self, p: Params) -> float | None: ...
    def total_steps(self, p: Params) -> int: ...
    def batch_size(self, p: Params) -> int: ...
    def replicas(self, p: Params) -> int: ...


@dataclass(frozen=True)
class Handed:
    """What the worker is handed beside the parameters, never a parameter nor in the record: where a profiled
    run's trace goes (the folder the parent chose), and what only the parent knows (`Workload.worker_knows`)."""
    trace_folder: str | None = None
    knows: Mapping[str, Any] = field(default_factory=dict)


_handed = Handed()  # a worker runs one run: its job's own part, set before its runner is called


def hand(given: Handed) -> None:
    global _handed
    _handed = given


def handed() -> Handed:
    """This worker's run's own part (empty outside a worker)."""
    return _handed


class CancelToken:
    """Set once to ask a run to stop after its current step."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


class Runner(Protocol):
    """The function that runs a workload inside a worker, on one backend.

    `w`: the workload's declaration (its hooks). `p`: the checked parameters. `sink`: takes every
    event, first a `Started`, then `Compiled`, `Step`, `Epoch`, `Log` as they happen: `begin(...)`
    says `Started` and returns the step timer that writes the timed ones. `cancel`: stop after the
    current step once it is set. `runtime`: the backend's framework side, already loaded (placement,
    versions, Keras hooks). Return normally when done or cancelled; raise to fail the run (the
    message becomes its error, in one line).
    """

    def __call__(self, w: Any, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None: ...


@dataclass(frozen=True)
class RunnerAt:
    """A workload's runner on one backend, declared as data: where it lives (`module:function`, imported in the
    worker only, when called) and what it can do. It serves wherever a function that imports a runner does (a
    plugin's `runners` may hold either)."""

    path: str  # "tpulab.workloads.decode.jax:run"
    shards: bool = False  # it splits one run's work over several devices (a mesh); the others use one
    modes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # a mode of the workload it runs on some
    # devices only: {mode: those devices} (a mode not named runs on every device)
    takes: tuple[str, ...] = ()  # parameters of the workload that only the runners naming them take (decode's
    # --weight-format): a parameter's `backends` can be read from here, naming none
    checks: str = ""  # `module:function(params)` raising ParamError for what only this runner cannot run, imported
    # where the run is resolved: framework-free (what a GGUF file can hold)
    one_process: str = ""  # why it runs in one process only, where its backend runs several (a run over several is
    # refused, naming --processes); "" where it runs over several as its backend does

    def check(self, p: Params) -> None:
        """Its own refusals, before a worker starts (none where it declares no `checks`)."""
        if self.checks:
            module, _, name = self.checks.partition(":")
            getattr(importlib.import_module(module), name)(p)

    def __call__(self) -> Runner:
        module, _, name = self.path.partition(":")
        found: Runner = getattr(importlib.import_module(module), name)
        return found


def place(w: Planned, p: Params, runtime: Runtime) -> Placement:
    """The run's replicas on the device it asked for (`device`, shared by every workload): before
    any other framework op."""
    return runtime.place(p.get("device", "auto"), w.replicas(p))


def started(w: Planned, p: Params, placement: Placement, versions: dict[str, str], dataset: str,
            synthetic: bool = False, bytes_per_step: float | None = None) -> Started:
    """The first event of every run of `w`, whatever the backend (the worker adds its name)."""
    return Started(workload=w.name, device=placement.device(), dtype=w.compute_dtype(p),
                   flops_per_step=w.flops_per_step(p), steps_total=w.total_steps(p),
                   per_replica_batch=w.batch_size(p) // w.replicas(p), versions=versions,
                   note=placement.note, dataset=dataset, synthetic=synthetic,
                   bytes_per_step=bytes_per_step)


def begin(w: Planned, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime, dataset: str,
          synthetic: bool = False, warmup: int = 0, bytes_per_step: float | None = None
          ) -> tuple[Placement, StepTimes]:
    """What every runner does first: place the replicas, say `Started`, and make the step timer.

    Every event of a run on synthetic data says so, so that no figure travels without the
    warning. `bytes_per_step`: the memory traffic of a step as the compiler counts it, when the
    runner can ask (it gives the run's arithmetic intensity). The timer's steps are the run's one
    phase (""), though it is driven through the hooks Keras names for `predict`.
    """
    placement = place(w, p, runtime)
    sink(started(w, p, placement, runtime.versions(), dataset, synthetic, bytes_per_step))
    timer = StepTimes(from_dicts(sink, synthetic), batch_size=w.batch_size(p), warmup=warmup,
                      cancel=cancel, predict_phase="")
    return placement, timer


def profiled(p: Params, cancel: CancelToken) -> bool:
    """Whether the run asked for a profile (`--profile`, shared by every workload) and was not stopped."""
    return bool(p.get("profile")) and not cancel.is_set()


@contextmanager
def profiling(p: Params, sink: Sink, runtime: Runtime, programs: Programs | None = None,
              steps_per_call: int = 1) -> Iterator[Profiler]:
    """Trace what runs inside into the run's trace folder, then read it and say `Profiled`.

    Inside, run the extra steps, each in `profiler.step(n)` (0, 1, ...), each returning only once its
    work is done: the annotation is the step the shares are fractions of. Emit no `Step` for them:
    the timing statistics never include a profiled step. `programs`: what gives `Profiler.read` the
    compiled step (a JAX `Compiled`...), asked of the profiler after the trace, from which ops'
    FLOPs and bytes are known. `steps_per_call`: the steps one annotated call runs (Keras's
    steps_per_execution): the figures are said per step. Enter it only when `profiled(p, cancel)`.
    """
    profiler = runtime.profiler()  # (a backend without one was refused --profile when the run was resolved)
    folder = Path(handed().trace_folder or tempfile.mkdtemp(prefix="tpulab-trace-"))
    folder.mkdir(parents=True, exist_ok=True)
    sink(Tracing(steps=int(p["profile_steps"])))
    with profiler.trace(folder):
        yield profiler
    profile = per_step(profiler.read(folder, programs(profiler) if programs else None), steps_per_call)
    profile.trace_path, profile.profiler = str(folder), profile.profiler or profiler.name
    sink(Profiled(profile=profile))


def profile_calls(p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime, step: Callable[[], Any],
                  programs: Programs | None = None) -> None:
    """A runner's own loop, after its timed steps: with `--profile`, `profile_steps` more calls of `step`
    traced, each in a step annotation, none timed; their op table said as `Profiled`. Where the profiler can
    pause (`Profiler.untraced`), each traced call is followed by one untraced, so that the profile says what
    the profiler itself added to the step.

    `step` runs one step and returns once its work is done (a value fetched to the host, as the timed
    steps do). A runner with a loop of its own (conv, the roofline, decode) calls this once its last
    timed step is done: `profile_calls(p, sink, cancel, runtime, step, lambda profiler: [compiled])`,
    `compiled` being the step's `jitted.lower(...).compile()` (or None: the ops' FLOPs are unknown).
    """
    if not profiled(p, cancel):
        return
    with profiling(p, sink, runtime, programs) as profiler:
        for n in range(int(p["profile_steps"])):
            with profiler.step(n):
                step()
            paused = profiler.untraced()
            if paused is not None:  # the same step again, untraced: what the profiler itself adds to a step
                with paused:
                    step()


def per_step(profile: Profile, steps_per_call: int) -> Profile:
    """A profile whose annotated calls each ran `steps_per_call` steps, said per step (shares are kept)."""
    if steps_per_call == 1:
        return profile
    k = float(steps_per_call)

    def each(x: float | None) -> float | None:
        return None if x is None else x / k

    return replace(profile, steps=profile.steps * steps_per_call, step_seconds=each(profile.step_seconds),
                   host_gap=each(profile.host_gap),
                   ops=[replace(o, calls=o.calls / k, seconds=o.seconds / k, flops=each(o.flops),
                                bytes=each(o.bytes)) for o in profile.ops])
