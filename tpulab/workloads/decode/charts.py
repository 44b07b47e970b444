"""A decode run's live charts: each token's time and rate, by token (the prefill is token 0)."""

from __future__ import annotations

from tpulab.base.charts import Chart, ChartContext, Point
from tpulab.base.events import Event, Step
from tpulab.workloads.decode.figures import PHASE_DECODE, PHASE_PREFILL


def _token(e: Event) -> Step | None:
    """A token step: the prefill (token 0) or a decode step, timed."""
    return e if isinstance(e, Step) and e.phase in (PHASE_PREFILL, PHASE_DECODE) and not e.warmup else None


def _token_ms(e: Event, ctx: ChartContext) -> list[Point]:
    return [(s.phase, s.step, s.seconds * 1e3)] if (s := _token(e)) else []


def _token_rate(e: Event, ctx: ChartContext) -> list[Point]:
    return [(s.phase, s.step, s.examples_per_s)] if (s := _token(e)) and s.examples_per_s else []


TOKEN_TIME = Chart("ms per token, by token (prefill: token 0)", _token_ms)
TOKEN_RATE = Chart("tokens/s over the batch, by token", _token_rate)
