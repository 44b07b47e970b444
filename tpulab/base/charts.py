"""The live charts a workload can declare: what each plots from the run's events, by name of series.

The lab draws whatever a workload's `charts` list; each `Chart` turns an event into points
(series, x, y) and may draw reference lines (the device's peak) and put series of another quantity on a
y axis of their own, at the right (accuracy beside loss). A new quantity is one `Chart` here or in a
workload's module, never a name the lab knows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from tpulab.base.events import Epoch, Event, Step

Point = tuple[str, float, float]  # (series, x, y)


class Figure(Protocol):
    """A figure a chart may plot beside time (`tpulab.workloads.base.Metric` is one)."""

    @property
    def key(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def higher_is_better(self) -> bool: ...


class Charted(Protocol):
    """What a chart reads of its workload (`tpulab.workloads.base.Workload` has it): its step's name,
    its figures and their words, and which phase is inference."""

    @property
    def unit(self) -> str: ...
    @property
    def metrics(self) -> Sequence[Figure]: ...
    def label(self, key: str) -> str: ...
    def is_inference(self, phase: str) -> bool: ...


@dataclass
class ChartContext:
    """What a chart may read besides the event: the workload, its work per step and the device's peak."""

    workload: Charted
    flops_per_step: float | None = None
    peak_flops: float | None = None
    last_step: int = 0


@dataclass(frozen=True)
class Chart:
    title: str
    points: Callable[[Event, ChartContext], list[Point]]
    lines: Callable[[ChartContext], dict[str, float]] = field(default=lambda ctx: {})
    right: Callable[[ChartContext], tuple[str, ...]] = field(default=lambda ctx: ())  # series on the right axis


def _series(e: Step, ctx: ChartContext) -> str:
    return "warm-up" if e.warmup else "predict" if ctx.workload.is_inference(e.phase) else ctx.workload.unit


def _time(e: Event, ctx: ChartContext) -> list[Point]:
    return [(_series(e, ctx), e.step, e.seconds * 1e3)] if isinstance(e, Step) else []


def _gflops(e: Event, ctx: ChartContext) -> list[Point]:
    if isinstance(e, Step) and ctx.flops_per_step and e.seconds > 0 and not ctx.workload.is_inference(e.phase):
        return [(_series(e, ctx), e.step, ctx.flops_per_step / e.seconds / 1e9)]
    return []


def _throughput(e: Event, ctx: ChartContext) -> list[Point]:
    return [("examples/s", e.step, e.examples_per_s)] if isinstance(e, Step) and e.examples_per_s else []


def _metrics(e: Event, ctx: ChartContext) -> list[Point]:
    w = ctx.workload
    if isinstance(e, Step):
        return [(m.label, e.step, e.metrics[m.key]) for m in w.metrics if m.key in e.metrics]
    if isinstance(e, Epoch):
        return [(_val(w.label(k)), ctx.last_step, v) for k, v in e.metrics.items() if k.startswith("val_")]
    return []


def _val(label: str) -> str:
    return label.replace("validation", "val")


def _rising(ctx: ChartContext) -> tuple[str, ...]:
    """The metrics that rise as training goes well (accuracy) get their own axis: loss falls, on another scale."""
    return tuple(name for m in ctx.workload.metrics if m.higher_is_better
                 for name in (m.label, _val(ctx.workload.label("val_" + m.key))))


def _peak(ctx: ChartContext) -> dict[str, float]:
    return {"peak": ctx.peak_flops / 1e9} if ctx.peak_flops else {}


def step_time(unit: str = "step") -> Chart:
    return Chart(f"ms per {unit}", _time)


STEP_TIME = step_time()
GFLOPS = Chart("GFLOP/s", _gflops, _peak)
THROUGHPUT = Chart("examples/s", _throughput)
METRICS = Chart("loss, accuracy", _metrics, right=_rising)


# --- axes: ticks at the precision the data carry ---------------------------------------------------
def ticks(lo: float, hi: float, most: int) -> list[tuple[float, str]]:
    """At most `most` ticks between `lo` and `hi` at a round spacing (1, 2 or 5 x 10^k), each labelled with as
    many digits as that spacing needs ('0.860', '12k'), never the data's own digits ('0.8695', '12061.7')."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [(lo, tick_label(lo, abs(lo) / 10 or 1))]
    steps = [m * 10.0 ** e for e in range(math.floor(math.log10(hi - lo)) - 2, math.floor(math.log10(hi - lo)) + 2)
             for m in (1, 2, 5)]
    for step in steps:  # the finest spacing that gives at most `most` ticks, and at least two
        first = math.ceil(lo / step - 1e-9)
        values = [(first + i) * step for i in range(int((hi - lo) / step) + 2) if (first + i) * step <= hi * (1 + 1e-12)]
        if 2 <= len(values) <= max(2, most):
            return [(v, tick_label(v, step)) for v in values]
    return [(lo, tick_label(lo, hi - lo)), (hi, tick_label(hi, hi - lo))]


def tick_label(value: float, step: float) -> str:
    """`value` with the digits a tick spacing of `step` needs: thousands as k, millions as M ('12k', '1.5M')."""
    scale, suffix = next(((s, x) for s, x in ((1e9, "G"), (1e6, "M"), (1e3, "k"))
                          if step >= s / 10 and abs(value) >= s), (1.0, ""))
    value, step = value / scale, step / scale
    digits = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value:.{digits}f}{suffix}"
