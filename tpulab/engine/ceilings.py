"""The measured ceilings: what a device was seen to do, kept from its roofline runs.

A spec peak is a bound no program reaches (and on a VM, a guess); the measured ceiling is the
best matmul FLOP/s of a roofline run per device and dtype, and its copy's bytes per second. They
are derived from the kept roofline records, so there is nothing else to store or migrate: per
device and dtype, the best figure any roofline measured there, on any backend, wins, kept with
the run, backend and kernel that reached it (a ceiling is what the device can do: a lower figure
only says that one backend's kernel or that moment did less).

A ceiling is a plateau that a busy machine could not have made: a roofline sets one only where
its curve has flattened (`matmul_verdict`), its copy outgrew the cache (`copy_verdict`), and other
processes used at most a quarter of the cores while it ran (`busy`: the telemetry's host load
minus the worker's own; a run whose load was not recorded sets none). The rules apply when the
ceilings are derived, so a store whose rooflines were too small to set one (the smoke preset's),
or measured beside other work, now keeps none.

A run is judged against the ceilings kept when it ran (the runner's caller reads them from the
store and hands them to the recorder): the record keeps the fraction and its source, so a figure
reads the same in every view and in an export, and an old run is not silently re-judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from tpulab.base import fmt
from tpulab.base.ceilings import BANDWIDTH_LOW, CEILING_LOW, MEASURED, Sourced, rerun
from tpulab.base.events import Device, KernelFigure, RunRecord, SummaryFields, Telemetry
from tpulab.base.timing import Flag
from tpulab.engine.runindex import RunFilter
from tpulab.engine.store import Store, StoreError
from tpulab.engine.telemetry_summary import Load, load_of
from tpulab.workloads.roofline import ROOFLINE
from tpulab.workloads.shared.kernels import ASSUMED_CACHE, CACHE_MULTIPLE, MIB, best

WORKLOAD = "roofline"
MEMORY = "memory"  # the dtype key of the bandwidth ceiling (bytes are bytes)
FLAT = 0.10  # a matmul curve is flat once its last doubling changed its rate by at most this
LOAD_SAMPLES = 4  # telemetry samples (2 s at 2 Hz) that read the load before it may stop a roofline


def busy(t: Telemetry | None) -> str | None:
    """Why a roofline with this telemetry sets no ceiling (None: the machine was quiet enough)."""
    load = load_of(t)
    if load is None:
        return ("other processes' load was not recorded (telemetry off, or the run too short to sample), so a busy "
                "machine could have made its figures")
    if load.busy:
        return (f"{load.words()} while it ran, more than a quarter: its figures are what they left; measure it on "
                "a quieter machine (`tpulab top` shows the load)")
    return None


@dataclass(frozen=True)
class KeptCeiling:
    """A ceiling a roofline run measured, as the store keeps it: its value, and the run, backend and sizes."""

    value: float  # FLOP/s, or bytes/s for MEMORY
    run_id: str
    backend: str
    size: int  # matrix side the best figure came at, or MiB copied
    extent: int  # the largest size the roofline measured

    copy: bool = False  # a memory ceiling: `size` is MiB copied
    first: int = 0  # the smallest size the roofline measured
    preset: str | None = None  # the roofline's preset, when its sizes are one's
    load: Load | None = None  # other processes' load while it ran

    def source(self) -> str:
        """'roofline run ab12cd34, jax, n=256..2048 (best n=512), preset default'."""
        if self.copy:
            size = f"{self.size} MiB copy"
        else:
            size = f"n={self.first}..{self.extent}" + (f" (best n={self.size})" if self.size != self.extent else "")
        return f"roofline run {self.run_id[:8]}, {self.backend}, {size}" + (f", preset {self.preset}" if self.preset else "")

    def measured(self) -> str:
        """Where and under what load it was measured: its source, and 'other processes used 0.10 of 2 cores (5%)'."""
        return self.source() + (f"; {self.load.words()}" if self.load else "")

    def sourced(self) -> Sourced:
        """Its value and source, as every peak and ceiling a run is set against is said."""
        return Sourced(self.value, self.source(), MEASURED)


Key = tuple[str, str, str]  # device kind, device name, dtype


def key(device: Device, dtype: str) -> Key:
    return (device.kind, device.name, dtype)


@dataclass(frozen=True)
class CurveVerdict:
    """Whether one curve of a roofline reached its ceiling: the figure that sets it, or why not."""

    figure: KernelFigure | None  # the ceiling; None: not reached
    why: str  # 'flat: n=2048 within 3% of n=1024', 'not saturated at n=64 (still +180% per doubling)'
    run: str | None = None  # the roofline to run to reach it


def matmul_verdict(figures: Iterable[KernelFigure], dtype: str, quiet: bool = False) -> CurveVerdict:
    """A dtype's ceiling, once its matmul curve is flat: the two largest sizes within 10% of each
    other (the last doubling's change, up or down). The ceiling is then the curve's best figure.

    Small matmuls time the dispatch, not the math: their rate grows ~8x per doubling, and a ceiling
    taken there is beaten by every later run. A last doubling that still gains more than 10% has
    not reached the plateau (run up to 4x larger); one that loses more than 10% is not steady
    (other work on the device: run it again, at the default's sizes at least), unless the machine
    was `quiet` (its load recorded, and low) and an earlier doubling was flat: then the curve passed
    its plateau (XLA's matmul on a CPU falls 20% from n=2048 to n=4096 on a quiet machine). A best at
    a middle size above a flat tail (operands held in a cache) is work the device did, so it stays
    the ceiling: better high than low, since a ceiling too low is beaten by every later run.
    """
    curve = sorted((f for f in figures if f.kind == "matmul" and f.dtype == dtype and f.flops_per_s),
                   key=lambda f: f.size)
    if len(curve) < 2:
        n = curve[0].size if curve else 0
        return CurveVerdict(None, f"one size (n={n}) shows no curve" if curve else "no matmul was timed",
                       rerun(sizes_to(4 * n), dtype))
    prev, last = curve[-2:]
    change = (last.flops_per_s or 0.0) / (prev.flops_per_s or 1.0) - 1
    if change > FLAT:
        return CurveVerdict(None, f"not saturated at n={last.size} (still {change:+.0%} per doubling)",
                       rerun(sizes_to(4 * last.size), dtype))
    top = best(curve, "matmul")
    if change < -FLAT:
        flat = next(((a, b) for a, b in reversed(list(zip(curve, curve[1:])))
                     if abs((b.flops_per_s or 0.0) / (a.flops_per_s or 1.0) - 1) <= FLAT), None) if quiet else None
        if flat is None:
            return CurveVerdict(None, f"not steady at n={last.size} ({change:+.0%} from n={prev.size}: other work on "
                                 "the device?)", rerun(sizes_to(last.size), dtype))
        return CurveVerdict(top, f"flat at n={flat[0].size}..{flat[1].size}, then {change:+.0%} at n={last.size} on a "
                            "quiet machine: past its plateau")
    return CurveVerdict(top, f"flat: n={last.size} within {abs(change):.0%} of n={prev.size}")


def copy_verdict(figure: KernelFigure, cache: tuple[int, str]) -> CurveVerdict:
    """The memory ceiling, once the copy's array is at least 4x the cache (`cache_of`): a smaller
    one may be read from the cache, whose bandwidth is many times the memory's."""
    nbytes, words = cache
    need = math.ceil(CACHE_MULTIPLE * nbytes / MIB)
    if figure.size < need:
        return CurveVerdict(None, f"the {figure.size} MiB copy is under {CACHE_MULTIPLE}x {words}, which may hold it",
                       rerun(copy_mib=need))
    return CurveVerdict(figure, f"the {figure.size} MiB copy is {figure.size * MIB / nbytes:.1f}x {words}")


def cache_of(record: RunRecord) -> tuple[int, str]:
    """The cache a roofline's copy must outgrow, in bytes and words: a CPU's last-level cache as
    sysfs gave it when the run ran; an accelerator's, or one sysfs did not give, `ASSUMED_CACHE`."""
    assumed = f"(unknown here: taken as {fmt.bytes_(ASSUMED_CACHE)})"
    if record.device is None or record.device.kind != "cpu":
        return ASSUMED_CACHE, f"the device's cache {assumed}"
    llc = (record.runtime.get("cpu") or {}).get("llc_bytes")
    return (int(llc), f"the {fmt.bytes_(llc)} last-level cache") if llc else (ASSUMED_CACHE, f"the last-level cache {assumed}")


def verdicts(record: RunRecord) -> dict[str, CurveVerdict]:
    """A roofline record's verdict per matmul dtype, and its copy's under `MEMORY`. A run that did not finish
    sets none, for why it stopped (its curves are cut short); on a busy machine, a figure that reached its
    plateau sets none for the load (`refused`), and one that did not says why not first (what to run is the
    sizes)."""
    figures = record.summary.kernels
    why = refused(record)
    out = {dtype: matmul_verdict(figures, dtype, quiet=why is None) for dtype in dict.fromkeys(
        f.dtype for f in figures if f.kind == "matmul")}
    copy = best(figures, "copy")
    if copy is not None:
        out[MEMORY] = copy_verdict(copy, cache_of(record))
    unfinished = record.status != "finished"
    return {d: CurveVerdict(None, why, rerun(dtype=d if d != MEMORY else "float32")) if why and (v.figure or unfinished)
            else v for d, v in out.items()}


def refused(record: RunRecord) -> str | None:
    """Why none of a roofline's figures is a ceiling, whatever their curve: it did not finish (stopped, for
    one, by the load beside it: its error says so), or other processes' load was over the limit."""
    if record.status != "finished":
        return record.error or f"the run was {record.status} before it timed every size"
    return busy(record.summary.telemetry)


def sizes_to(n: int) -> tuple[int, int]:
    """Four sizes up to n, or the default's four if they are larger: smaller ones time the dispatch."""
    top = max(n, int(ROOFLINE.defaults()["max_size"]))
    return top // 8, top


def preset_of(params: dict[str, Any]) -> str | None:
    """The roofline preset whose sizes a run's parameters are, if any."""
    w = ROOFLINE
    sizes = ("min_size", "max_size", "copy_mib")
    return next((name for name in w.presets if all(w.preset(name)[k] == params.get(k) for k in sizes)), None)


def of_record(record: RunRecord) -> dict[Key, KeptCeiling]:
    """The ceilings one roofline record measured: per dtype its flat curve's best, and its copy's
    bandwidth when the copy outgrew the cache."""
    if record.workload != WORKLOAD or record.device is None or record.status != "finished":
        return {}
    out = {}
    preset = preset_of(record.params)
    load = load_of(record.summary.telemetry)
    for dtype, v in verdicts(record).items():
        f = v.figure
        if f is None:
            continue
        if dtype == MEMORY and f.bytes_per_s:
            out[key(record.device, MEMORY)] = KeptCeiling(f.bytes_per_s, record.id, record.backend, f.size, f.size,
                                                       copy=True, preset=preset, load=load)
        elif f.flops_per_s:
            sizes = [k.size for k in record.summary.kernels if k.kind == "matmul" and k.dtype == dtype]
            out[key(record.device, dtype)] = KeptCeiling(f.flops_per_s, record.id, record.backend, f.size, max(sizes),
                                                     first=min(sizes), preset=preset, load=load)
    return out


class Ceilings:
    """Every device's kept ceilings, from the roofline records of a store (any order): per device and dtype,
    the best any backend measured (the earlier of equal ones)."""

    def __init__(self, records: Iterable[RunRecord] = ()) -> None:
        self.kept: dict[Key, KeptCeiling] = {}
        for r in sorted(records, key=lambda r: r.started_at):
            for k, c in of_record(r).items():
                old = self.kept.get(k)
                if old is None or c.value > old.value:
                    self.kept[k] = c

    def add(self, other: Ceilings) -> None:
        """Another's ceilings into these, the best of each kept."""
        for k, c in other.kept.items():
            if k not in self.kept or c.value > self.kept[k].value:
                self.kept[k] = c

    def flops(self, device: Device | None, dtype: str | None) -> KeptCeiling | None:
        return self.kept.get(key(device, dtype)) if device is not None and dtype else None

    def bandwidth(self, device: Device | None) -> KeptCeiling | None:
        return self.kept.get(key(device, MEMORY)) if device is not None else None

    def memory(self, device: Device | None) -> Sourced | None:
        found = self.bandwidth(device)
        return found.sourced() if found else None

    def memory_kept(self, kind: str) -> list[str]:
        return sorted(name for k, name, dtype in self.kept if k == kind and dtype == MEMORY)

    def __bool__(self) -> bool:
        return bool(self.kept)

    def over_bandwidth(self, device: Device | None, bytes_per_s: float | None) -> list[Flag]:
        """The flag of a copy faster than this device's measured bandwidth (none when it is not)."""
        bandwidth = self.bandwidth(device)
        if bandwidth is None or not bytes_per_s or bytes_per_s <= bandwidth.value:
            return []
        return [beats(bytes_per_s, bandwidth, "B/s")]

    def judge(self, device: Device | None, dtype: str | None, flops_per_s: float | None, flops: float | None,
              nbytes: float | None) -> tuple[SummaryFields, list[Flag]]:
        """A run's part of its summary against this device's measured ceilings: the fraction of the FLOP/s
        ceiling it reached (a flag instead when it beat it), and which ceiling its intensity puts it under."""
        ceiling, bandwidth = self.flops(device, dtype), self.bandwidth(device)
        fraction, flags = None, []
        if ceiling is not None and flops_per_s:
            if flops_per_s > ceiling.value:
                flags.append(beats(flops_per_s, ceiling))
            else:
                fraction = flops_per_s / ceiling.value
        intensity = flops / nbytes if flops and nbytes else None
        bound = None
        if intensity is not None and ceiling is not None and bandwidth is not None:
            bound = "compute" if intensity >= ceiling.value / bandwidth.value else "memory"
        return dict(ceiling_flops=ceiling.value if ceiling else None,
                            ceiling_source=ceiling.source() if ceiling else None, ceiling_fraction=fraction,
                            bandwidth=bandwidth.value if bandwidth else None, bytes_per_step=nbytes,
                            intensity=intensity, bound=bound), flags


def beats(achieved: float, ceiling: KeptCeiling, what: str = "FLOP/s") -> Flag:
    """The flag of a figure above a kept ceiling: not a win (the spec peak is what hardware cannot beat) but a
    ceiling measured low, said with where and under what load it was measured, and how to measure it again."""
    return Flag(BANDWIDTH_LOW if ceiling.copy else CEILING_LOW,
                f"achieved {fmt.rate(achieved, what)}, above this device's measured ceiling "
                f"{fmt.rate(ceiling.value, what)} ({ceiling.measured()}): that ceiling was measured low, so no "
                f"fraction of it is shown; measure it again on a quiet machine: `{rerun()}`")


def kept_at(path: Path) -> Ceilings:
    """The ceilings of the store at `path` (none when there is no store yet, or it cannot be read), from its roofline
    records without their steps and telemetry (a ceiling reads the summary's figures and load)."""
    if not Path(path).exists():
        return Ceilings()
    try:
        return Ceilings(Store(path).records(RunFilter(workload=WORKLOAD), light=True))
    except StoreError:
        return Ceilings()  # the run itself goes on; saving it will say what is wrong with the store
