"""decode on llama.cpp: the same model (`gguf_writer`: the weights from the seed, as a GGUF file in the format
--weight-format asks for), its greedy tokens for each prompt, timed by llama.cpp's own clock.

xllamacpp runs llama.cpp's server in this process: one slot per sequence, so a step decodes the batch's tokens
together (its continuous batching). A completion streamed with `timings_per_token` carries, with each token, the
time its slot spent on the prompt (`prompt_ms`: from the prompt's start until its first token was sampled) and on
the generation so far (`predicted_ms`: from the first token until this one was sampled), each from `ggml_time_us`
in the server's loop: the prefill is the slowest sequence's prompt, and a token's step the slowest sequence's gain,
as llama-bench sets prompt processing and generation apart. tpulab's own clock never times a call here. The prompt
cache is off, so each prefill reads its whole prompt.

Before the timed generation, a short one (2 tokens) loads the weights (the GGUF file is mapped, its pages read at
first touch) and is reported apart, as the other backends' compile. With --verify, llama.cpp's tokens and their
log-probabilities are set against the PyTorch decoder's on the same weights in float32, each position read from one
full forward pass over llama.cpp's tokens (teacher forcing: its greedy tokens are llama.cpp's up to the first
position whose most likely token differs), and judged against the weight format's tolerance (`format_tolerance`).
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import xllamacpp

from tpulab.base import fmt as fmts
from tpulab.base.errors import TpulabError
from tpulab.base.events import Compiled, Log, Step
from tpulab.machine.fingerprint import physical_cores
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.decode import gguf_model
from tpulab.workloads.decode.arithmetic import cache_len, decode_step_bytes, format_tolerance, parameters, weight_format
from tpulab.workloads.decode.figures import (PHASE_DECODE, PHASE_PREFILL, VERIFIED_DIFFER, VERIFIED_LOGPROB,
                                             VERIFIED_SCALE, VERIFIED_TOKENS, VERIFIED_TOLERANCE)
from tpulab.workloads.decode.loop import prompt
from tpulab.workloads.running import CancelToken, Sink, handed, place, started
from tpulab.workloads.shared import gguf_writer
from tpulab.workloads.shared.kernels import BANDWIDTH_KEPT, Kernel, measure_bandwidth

if TYPE_CHECKING:
    from tpulab.backends import Runtime

CACHE_TYPES = {"float32": "GGML_TYPE_F32", "float16": "GGML_TYPE_F16", "bfloat16": "GGML_TYPE_BF16"}  # --dtype's


@dataclass(frozen=True)
class Timed:
    """A completion of each sequence, as llama.cpp's server clocked it (seconds)."""

    prompt: list[float]  # each sequence's prompt: until its first token
    tokens: list[list[float]]  # each sequence's tokens: since its first, cumulative (the first's is 0)

    def prefill(self) -> float:
        return max(self.prompt)

    def steps(self) -> list[float]:
        """Each later token's step: the slowest sequence's time since its previous token."""
        return [max(t[i] - t[i - 1] for t in self.tokens) for i in range(1, len(self.tokens[0]))]


def threads(p: Params) -> tuple[int, str]:
    """The threads llama.cpp runs on, and why: --threads, else the physical cores this process may use (llama.cpp's
    own default is the machine's; a second thread on a core shares its units and its memory bandwidth, and one on a
    core it may not use spins beside the other)."""
    if p["threads"]:
        return int(p["threads"]), "--threads"
    return physical_cores(), "the physical cores it may use"


def serve(path: Any, p: Params, n_threads: int) -> Any:
    """llama.cpp's server over the GGUF file: a slot per sequence, each with the run's cache length, the cache in
    --dtype, no prompt cache, quiet."""
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_parallel = p["batch_size"]
    params.n_ctx = cache_len(p) * p["batch_size"]  # split evenly over the slots
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = n_threads
    params.cache_type_k = params.cache_type_v = getattr(xllamacpp.ggml_type, CACHE_TYPES[p["dtype"]])
    params.cache_prompt, params.cache_ram_mib = False, 0  # each prefill reads its prompt
    params.fit_params = False  # the context as asked, not fitted to the memory
    params.verbosity = -1
    return xllamacpp.Server(params)


def request(prompts: np.ndarray, tokens: int, **more: Any) -> dict[str, Any]:
    """A greedy completion of `tokens` tokens for each prompt (token ids)."""
    return {"prompt": prompts.tolist(), "n_predict": tokens, "temperature": 0, "cache_prompt": False, **more}


