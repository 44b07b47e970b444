"""The roofline's kernels, how each is timed and its figures: shared by the declaration and both runners.

Each kernel is timed on its own: its first call (trace and compile) is reported apart, then
`warmup` calls left out, then `iterations` timed calls, each waiting for a value that depends on
the kernel's output. The whole list is timed in `rounds` rounds and each kernel keeps its best
round: a burst of other work slows one round, not the figure. Every step carries its kernel (kind,
dtype, size, FLOPs and bytes per call, round), so the record keeps the figures of every size. No
framework is imported here.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Iterator

from tpulab.base import fmt
from tpulab.base.events import PHASE_BANDWIDTH, Compiled, KernelFigure, Log, Step
from tpulab.base.noise import MIN_SAMPLES
from tpulab.base.timing import median
from tpulab.machine.detect import probe_llc
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.running import CancelToken, Programs, Sink, begin, profile_calls, profiled

if TYPE_CHECKING:
    from tpulab.backends import Placement, Runtime
    from tpulab.base.ceilings import MeasuredCeilings

DTYPES = ("float32", "bfloat16", "float16")
# "auto": the dtypes each kind of device has fast units for (a CPU's bfloat16 is mostly converted float32)
DEVICE_DTYPES = {"cpu": ("float32",), "gpu": ("float32", "bfloat16", "float16"), "tpu": ("bfloat16", "float32")}
COPY_DTYPE = "float32"
MIB = 1 << 20
CACHE_MULTIPLE = 4  # a copy measures the memory once its array is this many times the cache
# An accelerator's own cache is not known here: taken as 256 MiB, more than an NVIDIA GPU's L2
# (50 MB on an H100) or a TPU v4's 128 MiB CMEM, so a 1 GiB copy measures its memory.
ASSUMED_CACHE = 256 * MIB
BANDWIDTH_KEPT = "bandwidth_kept_for"  # what the worker knows (`Handed.knows`): devices with a kept bandwidth ceiling
BANDWIDTH_BUDGET_S = 2.0  # a run with no bandwidth ceiling kept measures its own first, spending at most this ...
CHECK_BUDGET_S = 0.5  # ... and one with a ceiling kept checks it, spending at most this ...
MIN_COPIES, MAX_COPIES = MIN_SAMPLES, 20  # ... on this many copies (enough for an interval, whatever they take)
# what --dtypes accepts: "+" joins dtypes (a sweep's commas separate its points)
DTYPE_CHOICES = ("auto", *DTYPES, *("+".join(ds) for ds in DEVICE_DTYPES.values() if len(ds) > 1), "float32+bfloat16")

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
        """2 n^3 for a matmul (a multiply and an add per term); one operation per element for the copy."""
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
    return tuple(str(p["dtypes"]).split("+"))


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


Call = Callable[[], Any]  # runs a kernel once and returns when its whole output is computed


def plan(p: Params) -> list[Kernel]:
    """Every call a run makes, in order: each round times every kernel, each kernel in `calls_per_kernel` calls."""
    return [k for _ in range(p["rounds"]) for k in kernels_of(p) for _ in range(calls_per_kernel(p))]


def calls_per_kernel(p: Params) -> int:
    return 1 + p["warmup"] + p["iterations"]


def measure(p: Params, build: Callable[[Kernel], Call], sink: Sink, cancel: CancelToken,
            clock: Callable[[], float] = time.perf_counter) -> list[Step]:
    """Time every kernel in each round: its first call of the first round as `Compiled` (a later round's
    first call is a warm-up step), then warm-up and timed calls as `Step`s (returned).

    `build` makes a kernel's inputs on the device and returns its call; the inputs of one kernel
    are dropped before the next is built.
    """
    done, said = 0, []
    for r in range(p["rounds"]):
        for kernel in kernels_of(p):
            call = build(kernel)
            for i, warm in enumerate(_calls(p)):
                t0 = clock()
                call()
                seconds = clock() - t0
                done += 1
                if i == 0 and r == 0:
                    sink(Compiled(seconds=seconds, phase=kernel.kind))
                else:
                    said.append(Step(step=done, seconds=seconds, warmup=warm, phase=kernel.kind,
                                     kernel={**kernel.to_json(), "round": r}))
                    sink(said[-1])
                if cancel.is_set():
                    return said
            del call
    return said


def seconds_left(p: Params, steps: list[Step]) -> float | None:
    """How long the calls still to come will take: each at its kernel's median so far, or, for a kernel not
    timed yet, its work at the rate of the last kernel of its kind timed (a larger matmul at a smaller one's
    rate: more, not less, than it will take). None before two matmul sizes were timed while more are to
    come: the smallest size's rate is its dispatch's, a fraction of the math's."""
    timed = [s for s in steps if s.kernel is not None]
    if not timed:
        return None
    figures = {(f.kind, f.dtype, f.size): f for f in kernel_figures(timed)}
    left = plan(p)[timed[-1].step:]
    if sum(f.kind == "matmul" for f in figures.values()) < 2 and any(
            k.kind == "matmul" and (k.kind, k.dtype, k.size) not in figures for k in left):
        return None
    last = {f.kind: f for f in figures.values()}  # the latest of each kind (figures keep the order timed)
    fallback = timed[-1].seconds

    def seconds(k: Kernel) -> float:
        f = figures.get((k.kind, k.dtype, k.size))
        if f is not None:
            return f.median_s
        like = last.get(k.kind)
        rate = (like.flops_per_s if k.kind == "matmul" else like.bytes_per_s) if like else None
        return (k.flops if k.kind == "matmul" else k.bytes) / rate if rate else fallback

    return sum(seconds(k) for k in left)


