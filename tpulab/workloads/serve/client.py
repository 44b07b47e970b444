"""The serve runner against a server at --endpoint: an OpenAI-compatible API (llama-server, vLLM, Ollama), each
request streamed (server-sent events), timed by this process's monotonic clock as each chunk arrives.

No framework runs here: against your server the worker's backend is none (`tpulab.backends.server`); against
tpulab's engine (`tpulab.workloads.serve.llamacpp`) the same client drives llama.cpp's server over loopback.
Requests are sent at their due times counted from the run's start (absolute times: a late send never delays the
ones after it), or, with --concurrency, each as one ends. Only the address given is contacted: no proxy from the
environment, no redirect followed, no other path than the API's completions. A server that refuses, stalls past
--timeout, ends a stream before its end or streams what is not the API's fails the run in one line; the requests
that completed before are kept (each a `Step`), with the load's totals (`PHASE_TOTALS`). Meanwhile the load so far
is said every half second (`live`: the requests in flight, the latencies' quantiles so far).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import aiohttp

from tpulab.base.errors import TpulabError
from tpulab.base.events import Device, Started, Step
from tpulab.machine.detect import detect
from tpulab.workloads.serve import live, load
from tpulab.workloads.serve.figures import PHASE_REQUEST, PHASE_TOTALS, totals_metrics

if TYPE_CHECKING:
    from tpulab.backends import Runtime
    from tpulab.workloads.base import Params, Workload
    from tpulab.workloads.running import CancelToken, Sink


class ServerError(TpulabError):
    """What the server did wrong, in one line: the run fails with it, its completed requests kept."""


def body(p: Params, request: load.Request) -> dict[str, Any]:
    """The streamed request: exactly its output tokens (the end-of-text token ignored, where the server allows),
    greedy, the usage asked for in the last chunk (the server's own token counts)."""
    common = {"max_tokens": request.output_tokens, "ignore_eos": True, "temperature": 0, "stream": True,
              "stream_options": {"include_usage": True}, **({"model": p["served_model"]} if p["served_model"] else {})}
    if p["api"] == "chat":
        return {**common, "messages": [{"role": "user", "content": load.prompt_text(request, p["seed"])}]}
    return {**common, "prompt": load.prompt(request, p["seed"])}


def text_of(chunk: Any, chat: bool) -> str | None:
    """The text a chunk streams ('' for none: a usage chunk), or None where it is not the API's."""
    if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
        return None
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    first = choices[0]
    part = (first.get("delta") or {}).get("content") if chat and isinstance(first, dict) else \
        first.get("text") if isinstance(first, dict) else None
    return part if isinstance(part, str) else "" if part is None and isinstance(first, dict) else None


class Timed:
    """One request's clock: when it was due and sent, and when each chunk with text arrived."""

    def __init__(self, request: load.Request, due: float, sent: float) -> None:
        self.request, self.due, self.sent = request, due, sent
        self.chunks: list[float] = []
        self.usage: dict[str, Any] = {}

    def step(self, end: float) -> Step:
        tokens = int(self.usage.get("completion_tokens") or len(self.chunks))
        ttft = self.chunks[0] - self.sent
        e2e = end - self.sent
        metrics = {"ttft_s": ttft, "e2e_s": e2e, "output_tokens": float(tokens), "due_s": self.due,
                   "sent_s": self.sent,
                   "prompt_tokens": float(self.usage.get("prompt_tokens") or self.request.prompt_tokens)}
        if tokens > 1:
            metrics["tpot_s"] = (e2e - ttft) / (tokens - 1)
        return Step(step=self.request.index, seconds=e2e, phase=PHASE_REQUEST, metrics=metrics)


async def stream(session: aiohttp.ClientSession, url: str, p: Params, timed: Timed, clock: Any) -> None:
    """Send one request and read its stream to its `[DONE]`, keeping each chunk's arrival."""
    i, chat = timed.request.index, p["api"] == "chat"
    async with session.post(url, json=body(p, timed.request), allow_redirects=False) as r:
        if 300 <= r.status < 400:
            raise ServerError(f"{p['endpoint']} answered request {i} with a redirect to "
                              f"{r.headers.get('Location', '?')!r}: tpulab contacts only the address given (--endpoint)")
        if r.status != 200:
            said = " ".join((await r.content.read(200)).decode("utf-8", "replace").split())
            raise ServerError(f"{p['endpoint']} answered request {i} with HTTP {r.status}: {said or r.reason}")
        async for raw in r.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line or line.startswith(":") or line.split(":", 1)[0] in ("event", "id", "retry"):
                continue
            data = line[5:].strip() if line.startswith("data:") else None
            if data == "[DONE]":
                if not timed.chunks:
                    raise ServerError(f"{p['endpoint']} ended request {i} with no token")
                return
            try:
                chunk = json.loads(data) if data is not None else None
            except ValueError:
                chunk = None
            if isinstance(chunk, dict) and chunk.get("error"):
                raise ServerError(f"{p['endpoint']} failed request {i}: {' '.join(str(chunk['error']).split())[:200]}")
            part = text_of(chunk, chat)
            if part is None:
                raise ServerError(f"{p['endpoint']} streamed what is not the {p['api']} API's server-sent events in "
                                  f"request {i}: {' '.join(line.split())[:80]!r}")
            if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                timed.usage = chunk["usage"]
            if part:
                timed.chunks.append(clock())
    raise ServerError(f"{p['endpoint']} stopped request {i} mid-stream, after {len(timed.chunks)} tokens and "
                      "before its [DONE]")


def failure(e: BaseException, p: Params) -> ServerError:
    """A client error in one line, naming the address."""
    if isinstance(e, ServerError):
        return e
    if isinstance(e, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return ServerError(f"{p['endpoint']} sent nothing for {p['timeout']:g} s (--timeout)")
    if isinstance(e, aiohttp.ClientConnectorError):
        return ServerError(f"could not reach {p['endpoint']}: {' '.join(str(e.os_error).split())}")
    if isinstance(e, aiohttp.ClientPayloadError):
        return ServerError(f"{p['endpoint']} stopped a request mid-stream: {' '.join(str(e).split())[:160]}")
    return ServerError(f"{p['endpoint']}: {type(e).__name__}: {' '.join(str(e).split())[:200]}")


async def drive(p: Params, plan: list[load.Request], sink: Sink, cancel: CancelToken) -> None:
    """Send the plan's requests at their due times (or --concurrency at once) until they are all sent or --duration
    has passed; every completed one said as it ends; the load's totals said last, also when the server failed."""
    url = p["endpoint"].rstrip("/") + ("/chat/completions" if p["api"] == "chat" else "/completions")
    loop = asyncio.get_running_loop()
    start = loop.time()

    def clock() -> float:
        return loop.time() - start

    timed: list[Timed] = []
    gaps: list[float] = []
    failed: list[BaseException] = []

    tally = live.Tally()

    async def one(session: aiohttp.ClientSession, request: load.Request, due: float) -> None:
        t = Timed(request, due, clock())
        timed.append(t)
        tally.sent(t.sent)
        completed: Step | None = None
        try:
            await stream(session, url, p, t, clock)
        except (ServerError, aiohttp.ClientError, asyncio.TimeoutError, OSError, UnicodeError) as e:  # the first ends the run
            failed.append(e)
        else:
            completed = t.step(clock())
            sink(completed)
            gaps.extend(b - a for a, b in zip(t.chunks, t.chunks[1:]))
        finally:
            tally.ended(completed)  # completed, failed or cancelled: no longer in flight

    async def ticks() -> None:
        """The load so far, every `live.EVERY_S`: what a front end shows while the requests stream."""
        while True:
            await asyncio.sleep(live.EVERY_S)
            sink(tally.step(clock()))

    def going() -> bool:
        return not failed and not cancel.is_set() and clock() < p["duration"]

    timeout = aiohttp.ClientTimeout(total=None, sock_connect=p["timeout"], sock_read=p["timeout"])
    # A connection of its own for each request: a server closes a kept-alive one when it will (llama.cpp's after 5
    # requests), and a request written into one it has just closed fails ("Can not write request body") where the
    # server did nothing wrong. A loopback connect costs a fraction of a millisecond, in the request's time.
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False,
                                     connector=aiohttp.TCPConnector(limit=0, force_close=True)) as session:
        ticker = asyncio.ensure_future(ticks())
        tasks: list[asyncio.Task[None]] = []
        if p["concurrency"]:
            queue = iter(plan)

            async def slot() -> None:
                for request in queue:
                    if not going():
                        return
                    await one(session, request, clock())

            tasks = [asyncio.ensure_future(slot()) for _ in range(int(p["concurrency"]))]
        else:
            for request in plan:
                due = float(request.at or 0.0)
                if due >= p["duration"]:
                    break
                wait = due - clock()
                while wait > 0 and going():  # to its due time from the start: never a sleep per gap, which drifts
                    await asyncio.sleep(min(wait, 0.05))
                    wait = due - clock()
                if not going():
                    break
                tasks.append(asyncio.ensure_future(one(session, request, due)))
        while tasks and not all(t.done() for t in tasks):
            if failed or cancel.is_set():
                for t in tasks:
                    t.cancel()
            await asyncio.wait(tasks, timeout=0.05)
        ticker.cancel()
    sink(tally.step(clock()))  # the last word of the load as it went: none in flight
    sink(Step(step=len(timed), seconds=clock(), steps=0, phase=PHASE_TOTALS,
              metrics=totals_metrics([(t.due, t.sent) for t in timed], gaps, clock())))
    if failed:
        raise failure(failed[0], p)


def started(w: Workload, p: Params, device: Device, versions: dict[str, str]) -> Started:
    """A serve run's `Started`: no FLOPs are counted (the server's work), a request is its step."""
    return Started(workload=w.name, device=device, dtype="", flops_per_step=None, steps_total=w.total_steps(p),
                   per_replica_batch=1, versions=versions, dataset=w.describe_data(p), synthetic=True)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    """The runner against your server (--endpoint): `Started` with this machine's CPU as the client's device and
    the address as what serves, then the load driven."""
    device = Device(kind="cpu", name=detect().cpu.model, replicas=1, strategy=f"your server at {p['endpoint']}")
    sink(started(w, p, device, runtime.versions()))
    asyncio.run(drive(p, load.plan(p), sink, cancel))
