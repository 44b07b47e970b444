"""`serve`: how many users a server takes (declaration).

Requests arrive at a stated rate (Poisson, or gamma with a burstiness factor) or at a fixed concurrency, each
streamed from an OpenAI-compatible server at --endpoint (llama-server, vLLM, Ollama: yours, started by you), with
prompt and output lengths fixed or drawn, seeded. Its figures are the request throughput, output tokens/s, TTFT,
TPOT, ITL and end to end at p50, p90 and p99 with their intervals, the requests within an SLO and the goodput, and
the arrival rate the server saw (`figures`).

The client needs no framework: it runs in the worker of the lightest backend installed (`backend_for`), whose
framework it never calls.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Iterable, Mapping
from urllib.parse import urlsplit

from tpulab.base.events import PHASE_PREDICT, Started, Step
from tpulab.base.figures import FigureValue
from tpulab.workloads.base import BACKEND, Limits, ParamError, Params, ParamSpec, RunnerAt, SummaryPart, Workload
from tpulab.backends import BackendError, choose
from tpulab.workloads.serve import figures as serve_figures

if TYPE_CHECKING:
    from tpulab.base.ceilings import MeasuredCeilings, Sourced
    from tpulab.machine.detect import RuntimeReport

LOOPBACK = "http://127.0.0.1:8080/v1"  # llama-server's own address: the default, and every preset's

PARAMS = (
    ParamSpec("endpoint", str, LOOPBACK, "your OpenAI-compatible server's API (llama-server, vLLM, Ollama): the one "
              "address contacted; no redirect is followed", form="a URL like http://127.0.0.1:8080/v1", tunes=False,
              axis=False),
    ParamSpec("served_model", str, "", "the model name the server serves it under (\"\": none sent, for a server "
              "of one model)", form="a name", tunes=False, axis=False),
    ParamSpec("api", str, "completions", "completions: /completions with token-id prompts of exact length; chat: "
              "/chat/completions with a prompt of that many words", options=("completions", "chat"), tunes=False),
    ParamSpec("rate", float, 1.0, "requests a second, arriving at random (Poisson at --burstiness 1)", 0.01, 1000.0,
              unit="requests/s"),
    ParamSpec("burstiness", float, 1.0, "the arrivals' gamma shape: 1 Poisson, below 1 burstier, above 1 more even",
              0.01, 100.0),
    ParamSpec("concurrency", int, 0, "requests in flight at once, each sent as one ends, instead of --rate (0: by "
              "--rate)", 0, 1024),
    ParamSpec("requests", int, 100, "requests sent at most", 1, 100000),
    ParamSpec("duration", float, 60.0, "seconds in which requests are sent at most (those in flight then finish)",
              0.1, 3600.0, unit="s"),
    ParamSpec("prompt_tokens", int, 128, "tokens of each prompt (the mean, with --length-spread)", 1, 131072,
              unit="tokens"),
    ParamSpec("output_tokens", int, 128, "tokens each request asks for (the mean, with --length-spread)", 1, 131072,
              unit="tokens"),
    ParamSpec("length_spread", float, 0.0, "each length drawn uniformly within its mean x (1 +- this); 0: fixed",
              0.0, 1.0),
    ParamSpec("slo_ttft", float, 2.0, "a request meets the SLO with its time to first token at most this", 0.001,
              3600.0, unit="s"),
    ParamSpec("slo_tpot", float, 100.0, "... and its time per output token at most this", 0.001, 3.6e6, unit="ms"),
    ParamSpec("timeout", float, 60.0, "seconds the server may send nothing before the run fails", 0.1, 3600.0,
              unit="s", tunes=False),
    ParamSpec("seed", int, 0, "seed of the arrivals, the lengths and the prompts", 0, 2**31 - 1, advanced=True,
              tunes=False),
    BACKEND,
)
CLIENT = RunnerAt("tpulab.workloads.serve.client:run")


def loopback(url: str) -> bool:
    """Whether the address's host is this machine (127.0.0.0/8, ::1, localhost)."""
    host = urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(url: str) -> None:
    """An http(s) URL with a host: --endpoint is the user's own address, so any host given there is contacted."""
    parts = urlsplit(url)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if not port_ok or parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ParamError("endpoint", f"--endpoint must be {PARAMS[0].form}, an http(s) URL of a server's API (got "
                         f"{url!r})")


