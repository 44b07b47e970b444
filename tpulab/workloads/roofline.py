"""The roofline: what this device can actually do, measured, so runs are judged against it.

A spec peak is a guess on a VM (the reported clock times a boost allowance) and an upper bound
everywhere: well-tuned matmuls reach 80-90% of it. The roofline times the two ceilings a run
meets: a matrix product over a doubling range of sizes in each dtype the device has (FLOP/s),
and a copy of an array much larger than the last-level cache (bytes read and written per
second). Its best figures become the device's measured ceilings (see `tpulab.core.ceilings`).

Each kernel is timed on its own: its first call (trace and compile) is reported apart, then
`warmup` calls left out, then `iterations` timed calls, each waiting for a value that depends on
the kernel's output. Every step carries its kernel (kind, dtype, size, FLOPs and bytes per call),
so the record keeps the figures of every size.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from tpulab.core.charts import GFLOPS, step_time
from tpulab.core.events import Compiled, Step
from tpulab.workloads.base import (BACKEND, DEVICE, CancelToken, Limits, ParamError, Params, ParamSpec, Runner, Sink,
                                   Workload)

if TYPE_CHECKING:
    from tpulab.backends import Placement, Runtime

DTYPES = ("float32", "bfloat16", "float16")
# "auto": the dtypes each kind of device has fast units for (a CPU's bfloat16 is mostly converted float32)
DEVICE_DTYPES = {"cpu": ("float32",), "gpu": ("float32", "bfloat16", "float16"), "tpu": ("bfloat16", "float32")}
COPY_DTYPE = "float32"
MIB = 1 << 20

PARAMS = (
    ParamSpec("min_size", int, 256, "smallest matrix side n of the n x n matmul", 1, 65536, term="roofline"),
    ParamSpec("max_size", int, 2048, "largest matrix side: sizes double from --min-size up to it", 1, 65536,
              term="roofline"),
    ParamSpec("dtypes", str, "auto", "matmul number formats, comma-separated (float32,bfloat16,float16), or auto: "
              "those the device has", term="precision"),
    ParamSpec("copy_mib", int, 256, "array the memory kernel scales, in MiB (at least 4x the last-level cache)",
              1, 65536, unit="MiB", term="roofline"),
    ParamSpec("iterations", int, 10, "timed calls per kernel and size", 1, 100000),
    ParamSpec("warmup", int, 2, "calls per kernel after its first, left out of the statistics", 0, 1000,
              term="warm-up"),
    DEVICE,
    BACKEND,
    ParamSpec("seed", int, 0, "seed of the random matrices", 0, 2**31 - 1, advanced=True, tunes=False),
)


@dataclass(frozen=True)
class Kernel:
    """One timed kernel: a matmul of side `size`, or a copy of `size` MiB; its work per call."""

    kind: str  # matmul, copy
    dtype: str
    size: int

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def flops(self) -> float:
        """2 n^3 for a matmul (a multiply and an add per term); one multiply per element for the copy's scale."""
        return 2.0 * self.size**3 if self.kind == "matmul" else self.size * MIB / self.itemsize

    @property
    def bytes(self) -> float:
        """The least traffic: both operands read and the product written once; the copy read and written."""
        return 3.0 * self.size**2 * self.itemsize if self.kind == "matmul" else 2.0 * self.size * MIB

    def elements(self) -> int:
        return self.size * MIB // self.itemsize

    def label(self) -> str:
        return f"matmul {self.dtype} n={self.size}" if self.kind == "matmul" else f"copy {self.size} MiB"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "flops": self.flops, "bytes": self.bytes}


def dtypes_of(p: Params, device: str = "cpu") -> tuple[str, ...]:
    """The matmul dtypes: as given, or the device's for auto (unresolved auto: the CPU's)."""
    if p["dtypes"] == "auto":
        return DEVICE_DTYPES.get(device, ("float32",))
    return tuple(d.strip() for d in str(p["dtypes"]).split(",") if d.strip())


def sizes_of(p: Params) -> list[int]:
    sizes, n = [], int(p["min_size"])
    while n <= p["max_size"]:
        sizes.append(n)
        n *= 2
    return sizes


def kernels_of(p: Params) -> list[Kernel]:
    """Every kernel a run times, in order: the matmuls by dtype and size, then the copy."""
    return ([Kernel("matmul", d, n) for d in dtypes_of(p) for n in sizes_of(p)]
            + [Kernel("copy", COPY_DTYPE, int(p["copy_mib"]))])


