"""A run's spec, resolved once: the workload, its parameters as run, and why each `auto` became what it is.

`resolve` is the one place `auto` is decided: the backend (through the backends' own
preferences), the device, then the workload's own (`Workload.resolve_auto`: the roofline's
dtypes). The command line, the lab, the Python API and every sweep point come through it; the
runner, the worker, the record and the store read the spec it returns, and detect nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from tpulab import backends
from tpulab.backends import BackendError, Cluster
from tpulab.workloads import get_workload
from tpulab.workloads.base import BACKEND, DEVICE, SHARDS, Limits, ParamError, Params, Workload, check_shards

if TYPE_CHECKING:
    from tpulab.machine.detect import RuntimeReport

MAX_REPEAT = 100  # fresh processes a run (`--repeat`) or a sweep's point runs in


@dataclass(frozen=True)
class RunSpec:
    workload: Workload
    params: Params  # as run: no `auto` left in what the workload declares
    backend: str  # never "auto"
    backend_reason: str
    device: str  # the kind the worker must see: cpu, gpu or tpu
    cluster: Cluster | None = None  # this process is one of a multi-host run started elsewhere
    sweep: str | None = None  # the sweep this run is a point of
    why: Mapping[str, str] = field(default_factory=dict)  # the other decided values: {name: why}
    ray: str | None = None  # --processes' processes started as Ray tasks: the cluster's address ('auto')
    per_host: bool = False  # ... each process other than 0 on its own node (`--per-host`)
    repeat: int = 1  # fresh processes run one after another, kept as one run whose interval is drawn over them

    def __post_init__(self) -> None:
        if "auto" in (self.backend, self.device):  # `resolve` decides them: a spec is what runs
            raise ValueError(f"a RunSpec runs on a decided backend and device (got {self.backend}, {self.device})")

    @property
    def processes(self) -> int:
        """Processes this run starts here: those of `--processes`, or 1 when joining a run started elsewhere."""
        return 1 if self.cluster is not None else self.workload.processes(self.params)

    @property
    def reasons(self) -> dict[str, str]:
        """Why each decided value is what it is: the backend, the device, the workload's own."""
        return {BACKEND.name: self.backend_reason, **self.why}

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload.name, "params": self.params, "backend": self.backend,
                "device": self.device, "reasons": self.reasons}


def resolve(workload: str | Workload, values: Mapping[str, Any], report: RuntimeReport, preset: str | None = None,
            cluster: Cluster | None = None, sweep: str | None = None, repeat: int = 1) -> RunSpec:
    """From what a user gave (text or values, None for "not given"), or a sweep's point (checked values); `repeat`:
    the fresh processes it runs in, one after another (`--repeat`).

    Raises `ParamError` naming the parameter, or `BackendError` naming the install command.
    """
    w = get_workload(workload) if isinstance(workload, str) else workload
    if not 1 <= repeat <= MAX_REPEAT:
        raise ParamError("repeat", f"--repeat must be an integer from 1 to {MAX_REPEAT} (got {repeat})")
    params = w.parse(values, preset)
    limits = Limits.of(report, cluster.processes if cluster else 1)
    w.validate(params, limits)  # what can be said before anything is decided: a bad value first
    asked = params.get(DEVICE.name, "auto")
    backend, backend_why = w.backend_for(params, report)
    device = report.default_device if asked == "auto" else asked
    why = {DEVICE.name: f"auto takes TPU, then GPU, then CPU: {device.upper()} here" if asked == "auto"
           else f"you chose {device}"}
    params.update({name: value for name, value in ((BACKEND.name, backend), (DEVICE.name, device))
                   if name in params})
    w.validate(params, limits)  # again, on what runs: what the decided backend ignores or cannot do
    params, own = w.resolve_auto(params, device, report)
    chosen = backends.get(backend)
    if not w.runs_on(chosen):
        runs_on = ", ".join(w.backends()) or "no installed backend"
        raise BackendError(f"{w.name} does not run on --backend {backend}: it runs on {runs_on}")
    if (cluster is not None or w.processes(params) > 1) and chosen.multi_host is not None:
        raise BackendError(chosen.multi_host)
    if cluster is not None:
        w.check_processes(params, cluster.processes)
    if cluster is not None and chosen.no_shards is not None and SHARDS.name in params:
        # one device per process (its share of the global batch): the run's replicas are the processes joined
        params[SHARDS.name] = cluster.processes
        check_shards(params, Limits.of(report, cluster.processes))
    if repeat > 1 and (cluster is not None or w.processes(params) > 1):
        raise ParamError("repeat", "--repeat runs the whole run again in a fresh process, one after another: it does "
                         "not combine with --processes or a multi-host run (repeat those by running them again)")
    return RunSpec(w, params, backend, backend_why, device, cluster, sweep, {**why, **own}, repeat=repeat)
