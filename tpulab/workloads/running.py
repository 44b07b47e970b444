"""The worker's side of a workload: what a runner is handed and what it does first.

A workload's declaration (`tpulab.workloads.base.Workload`) says what a run is; inside a worker,
its runner gets the checked parameters, a `Sink` for its events and a `CancelToken`, then calls
`begin`: the replicas placed, `Started` said, the `StepTimer` made. No framework is imported
here; `begin` imports the timer (a Keras callback), so call it in a worker only. Nor is the
declaration imported at run time: `Workload.begin` delegates here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from tpulab.base.events import Started, from_dicts

if TYPE_CHECKING:
    from tpulab.backends import Placement, Runtime
    from tpulab.base.events import Event
    from tpulab.callbacks import StepTimer

Params = dict[str, Any]  # a workload's checked parameters (as `tpulab.workloads.base` names them)
Sink = Callable[["Event"], None]


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
    says `Started` and returns the `StepTimer` that writes the timed ones. `cancel`: stop after the
    current step once it is set. `runtime`: the backend's framework side, already loaded (placement,
    versions, Keras hooks). Return normally when done or cancelled; raise to fail the run (the
    message becomes its error, in one line).
    """

    def __call__(self, w: Any, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None: ...


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
          ) -> tuple[Placement, StepTimer]:
    """What every runner does first: place the replicas, say `Started`, and make the step timer.

    Every event of a run on synthetic data says so, so that no figure travels without the
    warning. `bytes_per_step`: the memory traffic of a step as the compiler counts it, when the
    runner can ask (it gives the run's arithmetic intensity).
    """
    from tpulab.callbacks import StepTimer

    placement = place(w, p, runtime)
    sink(started(w, p, placement, runtime.versions(), dataset, synthetic, bytes_per_step))
    timer = StepTimer(from_dicts(sink, synthetic), batch_size=w.batch_size(p), warmup=warmup,
                      cancel=cancel)
    return placement, timer
