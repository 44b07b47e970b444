"""The measured ceilings: what a device was seen to do, kept from its roofline runs.

A spec peak is a bound no program reaches (and on a VM, a guess); the measured ceiling is the
best matmul FLOP/s of a roofline run per device and dtype, and its copy's bytes per second. They
are derived from the kept roofline records, so there is nothing else to store or migrate: per
device and dtype, the roofline that measured the largest sizes wins (a later, larger one replaces
a smaller one's), and among those with the same largest size, the best figure.

A run is judged against the ceilings kept when it ran (the runner's caller reads them from the
store and hands them to the recorder): the record keeps the fraction and its source, so a figure
reads the same in every view and in an export, and an old run is not silently re-judged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tpulab.core.events import Device, KernelFigure, RunRecord, Step
from tpulab.core.timing import Flag, median

WORKLOAD = "roofline"
MEMORY = "memory"  # the dtype key of the bandwidth ceiling (bytes are bytes)


@dataclass(frozen=True)
class Ceiling:
    value: float  # FLOP/s, or bytes/s for MEMORY
    run_id: str
    backend: str
    size: int  # matrix side the best figure came at, or MiB copied
    extent: int  # the largest size the roofline measured: a larger one replaces this

    copy: bool = False  # a memory ceiling: `size` is MiB copied

    def source(self) -> str:
        size = f"{self.size} MiB copy" if self.copy else f"n={self.size}"
        return f"roofline run {self.run_id[:8]}, {self.backend}, {size}"


Key = tuple[str, str, str]  # device kind, device name, dtype


def key(device: Device, dtype: str) -> Key:
    return (device.kind, device.name, dtype)


def kernel_figures(steps: Iterable[Step]) -> list[KernelFigure]:
    """Each kernel's steady median and rate, from steps that carry their kernel, in the order first timed."""
    samples: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    work: dict[tuple[str, str, int], tuple[float, float]] = {}
    for s in steps:
        k = s.kernel
        if k is None or s.warmup:
            continue
        ident = (str(k["kind"]), str(k["dtype"]), int(k["size"]))
        samples[ident].extend([s.seconds] * s.steps)
        work[ident] = (float(k.get("flops") or 0), float(k.get("bytes") or 0))
    out = []
    for (kind, dtype, size), xs in samples.items():
        mid = median(xs) or 0.0
        flops, nbytes = work[(kind, dtype, size)]
        out.append(KernelFigure(kind=kind, dtype=dtype, size=size, median_s=mid, count=len(xs),
                                flops_per_s=flops / mid if kind == "matmul" and mid > 0 else None,
                                bytes_per_s=nbytes / mid if kind == "copy" and mid > 0 else None))
    return out


def samples(steps: Iterable[Step], figure: KernelFigure) -> list[float]:
    """The steady step times of one kernel."""
    return [s.seconds for s in steps for _ in range(s.steps) if s.kernel and not s.warmup
            and (s.kernel["kind"], s.kernel["dtype"], s.kernel["size"]) == (figure.kind, figure.dtype, figure.size)]


def best(figures: Iterable[KernelFigure], kind: str, dtype: str | None = None) -> KernelFigure | None:
    """The fastest figure of a kind (and dtype)."""
    rate = (lambda f: f.flops_per_s or 0.0) if kind == "matmul" else (lambda f: f.bytes_per_s or 0.0)
    found = [f for f in figures if f.kind == kind and (dtype is None or f.dtype == dtype) and rate(f) > 0]
    return max(found, key=rate, default=None)


def of_record(record: RunRecord) -> dict[Key, Ceiling]:
    """The ceilings one roofline record measured: per dtype its best matmul, and its copy's bandwidth."""
    if record.workload != WORKLOAD or record.device is None or record.status != "finished":
        return {}
    out = {}
    figures = record.summary.kernels
    for dtype in sorted({f.dtype for f in figures if f.kind == "matmul"}):
        top = best(figures, "matmul", dtype)
        if top is not None and top.flops_per_s:
            extent = max(f.size for f in figures if f.kind == "matmul" and f.dtype == dtype)
            out[key(record.device, dtype)] = Ceiling(top.flops_per_s, record.id, record.backend, top.size, extent)
    copy = best(figures, "copy")
    if copy is not None and copy.bytes_per_s:
        out[key(record.device, MEMORY)] = Ceiling(copy.bytes_per_s, record.id, record.backend, copy.size, copy.size,
                                                       copy=True)
    return out


class Ceilings:
    """Every device's kept ceilings, from the roofline records of a store (any order)."""

    def __init__(self, records: Iterable[RunRecord] = ()) -> None:
        self.kept: dict[Key, Ceiling] = {}
        for r in sorted(records, key=lambda r: r.started_at):
            for k, c in of_record(r).items():
                old = self.kept.get(k)
                if old is None or c.extent > old.extent or (c.extent == old.extent and c.value > old.value):
                    self.kept[k] = c

    def flops(self, device: Device | None, dtype: str | None) -> Ceiling | None:
        return self.kept.get(key(device, dtype)) if device is not None and dtype else None

    def bandwidth(self, device: Device | None) -> Ceiling | None:
        return self.kept.get(key(device, MEMORY)) if device is not None else None

    def __bool__(self) -> bool:
        return bool(self.kept)


def beats(achieved: float, ceiling: Ceiling, what: str = "FLOP/s") -> Flag:
    """The flag of a figure above a kept ceiling: 'beats-ceiling' (FLOP/s) or 'beats-bandwidth' (bytes/s)."""
    from tpulab.core import fmt

    code = "beats-bandwidth" if ceiling.copy else "beats-ceiling"
    return Flag(code, f"achieved {fmt.rate(achieved, what)}, above this device's measured ceiling "
                f"{fmt.rate(ceiling.value, what)} ({ceiling.source()}): a new best, not a fraction above 100%; "
                "a larger roofline run measures the ceiling again")


def kernel_work(figure: KernelFigure) -> tuple[float, float]:
    """FLOPs and bytes of one call of a roofline kernel (its least traffic: operands read, result written once)."""
    from tpulab.workloads.roofline_kernels import Kernel

    k = Kernel(figure.kind, figure.dtype, figure.size)
    return k.flops, k.bytes


def kernel_intensity(figure: KernelFigure) -> float:
    """FLOP per byte of a roofline kernel."""
    flops, nbytes = kernel_work(figure)
    return flops / nbytes


def kept_at(path: Path) -> Ceilings:
    """The ceilings of the store at `path` (none when there is no store yet, or it cannot be read)."""
    from tpulab.core.runindex import RunFilter
    from tpulab.core.store import Store, StoreError

    if not Path(path).exists():
        return Ceilings()
    try:
        return Ceilings(Store(path).records(RunFilter(workload=WORKLOAD)))
    except StoreError:
        return Ceilings()  # the run itself goes on; saving it will say what is wrong with the store