def profile_best(p: Params, steps: list[Step], build: Callable[[Kernel], Call], sink: Sink, cancel: CancelToken,
                 runtime: Runtime, programs: Callable[[Kernel], Programs] | None = None) -> None:
    """With --profile, after every kernel was timed: the fastest matmul again, traced (`profile_calls`).

    The best matmul's call is the step the summary's timing and rates are of, so the op table is of that
    same step (a copy, or a matmul too small to reach the ceiling, would explain another). Its inputs are
    made again and its first call is not traced. `programs`: the compiled kernel, for its ops' FLOPs.
    """
    top = best(kernel_figures(steps), "matmul")
    if top is None or not profiled(p, cancel):
        return
    kernel = Kernel("matmul", top.dtype, top.size)
    call = build(kernel)
    call()
    profile_calls(p, sink, cancel, runtime, call, programs(kernel) if programs else None)


def _calls(p: Params) -> Iterator[bool]:
    """Whether each call of one kernel is warm-up: the first call, the warm-up calls, then the timed ones."""
    yield True
    yield from [True] * p["warmup"]
    yield from [False] * p["iterations"]


Ident = tuple[str, str, int]  # kind, dtype, size


def _rounds(steps: Iterable[Step]) -> tuple[dict[Ident, dict[int, list[float]]], dict[Ident, tuple[float, float]]]:
    """The steady step times of each kernel, per round (a record from before rounds: all in round 0), and
    each kernel's FLOPs and bytes per call."""
    samples: dict[Ident, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    work: dict[Ident, tuple[float, float]] = {}
    for s in steps:
        k = s.kernel
        if k is None or s.warmup:
            continue
        ident = (str(k["kind"]), str(k["dtype"]), int(k["size"]))
        samples[ident][int(k.get("round", 0))].extend([s.seconds] * s.steps)
        work[ident] = (float(k.get("flops") or 0), float(k.get("bytes") or 0))
    return samples, work


def _best_round(rounds: dict[int, list[float]]) -> list[float]:
    """The times of the round with the lowest median: the one least disturbed by other work."""
    return min(rounds.values(), key=lambda xs: median(xs) or 0.0)


def kernel_figures(steps: Iterable[Step]) -> list[KernelFigure]:
    """Each kernel's figure, in the order first timed: the median of its best round, and its rate; `count`
    is every timed call of it."""
    samples, work = _rounds(steps)
    out = []
    for (kind, dtype, size), rounds in samples.items():
        mid = median(_best_round(rounds)) or 0.0
        flops, nbytes = work[(kind, dtype, size)]
        out.append(KernelFigure(kind=kind, dtype=dtype, size=size, median_s=mid,
                                count=sum(len(xs) for xs in rounds.values()),
                                flops_per_s=flops / mid if kind == "matmul" and mid > 0 else None,
                                bytes_per_s=nbytes / mid if kind == "copy" and mid > 0 else None))
    return out


def kernel_samples(steps: Iterable[Step], figure: KernelFigure) -> list[float]:
    """The steady step times of one kernel's best round (those its figure is the median of)."""
    rounds = _rounds(steps)[0].get((figure.kind, figure.dtype, figure.size))
    return _best_round(rounds) if rounds else []


def best(figures: Iterable[KernelFigure], kind: str, dtype: str | None = None) -> KernelFigure | None:
    """The fastest figure of a kind (and dtype)."""
    rate = (lambda f: f.flops_per_s or 0.0) if kind == "matmul" else (lambda f: f.bytes_per_s or 0.0)
    found = [f for f in figures if f.kind == kind and (dtype is None or f.dtype == dtype) and rate(f) > 0]
    return max(found, key=rate, default=None)


def kernel_work(figure: KernelFigure) -> tuple[float, float]:
    """FLOPs and bytes of one call of a roofline kernel (its least traffic: operands read, result written once)."""
    k = Kernel(figure.kind, figure.dtype, figure.size)
    return k.flops, k.bytes


def kernel_intensity(figure: KernelFigure) -> float:
    """FLOP per byte of a roofline kernel."""
    flops, nbytes = kernel_work(figure)
    return flops / nbytes


def placed(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> tuple[Params, Placement]:
    """Say `Started` (through the workload contract) and return the parameters and where the kernels run
    (the run's spec decided auto dtypes before the worker started)."""
    placement, _ = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    return p, placement


def bandwidth_kept(p: Params, ceilings: MeasuredCeilings) -> dict[str, Any]:
    """What the worker of a run set against the bandwidth ceiling must know (`Workload.worker_knows`): the
    devices of its kind whose ceiling is kept, so that it measures one only where none is."""
    return {BANDWIDTH_KEPT: ceilings.memory_kept(str(p.get("device", "cpu")))}


def copy_mib(kind: str) -> int:
    """A copy a cache cannot hold, as a roofline's must be to be kept (`CACHE_MULTIPLE` x the cache): 4x the CPU's
    last-level cache, or 4x the size an accelerator's cache is taken as; at least 64 MiB."""
    llc = probe_llc(Path("/")) if kind == "cpu" else None
    return max(64, math.ceil(CACHE_MULTIPLE * (llc or ASSUMED_CACHE) / MIB))


def measure_bandwidth(kept: Collection[str], placement: Placement, build: Callable[[Kernel], Call], sink: Sink,
                      clock: Callable[[], float] = time.perf_counter) -> None:
    """What a decode runner calls before its prefill: time several copies (`copy_mib`), at least `MIN_COPIES` (enough
    for their median's interval) and at most `MAX_COPIES`, and say the best and their spread (`best_copy`). Their
    steps (`PHASE_BANDWIDTH`, each carrying its kernel) go into the record; the first call is left out.

    With no bandwidth ceiling kept for this device (the parent said which are: `kept`, from `bandwidth_kept`), as
    many as fit 2 s: their best is the run's ceiling. The best, not the median: other work can only slow a copy, so
    the fastest is the nearest to what the memory does (one copy timed on a busy machine gave anywhere from 14.6 to
    31.7 GB/s). With one kept, as many as fit 0.5 s: they check it (`figures.check`), the ceiling stays the
    denominator (one bandwidth per machine).

    `build`: the backend's roofline builder (`roofline_jax.builder(seed, device)`, `roofline_tf`'s).
    """
    start = clock()
    budget = CHECK_BUDGET_S if placement.name in kept else BANDWIDTH_BUDGET_S
    kernel = Kernel("copy", COPY_DTYPE, copy_mib(placement.kind))
    call = build(kernel)
    call()  # trace, compile, first touch: not timed
    times: list[float] = []
    while len(times) < MIN_COPIES or (len(times) < MAX_COPIES and clock() - start + times[-1] <= budget):
        t0 = clock()
        call()
        times.append(clock() - t0)
    del call
    steps = [Step(step=i, seconds=seconds, phase=PHASE_BANDWIDTH, kernel=kernel.to_json())
             for i, seconds in enumerate(times)]
    for step in steps:
        sink(step)
    found = best_copy(steps)
    if found is None:
        return
    if placement.name in kept:
        sink(Log(text=f"checking the kept bandwidth ceiling of {placement.name}: this run's copies read up to "
                 f"{fmt.rate(found[0], 'B/s')}, {found[1]}"))
    else:
        sink(Log(text=f"no bandwidth ceiling is kept for {placement.name}: measured {fmt.rate(found[0], 'B/s')} "
                 f"first, {found[1]}; its MBU is against this run's own copies, not comparable across runs; "
                 f"`tpulab --run roofline --copy-mib {kernel.size}` on a quiet machine keeps one"))


def copies(steps: Iterable[Step]) -> tuple[list[float], int] | None:
    """The bandwidths (bytes/s) of a run's own copies (its `PHASE_BANDWIDTH` steps) in the order timed, and each
    copy's size in MiB. None: no copy."""
    timed = [s for s in steps if s.phase == PHASE_BANDWIDTH and s.kernel is not None and s.seconds > 0]
    if not timed:
        return None
    k = timed[0].kernel or {}
    return [float(k["bytes"]) / s.seconds for s in timed], int(k["size"])


def best_copy(steps: Iterable[Step]) -> tuple[float, str] | None:
    """The best of a run's own copies in bytes/s, and which it was in words, with the copies' spread: 'the best of
    12 copies of 128 MiB (14.6 GB/s to 18.2 GB/s)'. None: no copy."""
    found = copies(steps)
    if found is None:
        return None
    rates, size = sorted(found[0]), found[1]
    return rates[-1], (f"the best of {len(rates)} copies of {size} MiB ({fmt.rate(rates[0], 'B/s')} to "
                       f"{fmt.rate(rates[-1], 'B/s')})")
