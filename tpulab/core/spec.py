"""A run's spec, resolved once: the workload, its checked parameters, the backend and device chosen.

`auto` is decided here (through the backends' own preferences) and nowhere else; the runner,
the worker, the record and the store read the resolved spec. The command line, the lab, sweeps
and the Python API all come through `resolve` (from what a user typed) or `spec_of` (from
parameters already checked, such as a sweep's point).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from tpulab import backends
from tpulab.backends import BackendError, Cluster
from tpulab.workloads import get_workload
from tpulab.workloads.base import DEVICE, Limits, Params, Workload

if TYPE_CHECKING:
    from tpulab.runtime.detect import RuntimeReport


@dataclass(frozen=True)
class RunSpec:
    workload: Workload
    params: Params
    backend: str  # never "auto"
    backend_reason: str
    device: str  # the kind the worker must see: cpu, gpu or tpu
    cluster: Cluster | None = None  # this process is one of a multi-host run started elsewhere
    sweep: str | None = None  # the sweep this run is a point of

    @property
    def processes(self) -> int:
        """Processes this run starts here: those of `--processes`, or 1 when joining a run started elsewhere."""
        return 1 if self.cluster is not None else self.workload.processes(self.params)


def resolve(workload: str | Workload, values: Mapping[str, Any], report: RuntimeReport, preset: str | None = None,
            cluster: Cluster | None = None) -> RunSpec:
    """From what a user gave (text or values, None for "not given"): raises `UsageError` naming the parameter."""
    w = get_workload(workload) if isinstance(workload, str) else workload
    limits = Limits.of(report, cluster.processes if cluster else 1)
    return spec_of(w, w.resolve(values, limits, preset), report, cluster)


def spec_of(workload: str | Workload, params: Params, report: RuntimeReport, cluster: Cluster | None = None,
            sweep: str | None = None) -> RunSpec:
    """From checked parameters: the backend chosen (a `BackendError` names the install command)."""
    w = get_workload(workload) if isinstance(workload, str) else workload
    device = params.get(DEVICE.name, "auto")
    backend, why = backends.choose(params.get("backend", "auto"), report, device)
    chosen = backends.get(backend)
    if not w.runs_on(chosen):
        runs_on = ", ".join(w.backends()) or "no installed backend"
        raise BackendError(f"{w.name} does not run on --backend {backend}: it runs on {runs_on}")
    if (cluster is not None or w.processes(params) > 1) and chosen.multi_host is not None:
        raise BackendError(chosen.multi_host)
    return RunSpec(w, dict(params), backend, why, report.default_device if device == "auto" else device,
                   cluster, sweep)