def failed(result: Any) -> str | None:
    """The server's error, in its words, or None."""
    if isinstance(result, dict) and isinstance(result.get("error"), dict):
        return str(result["error"].get("message"))
    return None


def complete(server: Any, prompts: np.ndarray, tokens: int, cancel: CancelToken) -> Timed | None:
    """A streamed completion, each token's timings kept (None: cancelled before its end)."""
    batch = len(prompts)
    prompt_ms = [0.0] * batch
    token_ms: list[list[float]] = [[] for _ in range(batch)]
    errors: list[str] = []

    def each(chunk: Any) -> bool:  # in the caller's thread, while the server's loop goes on: kept short
        if (error := failed(chunk)) is not None:
            errors.append(error)
            return True
        timings, choices = (chunk or {}).get("timings"), (chunk or {}).get("choices")
        if timings and choices and choices[0].get("text"):
            i = choices[0]["index"]
            prompt_ms[i] = timings["prompt_ms"]
            token_ms[i].append(timings["predicted_ms"])
        return cancel.is_set()

    server.handle_completions(request(prompts, tokens, stream=True, timings_per_token=True), each)
    if errors:
        raise TpulabError(f"llama.cpp: {errors[0]}")
    if cancel.is_set():
        return None
    short = [i for i, t in enumerate(token_ms) if len(t) != tokens]
    if short:
        raise TpulabError(f"llama.cpp made {len(token_ms[short[0]])} tokens of sequence {short[0]}, not {tokens}")
    return Timed([ms / 1e3 for ms in prompt_ms], [[ms / 1e3 for ms in t] for t in token_ms])


def copier(n_threads: int) -> Callable[[Kernel], Callable[[], Any]]:
    """The bandwidth check's copy (`measure_bandwidth`) on numpy: each of llama.cpp's threads negates its share of
    the array in place (numpy lets go of the GIL inside a ufunc), as the other backends' copies use their threads."""
    pool = ThreadPoolExecutor(n_threads)

    def build(kernel: Kernel) -> Callable[[], Any]:
        x = np.ones(kernel.elements(), np.float32)
        parts = np.array_split(x, n_threads)

        def copy() -> Any:
            list(pool.map(lambda part: np.negative(part, out=part), parts))
            return x

        return copy

    return build


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    """Write (or find) the GGUF file, start the server, say `Started`, check the bandwidth, then generate: a short
    completion first (reported apart), --verify's, then the timed one."""
    fmt = weight_format(p)
    if p["verify"] and importlib.util.find_spec("torch") is None:
        from tpulab.backends import get

        raise TpulabError("--verify sets llama.cpp's tokens against the PyTorch decoder's: install PyTorch with: "
                          f"{get('torch').install}")
    n_threads, why_threads = threads(p)
    placement = place(w, p, runtime)
    placement = replace(placement, strategy=f"llama.cpp on {n_threads} threads: {why_threads}")  # (the weights' format:
    # the run's dtype words, `LLMDecode.dtype_words`)
    first = started(w, p, placement, runtime.versions(), w.describe_data(p), True, decode_step_bytes(p))
    first.model = {"parameters": parameters(p), "weight_format": fmt, "threads": n_threads}
    sink(first)
    given = gguf_model.source(p)
    if given is not None:  # the user's own file, read as it is
        path = given
        sink(Log(text=f"the weights: {path} ({fmt}, {fmts.bytes_(path.stat().st_size)})"))
    else:
        path, wrote = gguf_writer.cached(p, fmt)
        sink(Log(text=f"{'wrote' if wrote else 'read'} the weights as GGUF ({fmt}, {fmts.bytes_(path.stat().st_size)}): "
                 f"{path}", synthetic=True))
    server = serve(path, p, n_threads)
    measure_bandwidth(handed().knows.get(BANDWIDTH_KEPT, ()), placement, copier(n_threads), sink)
    generate(p, server, sink, cancel, fmt)