Call = Callable[[], Any]  # runs a kernel once and returns a host value that depends on its whole output


def measure(p: Params, build: Callable[[Kernel], Call], sink: Sink, cancel: CancelToken,
            clock: Callable[[], float] = time.perf_counter) -> None:
    """Time every kernel: its first call as `Compiled`, then warm-up and timed calls as `Step`s.

    `build` makes a kernel's inputs on the device and returns its call; the inputs of one kernel
    are dropped before the next is built.
    """
    done = 0
    for kernel in kernels_of(p):
        call = build(kernel)
        for i, warm in enumerate(_calls(p)):
            t0 = clock()
            call()
            seconds = clock() - t0
            done += 1
            if i == 0:
                sink(Compiled(seconds=seconds, phase=kernel.kind))
            else:
                sink(Step(step=done, seconds=seconds, warmup=warm, phase=kernel.kind, kernel=kernel.to_json()))
            if cancel.is_set():
                return
        del call


def _calls(p: Params) -> Iterator[bool]:
    """Whether each call of one kernel is warm-up: the first call, the warm-up calls, then the timed ones."""
    yield True
    yield from [True] * p["warmup"]
    yield from [False] * p["iterations"]


def _tensorflow() -> Runner:
    from tpulab.workloads.roofline_tf import run

    return run


def _jax() -> Runner:
    from tpulab.workloads.roofline_jax import run

    return run


class Roofline(Workload):
    name = "roofline"
    title = "Roofline: measured ceilings"
    summary = ("The device's two ceilings, measured: matmul FLOP/s over doubling sizes in each dtype, and the "
               "bytes per second of a large copy. Every later run is shown against them.")
    params = PARAMS
    presets = {
        "smoke": {"min_size": 16, "max_size": 64, "copy_mib": 4, "iterations": 3, "warmup": 1},
        "default": {},
        "large": {"min_size": 1024, "max_size": 16384, "copy_mib": 1024},
    }
    unit = "call"
    charts = (step_time("call"), GFLOPS)
    runners = {"tensorflow": _tensorflow, "jax": _jax}

    def flops_per_step(self, p: Params) -> float | None:
        return None  # each kernel says its own (the steps carry it)

    def total_steps(self, p: Params) -> int:
        return len(kernels_of(p)) * (1 + p["warmup"] + p["iterations"])

    def compute_dtype(self, p: Params) -> str:
        return dtypes_of(p)[0]

    def batch_size(self, p: Params) -> int:
        return 0  # no examples: figures are FLOP/s and bytes/s

    def replicas(self, p: Params) -> int:
        return 1

    def shorten(self, p: Params, steps: int) -> Params:
        return {**p, "iterations": steps}

    def resolve(self, values: Mapping[str, Any], limits: Limits, preset: str | None = None) -> Params:
        """auto dtypes become the chosen device's, so the record says which were measured."""
        p = super().resolve(values, limits, preset)
        if p["dtypes"] == "auto":
            p["dtypes"] = ",".join(dtypes_of(p, limits.device_for(p["device"])))
        return p

    def check(self, p: Params, limits: Limits) -> None:
        device = limits.device_for(p["device"])
        if limits.max_shards.get(device, 0) < 1:
            raise ParamError("device", f"--device {device}: no {device.upper()} was found on this machine "
                             "(see `tpulab doctor`)")
        if p["min_size"] > p["max_size"]:
            raise ParamError("max_size", f"--max-size must be at least --min-size {p['min_size']} "
                             f"(got {p['max_size']})")
        wanted = dtypes_of(p)
        bad = [d for d in wanted if d not in DTYPES]
        if p["dtypes"] != "auto" and (bad or not wanted):
            raise ParamError("dtypes", f"--dtypes must be auto or a comma-separated list of {', '.join(DTYPES)} "
                             f"(got {p['dtypes']!r})")

    def describe_data(self, p: Params) -> str:
        sizes = sizes_of(p)
        return (f"random {p['dtypes']} matrices n={sizes[0]}..{sizes[-1]} (seed {p['seed']}) and a "
                f"{p['copy_mib']} MiB {COPY_DTYPE} array, held on the device")


def placed(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> Placement:
    """Say `Started` (through the workload contract) and return where the kernels run."""
    placement, _ = w.begin(p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    return placement


ROOFLINE = Roofline()
