"""How long a planned run will take, from the runs kept so far, and on what basis.

Shared by the lab's form, the headless path and sweeps. A small run says little about a large
one (small work leaves a device idle), so only kept runs whose work per step is within
`SIMILAR_WORK` of the plan are trusted; otherwise an assumed fraction of the device's peak is used.
The kept runs come as indexed rows: `wanted` says what to look for, `Store.candidates` finds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpulab.base import fmt
from tpulab.engine.runindex import RunRow, Wanted, configuration_key
from tpulab.machine.detect import RuntimeReport
from tpulab.machine.peaks import device_peak
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


def _work_ratio(r: RunRow, flops: float) -> float:
    """How far a kept run's work per step is from the plan's, as a factor >= 1."""
    theirs = r.flops_per_step or 0
    return max(theirs, flops) / min(theirs, flops) if theirs > 0 and flops > 0 else math.inf


def wanted(workload: Workload, p: Params, limits: Limits) -> Wanted:
    """What the estimate of this plan learns from: kept runs on its device, of similar work.

    `p` as resolved (`tpulab.engine.spec.resolve`): an `auto` backend matches no kept run."""
    return Wanted(workload.name, limits.device_for(p.get("device", "auto")), p.get("backend", "auto"),
                  workload.compute_dtype(p),
                  configuration_key(workload.configuration(p)), workload.flops_per_step(p) or 0.0, SIMILAR_WORK)


def estimate(workload: Workload, p: Params, limits: Limits, report: RuntimeReport,
             rows: list[RunRow]) -> Estimate:
    """From kept runs' rows, newest first (any superset of `Store.candidates(wanted(...))` gives the same)."""
    w = wanted(workload, p, limits)
    device, backend, flops, dtype = w.device, w.backend, w.flops, workload.compute_dtype(p)
    steps = workload.total_steps(p)
    kept = [r for r in rows if r.status == "finished" and r.gflops_per_s and r.device_kind == device
            and _work_ratio(r, flops) <= SIMILAR_WORK]
    same = [r for r in kept if r.workload == workload.name and r.backend == backend and r.dtype == dtype
            and r.configuration == w.configuration]
    startup = STARTUP_S
    if same:
        best = min(same, key=lambda r: _work_ratio(r, flops))  # rows come newest first: ties go to the newest
        rate = (best.gflops_per_s or 0) * 1e9
        startup += best.compile_s or 0
        basis = (f"at the {rate / 1e9:.1f} GFLOP/s of run {best.short_id}, this configuration "
                 f"at {_work_ratio(best, flops):.1f}x the work per step")
        kind = "run"
    elif kept:
        best = max(kept, key=lambda r: r.gflops_per_s or 0)
        rate = (best.gflops_per_s or 0) * 1e9
        basis = f"at this device's best sustained {rate / 1e9:.1f} GFLOP/s (run {best.short_id})"
        kind = "device"
    else:
        name = {"gpu": report.gpus[0].name if report.gpus else "",
                "tpu": (report.tpu.generation or "") if report.tpu else ""}.get(device, "")
        peak = device_peak(device, name, dtype, workload.replicas(p), report.cpu)
        if peak is None:
            return Estimate(None, "no kept run of similar work and no known peak for this device")
        kind = "peak"
        rate = peak.value * ASSUMED_PEAK_FRACTION
        basis = f"assuming {ASSUMED_PEAK_FRACTION:.0%} of peak: no kept run of similar work on this device"
    return Estimate(startup + steps * flops / rate, basis, kind)
