"""serve on llama.cpp: tpulab's own engine. llama.cpp's server (through xllamacpp) is started in the worker on
127.0.0.1 (a free port), over the decoder decode writes (`tpulab.workloads.shared.gguf_writer`: its random weights
from the seed, in --weight-format), with --slots parallel slots and continuous batching; the client (`client.drive`)
drives it over loopback as it drives your server, and the server is stopped when the load ends.

Each slot holds the model's whole context; the KV cache is float16 (llama.cpp's default, set so that MBU counts it).
Before the load, one short completion (called in the process, not over HTTP) reads the weights from the file, so
that no request's first token waits for the disk: a server you run has read them too.
"""

from __future__ import annotations

import asyncio
import signal
from typing import TYPE_CHECKING, Any

import gguf
import xllamacpp

from tpulab.base import fmt as fmts
from tpulab.base.errors import TpulabError
from tpulab.base.events import Device, Log
from tpulab.machine.fingerprint import physical_cores
from tpulab.workloads.serve import client, load
from tpulab.workloads.shared import gguf_writer
from tpulab.workloads.shared.decoder_shapes import SHAPES, head_dim

if TYPE_CHECKING:
    from pathlib import Path

    from tpulab.backends import Runtime
    from tpulab.workloads.base import Params, Workload
    from tpulab.workloads.running import CancelToken, Sink

CACHE_BYTES = 2  # a float16 KV cache: bytes of one key or value element
ONE_ROW = ("position_embd.weight",)  # a token reads one row of it (the token table is also the output: read whole)


def threads(p: Params) -> tuple[int, str]:
    """llama.cpp's threads, and why: --threads, else the physical cores this process may use but one, which the client
    beside it sends and reads on (llama.cpp's threads spin while they wait: on every core, they starve the client,
    whose late sends and reads then count as the server's latency)."""
    if p["threads"]:
        return int(p["threads"]), "--threads"
    return max(1, physical_cores() - 1), "the physical cores it may use but one, the client's"


def start(path: Path, p: Params, n_threads: int) -> Any:
    """llama.cpp's server over the GGUF file on 127.0.0.1, a free port: --slots slots of the model's context each,
    continuous batching, a float16 cache, quiet. Its SIGINT handler is put back to the worker's (Ctrl+C cancels the
    run, which then stops the server)."""
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.hostnames, params.port = ["127.0.0.1"], 0  # loopback alone, a free port
    params.n_parallel = p["slots"]
    params.n_ctx = SHAPES[p["model"]]["context"] * p["slots"]  # split evenly over the slots
    params.cont_batching = True
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = n_threads
    params.cache_type_k = params.cache_type_v = xllamacpp.ggml_type.GGML_TYPE_F16
    params.fit_params = False  # the context as asked, not fitted to the memory
    params.verbosity = -1
    handler = signal.getsignal(signal.SIGINT)
    try:
        return xllamacpp.Server(params)
    except RuntimeError as e:
        raise TpulabError(f"llama.cpp's server did not start on {path}: {e}") from None
    finally:
        signal.signal(signal.SIGINT, handler)


def token_bytes(path: Path) -> float:
    """What one decode step reads of the weights, as the file stores them: every tensor whole (the tied token table
    is the output's matrix), one row of the position table."""
    tensors = gguf.GGUFReader(path).tensors
    return float(sum(int(t.n_bytes) // int(t.shape[-1]) if t.name in ONE_ROW else int(t.n_bytes) for t in tensors))


def warm(server: Any) -> None:
    """One 2-token completion in the process: the weights read from the file, the first batch's buffers made."""
    result = server.handle_completions({"prompt": list(range(*load.PROMPT_IDS))[:4], "n_predict": 2,
                                        "temperature": 0, "ignore_eos": True})
    if isinstance(result, dict) and isinstance(result.get("error"), dict):
        raise TpulabError(f"llama.cpp: {result['error'].get('message')}")


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    """Say `Started`, write (or find) the weights, start the server, warm it, drive the load at it, stop it."""
    shape = SHAPES[p["model"]]
    n_threads, why = threads(p)
    strategy = (f"llama.cpp's server on 127.0.0.1, {p['slots']} slots, continuous batching, {n_threads} threads: "
                f"{why}")
    device = Device(kind="cpu", name=runtime.place("cpu", 1).name, replicas=1, strategy=strategy)
    first = client.started(w, p, device, runtime.versions())
    path, wrote = gguf_writer.cached({**shape, "seed": p["seed"]}, p["weight_format"])
    first.model = {"model": p["model"], "weight_format": p["weight_format"], "slots": p["slots"],
                   "threads": n_threads, "weight_bytes": token_bytes(path),
                   "kv_bytes_per_position": 2 * shape["layers"] * shape["kv_heads"] * head_dim(shape) * CACHE_BYTES}
    sink(first)
    sink(Log(text=f"{'wrote' if wrote else 'read'} the weights as GGUF ({p['weight_format']}, "
             f"{fmts.bytes_(path.stat().st_size)}): {path}", synthetic=True))
    server = start(path, p, n_threads)
    try:
        warm(server)
        address = f"{server.listening_address}/v1"
        sink(Log(text=f"llama.cpp's server listens on {address}"))
        if not cancel.is_set():
            asyncio.run(client.drive({**p, "endpoint": address}, load.plan(p), sink, cancel))
    finally:
        del server  # its destructor stops the server's loop and joins it
