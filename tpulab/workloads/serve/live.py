"""What a serve run shows while it goes: the load so far, said by the client every `EVERY_S` as a `PHASE_LOAD` step,
its live charts and its line (no framework, no network here).

A request's own step comes as it ends, so the requests in flight can only be said by the sender: a tick says how
many are in flight, sent and completed, TTFT and TPOT at p50 and p99 over the completed ones, and the arrival rate
achieved so far. Its `seconds` is when it was taken, from the load's start (as the totals' step); its `step` the
requests completed by then, and it counts as no step of the run (`steps` 0). The summary's figures are the whole
run's, with their intervals (`figures`); these are what the lab and the headless line show meanwhile.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Mapping, Sequence

from tpulab.base.charts import Chart, ChartContext, Point
from tpulab.base.events import Event, Step
from tpulab.base.timing import percentile
from tpulab.workloads.serve.figures import rate

PHASE_LOAD = "load"
EVERY_S = 0.5  # a tick this often: the lab takes a batch of events four times a second
QUANTILES = (50, 99)
Cell = tuple[str, str]  # (plain text, Rich style or ""), as `Workload.step_cells` gives them


class Tally:
    """The load so far, kept by the client as it goes: each latency list stays sorted as it grows (one insertion a
    request), so that a tick reads its quantiles at once however long the run."""

    def __init__(self) -> None:
        self.sends: list[float] = []  # when each request was sent, in order
        self.in_flight = 0
        self.completed = 0
        self.latencies: dict[str, list[float]] = {"ttft": [], "tpot": []}

    def sent(self, at: float) -> None:
        self.sends.append(at)
        self.in_flight += 1

    def ended(self, step: Step | None) -> None:
        """A request is no longer in flight: completed (its step), or failed (None)."""
        self.in_flight -= 1
        if step is None:
            return
        self.completed += 1
        for key, xs in self.latencies.items():
            if f"{key}_s" in step.metrics:
                bisect.insort(xs, step.metrics[f"{key}_s"])

    def step(self, now: float) -> Step:
        """The tick at `now` (seconds from the load's start)."""
        metrics = {"in_flight": float(self.in_flight), "sent": float(len(self.sends)),
                   "completed": float(self.completed)}
        for key, xs in self.latencies.items():
            if xs:
                metrics |= {f"{key}_p{q}_s": percentile(xs, q / 100) for q in QUANTILES}
        achieved = rate(self.sends)
        if achieved is not None:
            metrics["achieved_rate"] = achieved
        return Step(step=self.completed, seconds=now, steps=0, phase=PHASE_LOAD, metrics=metrics)


def seconds_left(p: Mapping[str, Any], steps: Sequence[Step]) -> float | None:
    """The load's time left, from its latest tick: the requests still to send at the rate asked (at a concurrency, at
    the rate they were sent so far), within --duration; None before the first tick. The requests overlap, so a
    request's time by those left would say far too long."""
    tick = next((s for s in reversed(steps) if s.phase == PHASE_LOAD), None)
    pace = None if tick is None else tick.metrics.get("achieved_rate") if p["concurrency"] else float(p["rate"])
    if tick is None or not pace:
        return None
    return min((p["requests"] - tick.metrics["sent"]) / pace, max(0.0, p["duration"] - tick.seconds))


def _tick(e: Event) -> Step | None:
    return e if isinstance(e, Step) and e.phase == PHASE_LOAD else None


def _in_flight(e: Event, ctx: ChartContext) -> list[Point]:
    return [("in flight", s.seconds, s.metrics["in_flight"])] if (s := _tick(e)) else []


def _quantiles(key: str, scale: float) -> Callable[[Event, ChartContext], list[Point]]:
    """A latency's p50 and p99 so far, each series named whole ('TTFT p99'): a report draws each on its own."""
    def points(e: Event, ctx: ChartContext) -> list[Point]:
        s = _tick(e)
        return [] if s is None else [(f"{key.upper()} p{q}", s.seconds, s.metrics[f"{key}_p{q}_s"] * scale)
                                     for q in QUANTILES if f"{key}_p{q}_s" in s.metrics]
    return points


IN_FLIGHT = Chart("requests in flight, by second", _in_flight)
TTFT = Chart("TTFT so far (s)", _quantiles("ttft", 1.0))
TPOT = Chart("TPOT so far (ms)", _quantiles("tpot", 1e3))
CHARTS = (IN_FLIGHT, TTFT, TPOT)  # short titles: at 80 columns a third of the width, a note on a narrow axis beside


def number(x: float) -> str:
    """The digits a live figure needs, never an exponent: '0.52', '8.1', '52', '1,240'."""
    return f"{x:.2g}" if abs(x) < 10 else f"{x:,.0f}"


def quantiles(p50: float, p99: float) -> str:
    """'p50 120 p99 300 ms', or in seconds once the p99 is a second or more: 'p50 3.5 p99 5.4 s'."""
    scale, unit = (1.0, "s") if p99 >= 1 else (1e3, "ms")
    return f"p50 {number(p50 * scale)} p99 {number(p99 * scale)} {unit}"


def cells(tick: Step) -> list[Cell]:
    """'4 in flight  40/48 done  TTFT p50 120 p99 300 ms  TPOT p50 8.1 p99 12 ms  sent 9.8/s': a tick in words, within
    80 columns (the counts second: the cell a narrow line leaves out first, the lab's header counting the completed
    too; the rate asked is said once, in the run's first lines)."""
    m = tick.metrics
    out: list[Cell] = [(f"{m['in_flight']:.0f} in flight", "bold"), (f"{m['completed']:.0f}/{m['sent']:.0f} done", "")]
    out += [(f"{label} {quantiles(m[f'{key}_p50_s'], m[f'{key}_p99_s'])}", "")
            for key, label in (("ttft", "TTFT"), ("tpot", "TPOT")) if f"{key}_p50_s" in m]
    if "achieved_rate" in m:
        out.append((f"sent {number(m['achieved_rate'])}/s", ""))
    return out