def generate(p: Params, server: Any, sink: Sink, cancel: CancelToken, fmt: str) -> None:
    """The first completion's prefill and token (reported apart), --verify's, then the timed generation: a `Step`
    for the prefill (token 0) and one per later token, their times llama.cpp's."""
    prompts, batch = prompt(p), p["batch_size"]
    warm = complete(server, prompts, 2, cancel)
    if warm is None:
        return
    sink(Compiled(seconds=warm.prefill(), phase=PHASE_PREFILL, synthetic=True))
    sink(Compiled(seconds=warm.steps()[0], phase=PHASE_DECODE, synthetic=True))
    metrics = verify(p, server, prompts, sink, fmt) if p["verify"] else {}
    timed = None if cancel.is_set() else complete(server, prompts, p["gen_len"], cancel)
    if timed is None:
        return
    sink(Step(step=0, seconds=timed.prefill(), phase=PHASE_PREFILL, examples_per_s=batch / timed.prefill(),
              metrics=metrics, synthetic=True))
    for i, seconds in enumerate(timed.steps(), start=1):
        sink(Step(step=i, seconds=seconds, phase=PHASE_DECODE, examples_per_s=batch / seconds, synthetic=True))


def reference(p: Params, tokens: np.ndarray) -> np.ndarray:
    """The PyTorch decoder's float32 logits [batch, T, vocab] over `tokens`, on `gguf_writer.weights` (PyTorch is
    imported here, for --verify alone)."""
    import torch

    from tpulab.workloads.decode.torch_model import TorchDecoder
    from tpulab.workloads.shared.decoder_config import Config

    model = TorchDecoder(Config.of({**p, "dtype": "float32"})).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in gguf_writer.weights(p).items()})
    with torch.inference_mode():
        return model(torch.from_numpy(tokens))[0].numpy()


def verify(p: Params, server: Any, prompts: np.ndarray, sink: Sink, fmt: str) -> dict[str, float]:
    """llama.cpp's greedy tokens and their log-probabilities against the PyTorch decoder's at each position, said with
    a verdict and kept (the timed prefill's metrics): the run fails where a chosen token's log-probability differs by
    more than the format's tolerance (`format_tolerance`, a fraction of the largest |logit|), or a token differs from
    the decoder's by more than a near tie (its logit within that bound of the decoder's most likely one)."""
    result = server.handle_completions(request(prompts, p["gen_len"], n_probs=1))
    if (error := failed(result)) is not None:
        raise TpulabError(f"llama.cpp: {error}")
    chosen = sorted(result["choices"], key=lambda c: c["index"])
    ids = np.array([[t["id"] for t in c["logprobs"]["content"]] for c in chosen], np.int64)
    theirs = np.array([[t["logprob"] for t in c["logprobs"]["content"]] for c in chosen], np.float64)
    n, start = ids.shape[1], p["prompt_len"] - 1
    logits = reference(p, np.concatenate([prompts, ids[:, :-1]], axis=1).astype(np.int64))[:, start:]
    logits = logits.astype(np.float64)
    lse = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    picked = np.take_along_axis(logits, ids[..., None], -1)[..., 0]
    scale = float(np.abs(logits).max())
    apart = float(np.abs(picked - lse - theirs).max())  # the chosen tokens' log-probabilities
    gap = logits.max(-1) - picked  # how far below the decoder's most likely token llama.cpp's choice is
    tolerance, whose = format_tolerance(fmt, p["dtype"])
    bound = tolerance * scale
    same = [int(np.argmax(row > 0)) if (row > 0).any() else n for row in gap]  # tokens before each first difference
    differ, beyond = int((gap > 0).sum()), int((gap > bound).sum())
    if min(same) == n:
        said = f"llama.cpp's greedy tokens are the PyTorch decoder's: all {n} of each of {len(ids)} sequence(s)"
    else:
        s = int(np.argmin(same))
        ties = f"{beyond} of them by more than a near tie" if beyond else "each by a near tie (within the tolerance)"
        said = (f"llama.cpp's greedy tokens leave the PyTorch decoder's at token {same[s]} of {n} (sequence {s}); "
                f"{differ} of {gap.size} differ, {ties}")
    verdict = "ABOVE" if apart > bound or beyond else "within"
    line = (f"verify: {fmt} weights, {p['dtype']} cache, against the PyTorch decoder in float32 on the same weights: "
            f"{said}; the chosen tokens' log-probabilities differ by at most {apart:.3g} ({apart / scale:.2g} of the "
            f"largest logit {scale:.3g}), {verdict} the {whose} tolerance {tolerance:g}")
    sink(Log(text=line, synthetic=True))
    if verdict != "within":
        raise TpulabError(line)
    return {VERIFIED_LOGPROB: apart, VERIFIED_SCALE: scale, VERIFIED_TOLERANCE: tolerance, VERIFIED_DIFFER: float(differ),
            VERIFIED_TOKENS: float(gap.size)}