class Serve(Workload):
    name = "serve"
    title = "LLM serving (requests, SLOs)"
    summary = ("Requests at a stated rate or concurrency, streamed from your OpenAI-compatible server: request "
               "throughput, TTFT, TPOT and ITL percentiles with their intervals, and the share within an SLO.")
    params = PARAMS
    shared = ()  # no profile, no compile: the work is the server's
    presets = {"smoke": {"rate": 20.0, "requests": 16, "duration": 10.0, "prompt_tokens": 16, "output_tokens": 8,
                         "timeout": 10.0}}
    unit = "request"
    throughput_unit = "requests/s"
    headlines = ("figures.request_throughput", "figures.ttft_p99", "figures.tpot_p99", "figures.slo_attainment")
    figures = serve_figures.FIGURES
    phases = (serve_figures.PHASE_REQUEST,)
    synthetic_data = "random token prompts"
    flop_rates = False
    # The client imports no framework: every backend's worker runs it, the lightest import first (`backend_for`).
    runners = {"llamacpp": CLIENT, "jax": CLIENT, "torch": CLIENT, "tensorflow": CLIENT}

    def flops_per_step(self, p: Params) -> None:
        return None  # the server's work, unknown here

    def total_steps(self, p: Params) -> int:
        return int(p["requests"])

    def batch_size(self, p: Params) -> int:
        return 1

    def replicas(self, p: Params) -> int:
        return 1

    def processes(self, p: Params) -> int:
        return 1

    def configuration(self, p: Params) -> dict[str, Any]:
        return {"endpoint": p.get("endpoint"), "served_model": p.get("served_model"), "api": p.get("api")}

    def check(self, p: Params, limits: Limits) -> None:
        """The endpoint's form; --concurrency replaces --rate and --burstiness, never beside them."""
        check_endpoint(p["endpoint"])
        if p["concurrency"]:
            for name in ("rate", "burstiness"):
                if p[name] != self.spec(name).default:
                    raise ParamError(name, f"--concurrency {p['concurrency']} sends each request as one ends: it "
                                     f"takes no {self.spec(name).flag} (got {p[name]:g}); give one or the other")

    def backend_for(self, p: Params, report: RuntimeReport) -> tuple[str, str]:
        """--backend as asked; auto: the first installed of `runners` (the lightest import), whose framework the
        client never calls."""
        if p.get(BACKEND.name, "auto") != "auto":
            return choose(p[BACKEND.name], report)
        for name in self.runners:
            try:
                return choose(name, report)[0], ("your server serves: the client needs no framework, and runs in "
                                                  "the worker of the lightest backend installed")
            except BackendError:
                continue
        return choose("auto", report)

    def describe_data(self, p: Params) -> str:
        load = (f"at concurrency {p['concurrency']}" if p["concurrency"] else
                f"at {p['rate']:g} requests/s (gamma shape {p['burstiness']:g})")
        spread = f" +-{p['length_spread']:.0%}" if p["length_spread"] else ""
        where = "" if loopback(p["endpoint"]) else " (not this machine)"
        return (f"up to {p['requests']} random prompts of {p['prompt_tokens']}{spread} tokens asking "
                f"{p['output_tokens']}{spread} tokens, {load}, to {p['endpoint']}{where} (seed {p['seed']})")

    def summary_part(self, steps: list[Step], started: Started, ceilings: MeasuredCeilings, p: Params,
                     peak: Sourced | None) -> SummaryPart:
        return serve_figures.summary_part(steps, p)

    def timed_seconds(self, steps: Iterable[Step], phase: str = "") -> list[float]:
        """The requests' end-to-end times (no inference phase apart: every request is one)."""
        return [] if phase == PHASE_PREDICT else [s.seconds for s in serve_figures.requests(list(steps))]

    def step_cells(self, step: Step, steps: list[Step]) -> list[tuple[str, str]] | None:
        """Nothing of the load's totals (the summary has them); a request's line as every run's step line."""
        return [] if step.phase == serve_figures.PHASE_TOTALS else None

    def figure_rows(self, values: Mapping[str, FigureValue]) -> list[tuple[str, str]]:
        return serve_figures.rows(values)


SERVE = Serve()
