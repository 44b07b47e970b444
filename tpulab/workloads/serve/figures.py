"""A serve run's figures, from its steps (no framework, no network here).

The client says one `Step` per completed request (`PHASE_REQUEST`: `seconds` its end-to-end latency, `metrics` its
time to first token, time per output token, sizes, and when it was due and sent), then one `PHASE_TOTALS` step of
the load itself: how many were sent, how late, and the inter-token latencies of every stream pooled (each gap
between two chunks, as vLLM's `bench serve` pools them). From those, as vLLM names them:

- request throughput (completed requests over the run's time) and output tokens/s;
- TTFT, TPOT (a request's (end to end - TTFT) / (tokens - 1)), ITL and end to end at p50, p90 and p99, each with
  its 95% order-statistic interval (distribution-free: `quantiles`), none where the requests are too few for it;
- SLO attainment (the requests whose TTFT and TPOT are within --slo-ttft and --slo-tpot) and goodput (those a
  second);
- the arrival rate the server saw against the one asked: a generator that fell behind is flagged;
- the completion rate (requests completed a second, from the first end to the last): the rate sent, whatever the
  latency, where the server keeps up; below it where requests queue.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tpulab.base import fmt
from tpulab.base.capacity import Bound, Capacity
from tpulab.base.ceilings import Sourced
from tpulab.base.events import Step
from tpulab.base.figures import HIGHER, LOWER, Figure, FigureValue
from tpulab.base.noise import LEVEL
from tpulab.base.timing import Flag, percentile
from tpulab.workloads.base import SummaryPart
from tpulab.workloads.serve.quantiles import quantile

PHASE_REQUEST, PHASE_TOTALS = "request", "totals"
QUANTILES = (50, 90, 99)
LATENCIES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "end to end"}
BEHIND = 0.05  # the achieved arrival rate this far below the schedule's: the generator fell behind, flagged
FELL_BEHIND = "generator-behind"


def _latency_figures() -> tuple[Figure, ...]:
    out = []
    for key, label in LATENCIES.items():
        for q in QUANTILES:
            name = f"{key}_p{q}"
            out += [Figure(name=name, label=f"p{q}", unit="s", better=LOWER, group=label, compare=q == 99),
                    Figure(name=f"{name}_low", label=f"p{q} low", unit="s", group=f"{label} interval"),
                    Figure(name=f"{name}_high", label=f"p{q} high", unit="s", group=f"{label} interval")]
    return tuple(out)


FIGURES = (
    Figure(name="request_throughput", label="request throughput", unit="requests/s", better=HIGHER, compare=True,
           throughput="completed requests over the run's time, from the first send to the last end"),
    Figure(name="output_tokens_per_s", label="output tokens/s", unit="tokens/s", better=HIGHER, compare=True),
    *_latency_figures(),
    Figure(name="slo_attainment", label="met the SLO", unit="%", better=HIGHER, compare=True),
    Figure(name="goodput", label="goodput", unit="requests/s", better=HIGHER, compare=True),
    Figure(name="slo_ttft_s", label="TTFT at most", unit="s", group="SLO"),
    Figure(name="slo_tpot_s", label="TPOT at most", unit="s", group="SLO"),
    Figure(name="completed", label="completed", group="requests"),
    Figure(name="completion_rate", label="a second", unit="requests/s", group="requests"),  # from the first end to
    # the last: the rate sent where the server keeps up, whatever its latency (the knee of a sweep over --rate)
    Figure(name="sent", label="sent", group="requests"),
    Figure(name="asked_rate", label="asked", unit="requests/s", group="arrival rate"),
    Figure(name="scheduled_rate", label="scheduled", unit="requests/s", group="arrival rate"),
    Figure(name="achieved_rate", label="achieved", unit="requests/s", group="arrival rate"),
    Figure(name="send_lag_p99", label="p99", unit="s", better=LOWER, group="send lag"),
    Figure(name="send_lag_max", label="max", unit="s", better=LOWER, group="send lag"),
    Figure(name="concurrency", label="concurrency"),
    Figure(name="duration_s", label="run time", unit="s"),
    Figure(name="steady_batch", label="steady batch", unit="requests", group="engine"),
    Figure(name="step_bytes", label="a step reads", unit="B", group="engine"),
    Figure(name="bandwidth", label="bandwidth MBU is of", unit="B/s", group="engine"),
    Figure(name="mbu", label="MBU", unit="%", better=HIGHER, compare=True, group="engine"),
)

# A sweep over --rate finds the highest rate whose p99s are within the SLO (MLPerf's Server scenario bounds TTFT and
# TPOT at p99), and the knee: where the requests completed a second fall behind those sent.
CAPACITY = Capacity(load="rate", offered="achieved_rate", served="completion_rate",
                    bounds=(Bound("ttft_p99", "slo_ttft_s"), Bound("tpot_p99", "slo_tpot_s")),
                    rule="its TTFT p99 is within --slo-ttft and its TPOT p99 within --slo-tpot", invalid=(FELL_BEHIND,))


def rate(times: Sequence[float]) -> float | None:
    """Arrivals a second over their span: (n - 1) / (last - first); None for fewer than two."""
    return (len(times) - 1) / (max(times) - min(times)) if len(times) > 1 and max(times) > min(times) else None


def totals_metrics(sends: Sequence[tuple[float, float]], gaps: Sequence[float], end: float) -> dict[str, float]:
    """The load's totals, said by the client as its last step: sends (due, sent), the pooled inter-token gaps'
    quantiles and intervals, and the run's time (only numbers: a step's metrics)."""
    lags = sorted(max(0.0, sent - due) for due, sent in sends)
    out: dict[str, float] = {"sent": float(len(sends)), "end_s": end}
    for name, value in (("scheduled_rate", rate([d for d, _ in sends])), ("achieved_rate", rate([s for _, s in sends])),
                        ("send_lag_p99", percentile(lags, 0.99) if lags else None),
                        ("send_lag_max", lags[-1] if lags else None), *quantiled("itl", gaps).items()):
        if value is not None:
            out[name] = float(value)
    return out


def quantiled(key: str, xs: Sequence[float]) -> dict[str, float | None]:
    """{key_p50, key_p50_low, key_p50_high, ...} of the samples."""
    out: dict[str, float | None] = {}
    for q in QUANTILES:
        out[f"{key}_p{q}"], out[f"{key}_p{q}_low"], out[f"{key}_p{q}_high"] = quantile(xs, q / 100)
    return out


def requests(steps: Sequence[Step]) -> list[Step]:
    return sorted((s for s in steps if s.phase == PHASE_REQUEST), key=lambda s: s.step)


def figures(steps: Sequence[Step], p: Mapping[str, Any]) -> tuple[dict[str, FigureValue], list[Flag]]:
    """The serve figures of a run's steps (`p`: its parameters: the asked load and the SLO), and the flag of a
    generator that fell behind."""
    done = requests(steps)
    totals = next((s.metrics for s in steps if s.phase == PHASE_TOTALS), {})
    ends = [s.metrics["sent_s"] + s.seconds for s in done]
    span = max(ends) - min(s.metrics["sent_s"] for s in done) if done else None
    tokens = sum(s.metrics["output_tokens"] for s in done)
    met = [s for s in done if s.metrics["ttft_s"] <= p["slo_ttft"]
           and s.metrics.get("tpot_s", 0.0) <= p["slo_tpot"] / 1e3]
    d: dict[str, FigureValue] = {
        "request_throughput": len(done) / span if span else None,
        "output_tokens_per_s": tokens / span if span else None,
        **quantiled("ttft", [s.metrics["ttft_s"] for s in done]),
        **quantiled("tpot", [s.metrics["tpot_s"] for s in done if "tpot_s" in s.metrics]),
        **quantiled("e2e", [s.seconds for s in done]),
        **{k: totals.get(k) for k in quantiled("itl", [])},
        "slo_attainment": len(met) / len(done) if done else None,
        "goodput": len(met) / span if span else None,
        "slo_ttft_s": float(p["slo_ttft"]),
        "slo_tpot_s": p["slo_tpot"] / 1e3,
        "completed": float(len(done)),
        "completion_rate": rate(ends),
        "sent": totals.get("sent"),
        "asked_rate": None if p["concurrency"] else float(p["rate"]),
        "scheduled_rate": totals.get("scheduled_rate"),
        "achieved_rate": totals.get("achieved_rate"),
        "send_lag_p99": totals.get("send_lag_p99"),
        "send_lag_max": totals.get("send_lag_max"),
        "concurrency": float(p["concurrency"]) if p["concurrency"] else None,
        "duration_s": totals.get("end_s"),
    }
    return d, behind(d)


def behind(d: Mapping[str, FigureValue]) -> list[Flag]:
    """The flag of a load generator that sent slower than its schedule: the server saw less load than asked."""
    scheduled, achieved = d.get("scheduled_rate"), d.get("achieved_rate")
    if not isinstance(scheduled, float) or not isinstance(achieved, float) or achieved >= scheduled * (1 - BEHIND):
        return []
    return [Flag(FELL_BEHIND, f"the requests were sent at {fmt.rate(achieved, 'requests/s')}, below the schedule's "
                 f"{fmt.rate(scheduled, 'requests/s')} by more than {BEHIND:.0%} (the latest was "
                 f"{fmt.seconds(float(d.get('send_lag_max') or 0.0))} late): this machine's client could not keep "
                 "up, so the server saw less load than asked; the figures are of the load it saw")]


def bandwidth_use(steps: Sequence[Step], model: Mapping[str, Any] | None, bandwidth: Sourced | None
                  ) -> dict[str, FigureValue]:
    """MBU at the steady batch, where tpulab's engine served (`model`: what its worker said of the weights; None for
    your server, whose weights are unknown here): the steady batch is the requests decoding at once on average (their
    decode times over the run's time); a step at that batch reads every weight and each request's cache at its mean
    length (prompt and half the output); over the step time (TPOT p50, a token each), against the machine's one
    bandwidth (the kept ceiling: none kept, no MBU)."""
    done = requests(steps)
    if not model or not done:
        return {}
    ends = [s.metrics["sent_s"] + s.seconds for s in done]
    span = max(ends) - min(s.metrics["sent_s"] for s in done)
    batch = sum(s.seconds - s.metrics["ttft_s"] for s in done) / span if span > 0 else None
    held = sum(s.metrics["prompt_tokens"] + s.metrics["output_tokens"] / 2 for s in done) / len(done)
    read = float(model["weight_bytes"]) + (batch or 0.0) * held * float(model["kv_bytes_per_position"])
    tpot = percentile(sorted(s.metrics["tpot_s"] for s in done if "tpot_s" in s.metrics), 0.5) \
        if any("tpot_s" in s.metrics for s in done) else None
    return {"steady_batch": batch, "step_bytes": read if batch else None,
            "bandwidth": bandwidth.value if bandwidth else None,
            "mbu": read / tpot / bandwidth.value if batch and tpot and bandwidth else None}


def summary_part(steps: Sequence[Step], p: Mapping[str, Any], model: Mapping[str, Any] | None = None,
                 bandwidth: Sourced | None = None) -> SummaryPart:
    """A serve run's part of its summary: its step is a request (the statistics are of their end-to-end times), its
    rate the request throughput, its figures the ones above (MBU where tpulab's engine served: `bandwidth_use`)."""
    values, flags = figures(steps, p)
    values |= bandwidth_use(steps, model, bandwidth)
    throughput = values.get("request_throughput")
    return SummaryPart(seconds=[s.seconds for s in requests(steps)], figures=values, flags=tuple(flags),
                       examples_per_s=throughput if isinstance(throughput, float) else None)


def rows(d: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(figure, value) of a serve run in words: each latency's quantiles with their intervals, the SLO, the load."""
    shown = {f.name: f for f in FIGURES}

    def show(name: str) -> str:
        return shown[name].show(d.get(name))

    def with_interval(name: str) -> str:
        low, high = d.get(f"{name}_low"), d.get(f"{name}_high")
        return show(name) + (f" ({LEVEL:.0%}: {show(f'{name}_low')} to {show(f'{name}_high')})" if low is not None
                             and high is not None else "")

    out = [("output tokens/s", show("output_tokens_per_s"))]
    out += [(label, ", ".join(f"p{q} {with_interval(f'{key}_p{q}')}" for q in QUANTILES))
            for key, label in LATENCIES.items()]
    out += [("met the SLO", f"{show('slo_attainment')} (TTFT at most {show('slo_ttft_s')}, TPOT at most "
                            f"{show('slo_tpot_s')}): goodput {show('goodput')}"),
            ("requests", f"{show('completed')} completed of {show('sent')} sent"
                         + (f", {show('completion_rate')} from the first end to the last"
                            if d.get("completion_rate") is not None else "")),
            ("arrival rate", f"achieved {show('achieved_rate')}" + (
                f", scheduled {show('scheduled_rate')}, asked {show('asked_rate')}" if d.get("asked_rate") is not None
                else f" at concurrency {show('concurrency')}")),
            ("send lag", f"p99 {show('send_lag_p99')}, max {show('send_lag_max')}"),
            ("run time", show("duration_s"))]
    if d.get("steady_batch") is not None:  # tpulab's engine served
        read = f"at the steady batch {show('steady_batch')}, a step reading {show('step_bytes')} over TPOT p50"
        out.append(("MBU", f"{show('mbu')} {read}, of {show('bandwidth')}" if d.get("mbu") is not None else
                    f"none: no bandwidth ceiling is kept (`tpulab --run roofline` keeps one); {read}"))
    return out
