"""The roofline: what this device can actually do, measured, so runs are judged against it.

A spec peak is a guess on a VM (the reported clock times a boost allowance) and an upper bound
everywhere: well-tuned matmuls reach 80-90% of it. The roofline times the two ceilings a run
meets: a matrix product over a doubling range of sizes in each dtype the device has (FLOP/s),
and a copy of an array much larger than the last-level cache (bytes read and written per
second). Its best figures become the device's measured ceilings once they are ceilings: the
matmul's curve flat at its largest sizes, the copy at least 4x the cache (`tpulab.engine.ceilings`);
the smoke preset's sizes are too small for either, and its summary says which to run.

How each kernel is timed: `tpulab.workloads.shared.kernels`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpulab.base.charts import GFLOPS, Chart, ChartContext, Point, step_time
from tpulab.base.events import Event, Started, Step
from tpulab.workloads.base import BACKEND, DEVICE, Limits, ParamError, Params, ParamSpec, SummaryPart, Workload
from tpulab.workloads.shared.kernels import (
    COPY_DTYPE,
    DTYPE_CHOICES,
    best,
    dtypes_of,
    kernel_figures,
    kernel_samples,
    kernel_work,
    plan,
    seconds_left,
    sizes_of,
)
from tpulab.workloads.running import RunnerAt

if TYPE_CHECKING:
    from tpulab.base.ceilings import MeasuredCeilings
    from tpulab.machine.detect import RuntimeReport
    from tpulab.base.ceilings import Sourced

PARAMS = (
    ParamSpec("min_size", int, 256, "smallest matrix side n of the n x n matmul", 1, 65536, term="roofline"),
    ParamSpec("max_size", int, 4096, "largest matrix side: sizes double from --min-size up to it", 1, 65536,
              term="roofline"),
    ParamSpec("dtypes", str, "auto", "matmul number formats, joined by +, or auto: those the device has fast "
              "units for (the first is the headline)", options=DTYPE_CHOICES, term="precision"),
    ParamSpec("copy_mib", int, 256, "array the memory kernel reads and writes, in MiB (at least 4x the last-level cache)",
              1, 65536, unit="MiB", term="roofline"),
    ParamSpec("iterations", int, 5, "timed calls per kernel and size in each round", 1, 100000),
    ParamSpec("warmup", int, 1, "calls per kernel after its first, left out of the statistics", 0, 1000,
              term="warm-up"),
    ParamSpec("rounds", int, 3, "times every kernel is timed over; each keeps its best round (other work "
              "slows one round, not the figure)", 1, 100, term="roofline"),
    DEVICE,
    BACKEND,
    ParamSpec("seed", int, 0, "seed of the random matrices", 0, 2**31 - 1, advanced=True, tunes=False),
)


def matmul_gflops(e: Event, ctx: ChartContext) -> list[Point]:
    """Each matmul call's GFLOP/s, a series per dtype (the copy has no FLOPs worth drawing)."""
    k = e.kernel if isinstance(e, Step) else None
    if not isinstance(e, Step) or k is None or k["kind"] != "matmul" or e.seconds <= 0:
        return []
    return [(k["dtype"] + (" warm-up" if e.warmup else ""), e.step, k["flops"] / e.seconds / 1e9)]


MATMUL_GFLOPS = Chart("GFLOP/s of each matmul", matmul_gflops, GFLOPS.lines)


class Roofline(Workload):
    name = "roofline"
    title = "Roofline: measured ceilings"
    summary = ("The device's two ceilings, measured: matmul FLOP/s over doubling sizes in each dtype, and the "
               "bytes per second of a large copy. Every later run is shown against them.")
    params = PARAMS
    presets = {
        "smoke": {"min_size": 16, "max_size": 64, "copy_mib": 4, "iterations": 3, "warmup": 1, "rounds": 2},
        "default": {},
        "large": {"min_size": 1024, "max_size": 16384, "copy_mib": 1024},
    }
    unit = "call"
    charts = (step_time("call"), MATMUL_GFLOPS)
    headlines = ("gflops_per_s", "gbytes_per_s")  # the best matmul's, in the headline dtype, and the best copy's
    runners = {"tensorflow": RunnerAt("tpulab.workloads.roofline.tf:run"), "jax": RunnerAt("tpulab.workloads.roofline.jax:run"),
               "torch": RunnerAt("tpulab.workloads.roofline.torch:run")}
    quiet = True

    def flops_per_step(self, p: Params) -> float | None:
        return None  # each kernel says its own (the steps carry it)

    def total_steps(self, p: Params) -> int:
        return len(plan(p))

    def seconds_left(self, p: Params, steps: list[Step]) -> float | None:
        return seconds_left(p, steps)

    def work_words(self, p: Params, per_replica_batch: int) -> str:
        sizes = sizes_of(p)
        return (f"matmul n={sizes[0]}..{sizes[-1]}, a {p['copy_mib']} MiB copy, {p['rounds']} round(s) of "
                f"{p['iterations']} timed call(s) each")

    def compute_dtype(self, p: Params) -> str:
        return dtypes_of(p)[0]

    def batch_size(self, p: Params) -> int:
        return 0  # no examples: figures are FLOP/s and bytes/s

    def replicas(self, p: Params) -> int:
        return 1

    def shorten(self, p: Params, steps: int) -> Params:
        return {**p, "iterations": steps}

    def resolve_auto(self, p: Params, device: str, report: RuntimeReport) -> tuple[Params, dict[str, str]]:
        """auto dtypes become the device's, so the worker runs them and the record says which were measured."""
        if p["dtypes"] != "auto":
            return p, {}
        dtypes = "+".join(dtypes_of(p, device))
        return {**p, "dtypes": dtypes}, {"dtypes": f"auto: those {device.upper()} has fast units for ({dtypes})"}

    def check(self, p: Params, limits: Limits) -> None:
        device = limits.device_for(p["device"])
        if limits.max_shards.get(device, 0) < 1:
            raise ParamError("device", f"--device {device}: no {device.upper()} was found on this machine "
                             "(see `tpulab doctor`)")
        if p["min_size"] > p["max_size"]:
            raise ParamError("max_size", f"--max-size must be at least --min-size {p['min_size']} "
                             f"(got {p['max_size']})")

    def describe_data(self, p: Params) -> str:
        sizes = sizes_of(p)
        return (f"random {p['dtypes']} matrices n={sizes[0]}..{sizes[-1]} (seed {p['seed']}) and a "
                f"{p['copy_mib']} MiB {COPY_DTYPE} array, held on the device")

    def summary_part(self, steps: list[Step], started: Started, ceilings: MeasuredCeilings,
                     p: Params, peak: Sourced | None) -> SummaryPart:
        """Each kernel's figures; the run's step is a call of the best matmul in the headline dtype, and
        its bytes/s is the best copy's (flagged when it beats the measured bandwidth)."""
        kernels = kernel_figures(steps)
        top = best(kernels, "matmul", started.dtype)
        copy = best(kernels, "copy")
        rate = copy.bytes_per_s if copy else None
        flags = tuple(ceilings.over_bandwidth(started.device, rate))
        fields = {"kernels": kernels, "gbytes_per_s": rate / 1e9 if rate else None}
        if top is None:
            return SummaryPart(fields=fields, flags=flags)
        return SummaryPart(kernel_samples(steps, top), kernel_work(top)[0], top.flops_per_s, fields, flags)


ROOFLINE = Roofline()
