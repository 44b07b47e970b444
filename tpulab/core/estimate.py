"""How long a planned run will take, from the runs kept so far, and on what basis.

Shared by the lab's form, the headless path and sweeps. A small run says little about a large
one (small work leaves a device idle), so only kept runs whose work per step is within
`SIMILAR_WORK` of the plan are trusted; otherwise an assumed fraction of the device's peak is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpulab.core import fmt
from tpulab.core.events import RunRecord
from tpulab.runtime.detect import RuntimeReport
from tpulab.runtime.peaks import device_peak
from tpulab.workloads.base import Limits, Params, Workload

ASSUMED_PEAK_FRACTION = 0.25
SIMILAR_WORK = 4.0  # a kept run counts if its work per step is within this factor of the plan's
STARTUP_S = 8.0  # a worker's start and its framework's import


@dataclass(frozen=True)
class Estimate:
    seconds: float | None
    basis: str
    kind: str = "none"  # run (a kept run of this configuration), device (its best rate), peak (assumed), none

    def __str__(self) -> str:
        return f"~{fmt.duration(self.seconds)} ({self.basis})" if self.seconds is not None else "unknown"


def _work_ratio(r: RunRecord, flops: float) -> float:
    """How far a kept run's work per step is from the plan's, as a factor >= 1."""
    theirs = r.summary.flops_per_step or 0
    return max(theirs, flops) / min(theirs, flops) if theirs > 0 and flops > 0 else math.inf


def estimate(workload: Workload, p: Params, limits: Limits, report: RuntimeReport,
             records: list[RunRecord]) -> Estimate:
    device = limits.device_for(p.get("device", "auto"))
    backend = limits.backend_for(p.get("backend", "auto"), p.get("device", "auto"))
    flops = workload.flops_per_step(p) or 0.0
    steps = workload.total_steps(p)
    dtype = workload.compute_dtype(p)
    kept = [r for r in records if r.status == "finished" and r.summary.gflops_per_s and r.device
            and r.device.kind == device and _work_ratio(r, flops) <= SIMILAR_WORK]
    same = [r for r in kept if r.workload == workload.name and r.backend == backend and r.dtype == dtype
            and workload.configuration(r.params) == workload.configuration(p)]
    startup = STARTUP_S
    if same:
        best = min(same, key=lambda r: _work_ratio(r, flops))  # records come newest first: ties go to the newest
        rate = (best.summary.gflops_per_s or 0) * 1e9
        startup += best.summary.compile_seconds or 0
        basis = (f"at the {rate / 1e9:.1f} GFLOP/s of run {best.short_id}, this configuration "
                 f"at {_work_ratio(best, flops):.1f}x the work per step")
        kind = "run"
    elif kept:
        best = max(kept, key=lambda r: r.summary.gflops_per_s or 0)
        rate = (best.summary.gflops_per_s or 0) * 1e9
        basis = f"at this device's best sustained {rate / 1e9:.1f} GFLOP/s (run {best.short_id})"
        kind = "device"
    else:
        name = {"gpu": report.gpus[0].name if report.gpus else "",
                "tpu": (report.tpu.generation or "") if report.tpu else ""}.get(device, "")
        peak = device_peak(device, name, dtype, workload.replicas(p), report.cpu)
        if peak is None:
            return Estimate(None, "no kept run of similar work and no known peak for this device")
        kind = "peak"
        rate = peak.flops * ASSUMED_PEAK_FRACTION
        basis = f"assuming {ASSUMED_PEAK_FRACTION:.0%} of peak: no kept run of similar work on this device"
    return Estimate(startup + steps * flops / rate, basis, kind)
