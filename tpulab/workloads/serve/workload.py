"""`serve`: how many users a server takes (declaration).

Requests arrive at a stated rate (Poisson, or gamma with a burstiness factor) or at a fixed concurrency, each
streamed from an OpenAI-compatible server, with prompt and output lengths fixed or drawn, seeded: tpulab's engine,
llama.cpp's server started on 127.0.0.1 over decode's model (`llamacpp`), or yours at --endpoint (llama-server, vLLM,
Ollama: started by you). Its figures are the request throughput, output tokens/s, TTFT, TPOT, ITL and end to end
at p50, p90 and p99 with their intervals, the requests within an SLO and the goodput, the arrival rate the server
saw, and on tpulab's engine MBU at the steady batch (`figures`).

Against your server no framework of tpulab's does any work, so none is named: the run's backend is `server`
("your server", `tpulab.backends.server`), whose worker loads no framework, and its strategy is the address. A
backend that ran the client beside an unused framework would name that framework in the record, its comparisons and
its card: a claim of work it did not do.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Iterable, Mapping
from urllib.parse import urlsplit

from tpulab.base.events import PHASE_PREDICT, Started, Step
from tpulab.base.figures import FigureValue
from tpulab.workloads.base import BACKEND, DEVICE, Limits, ParamError, Params, ParamSpec, RunnerAt, SummaryPart, Workload
from tpulab.backends import BackendError, choose, get
from tpulab.workloads.serve.lengths import longest
from tpulab.workloads.serve import figures as serve_figures
from tpulab.workloads.serve import live
from tpulab.workloads.shared.decoder_shapes import SHAPES

if TYPE_CHECKING:
    from tpulab.base.ceilings import MeasuredCeilings, Sourced
    from tpulab.machine.detect import RuntimeReport

ENGINE_TAKES = ("model", "weight_format", "slots", "threads")  # what sizes tpulab's engine, not your server
WEIGHT_FORMATS = ("f32", "f16", "bf16", "q8_0", "q4_0")  # as decode writes them (`gguf_writer`)

PARAMS = (
    ParamSpec("endpoint", str, "", "your OpenAI-compatible server's API (llama-server, vLLM, Ollama): the one "
              "address contacted, no redirect followed; \"\": tpulab's engine, llama.cpp's server started on "
              "127.0.0.1", form="a URL like http://127.0.0.1:8080/v1", tunes=False, axis=False),
    ParamSpec("model", str, "auto", "the model tpulab's engine serves: one of decode's decoders (random weights) by "
              "its preset's name; auto: the smallest whose context holds the longest request",
              options=("auto", *SHAPES), tunes=False, backends=lambda: _taking("model"),
              why_not=lambda backend: _yours("--model")),
    ParamSpec("weight_format", str, "f32", "the engine's weights' format (GGUF): f32, f16, bf16, or quantized: q8_0 "
              "(8.5 bits a weight) or q4_0 (4.5 bits)", options=WEIGHT_FORMATS, term="precision",
              backends=lambda: _taking("weight_format"), why_not=lambda backend: _yours("--weight-format")),
    ParamSpec("slots", int, 4, "requests the engine decodes together at most (llama.cpp's parallel slots, "
              "continuously batched); the others wait", 1, 256, backends=lambda: _taking("slots"),
              why_not=lambda backend: _yours("--slots")),
    ParamSpec("threads", int, 0, "CPU threads the engine runs on (0: the machine's physical cores but one, the client's)", 0, 1024,
              advanced=True, backends=lambda: _taking("threads"), why_not=lambda backend: _yours("--threads")),
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
    DEVICE,  # the engine's (llama.cpp's: the CPU); against your server, the client's
    BACKEND,
)
CLIENT = RunnerAt("tpulab.workloads.serve.client:run")  # your server's: the client alone
ENGINE = RunnerAt("tpulab.workloads.serve.llamacpp:run", takes=ENGINE_TAKES)  # llama.cpp's server, driven by the client


def _taking(param: str) -> tuple[str, ...]:
    """The backends whose serve runner takes `param` (by the runners' declaration: no name is compared here)."""
    return tuple(name for name, r in Serve.runners.items() if isinstance(r, RunnerAt) and param in r.takes)


def _yours(flag: str) -> str:
    return f"{flag} sizes tpulab's engine; your server (--endpoint) has its own: leave out {flag}, or --endpoint"


def model_for(p: Params) -> tuple[str, str]:
    """The model the engine serves, and why: --model, or the smallest of decode's decoders whose context holds the
    longest request (`ParamError` where none does, or the one asked does not)."""
    need = longest(p)
    if p["model"] != "auto":
        if need > SHAPES[p["model"]]["context"]:
            raise ParamError("prompt_tokens", f"--prompt-tokens plus --output-tokens (the longest with --length-spread: "
                             f"{need}) must fit --model {p['model']}'s context, {SHAPES[p['model']]['context']} tokens")
        return p["model"], "you chose it"
    fits = sorted((s["context"], name) for name, s in SHAPES.items() if s["context"] >= need)
    if not fits:
        raise ParamError("prompt_tokens", f"--prompt-tokens plus --output-tokens (the longest with --length-spread: "
                         f"{need}) must fit the largest model's context, {max(s['context'] for s in SHAPES.values())} "
                         "tokens")
    return fits[0][1], f"auto: the smallest whose context ({fits[0][0]} tokens) holds the longest request ({need})"


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
    summary = ("Requests at a stated rate or concurrency, streamed from llama.cpp's server (started by tpulab) or "
               "your OpenAI-compatible server: request throughput, TTFT, TPOT and ITL percentiles with their "
               "intervals, the share within an SLO, and MBU at the steady batch.")
    params = PARAMS
    shared = ()  # no profile, no compile: the work is the server's
    presets = {"smoke": {"rate": 20.0, "requests": 16, "duration": 10.0, "prompt_tokens": 16, "output_tokens": 8,
                         "timeout": 10.0}}  # on the engine: the smoke decoder (`model_for`), a Llama block
    unit = "request"
    throughput_unit = "requests/s"
    headlines = ("figures.request_throughput", "figures.ttft_p99", "figures.tpot_p99", "figures.slo_attainment")
    figures = serve_figures.FIGURES
    phases = (serve_figures.PHASE_REQUEST,)
    charts = live.CHARTS  # the load as it goes: requests in flight, TTFT and TPOT at p50 and p99 so far
    capacity = serve_figures.CAPACITY
    synthetic_data = "random token prompts"
    flop_rates = False
    # tpulab's engine on llama.cpp; your server's client on no framework (`tpulab.backends.server`)
    runners = {"llamacpp": ENGINE, "server": CLIENT}

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
        if p.get("endpoint"):
            return {"endpoint": p.get("endpoint"), "served_model": p.get("served_model"), "api": p.get("api")}
        return {"model": p.get("model"), "weight_format": p.get("weight_format"), "slots": p.get("slots"),
                "api": p.get("api")}

    def check(self, p: Params, limits: Limits) -> None:
        """The endpoint's form, or what the engine can serve; --concurrency replaces --rate and --burstiness, never
        beside them."""
        if p["endpoint"]:
            check_endpoint(p["endpoint"])
        else:
            model_for(p)
            if p["api"] == "chat":
                raise ParamError("api", "--api chat: tpulab's engine serves a decoder with no chat template; use --api "
                                 "completions, or --endpoint with your server")
        if p["concurrency"]:
            for name in ("rate", "burstiness"):
                if p[name] != self.spec(name).default:
                    raise ParamError(name, f"--concurrency {p['concurrency']} sends each request as one ends: it "
                                     f"takes no {self.spec(name).flag} (got {p[name]:g}); give one or the other")

    def backend_for(self, p: Params, report: RuntimeReport) -> tuple[str, str]:
        """With --endpoint, the client's (no framework: your server serves); without, tpulab's engine: --backend as
        asked, auto the first installed."""
        asked = p.get(BACKEND.name, "auto")
        yours = [name for name, r in self.runners.items() if r is CLIENT]
        engines = [name for name in self.runners if name not in yours]
        if p["endpoint"]:
            if asked not in ("auto", *yours):
                raise ParamError("endpoint", f"--endpoint {p['endpoint']}: your server serves, not --backend {asked}: "
                                 "leave out --backend, or --endpoint for tpulab's engine")
            return choose(yours[0], report)[0], f"your server at {p['endpoint']} serves (--endpoint)"
        if asked in yours:
            raise ParamError("endpoint", f"--backend {asked} sends the requests to your server: give its address "
                             "(--endpoint URL)")
        if asked != "auto":
            return choose(asked, report)
        for name in engines:
            try:
                return choose(name, report)[0], f"tpulab's engine: {get(name).title}'s server (--endpoint for yours)"
            except BackendError:
                continue
        first = get(engines[0])
        raise BackendError(f"serve starts {first.title}'s server, which is not installed; install it with: "
                           f"{first.install} (or give your server's address: --endpoint URL)")

    def resolve_auto(self, p: Params, device: str, report: RuntimeReport) -> tuple[Params, dict[str, str]]:
        """The engine's model (`model_for`); nothing with --endpoint."""
        if p["endpoint"]:
            return p, {}
        model, why = model_for(p)
        return {**p, "model": model}, {"model": why}

    def describe_data(self, p: Params) -> str:
        load = (f"at concurrency {p['concurrency']}" if p["concurrency"] else
                f"at {p['rate']:g} requests/s (gamma shape {p['burstiness']:g})")
        spread = f" +-{p['length_spread']:.0%}" if p["length_spread"] else ""
        where = (f"{p['endpoint']}{'' if loopback(p['endpoint']) else ' (not this machine)'}" if p["endpoint"] else
                 f"tpulab's engine ({p['model']} decoder, random {p['weight_format']} weights, {p['slots']} slots)")
        return (f"up to {p['requests']} random prompts of {p['prompt_tokens']}{spread} tokens asking "
                f"{p['output_tokens']}{spread} tokens, {load}, to {where} (seed {p['seed']})")

    def summary_part(self, steps: list[Step], started: Started, ceilings: MeasuredCeilings, p: Params,
                     peak: Sourced | None) -> SummaryPart:
        return serve_figures.summary_part(steps, p, started.model, ceilings.memory(started.device))

    def timed_seconds(self, steps: Iterable[Step], phase: str = "") -> list[float]:
        """The requests' end-to-end times (no inference phase apart: every request is one)."""
        return [] if phase == PHASE_PREDICT else [s.seconds for s in serve_figures.requests(list(steps))]

    def seconds_left(self, p: Params, steps: list[Step]) -> float | None:
        return live.seconds_left(p, steps)

    def step_cells(self, step: Step, steps: list[Step]) -> list[tuple[str, str]] | None:
        """The load so far, every half second (`live.cells`); nothing of each request (hundreds a second) or of the
        totals (the summary has them)."""
        return live.cells(step) if step.phase == live.PHASE_LOAD else []

    def figure_rows(self, values: Mapping[str, FigureValue]) -> list[tuple[str, str]]:
        return serve_figures.rows(values)


SERVE = Serve()
