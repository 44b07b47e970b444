"""A decode run's loop, the same on every backend: given its compiled prefill and one-token step, the
compile calls, `--verify`, the timed tokens and the profiled ones (numpy only; the runners bring the
framework: `decode_jax.py`, `decode_tf.py`).

Each call returns the next tokens ([batch, 1], left on the device to feed the next step) and their
logits; the clock stops only once the tokens reached the host, so only completed work is timed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tpulab.backends import Placement, Runtime
from tpulab.base.errors import TpulabError
from tpulab.base.events import Compiled, Log, Step
from tpulab.workloads.base import Workload
from tpulab.workloads.decode.arithmetic import decode_step_bytes, tolerance
from tpulab.workloads.decode.figures import PHASE_DECODE, PHASE_PREFILL, VERIFIED, VERIFIED_SCALE, VERIFIED_TOLERANCE
from tpulab.workloads.shared.kernels import BANDWIDTH_KEPT, measure_bandwidth
from tpulab.workloads.running import CancelToken, Params, Programs, Sink, handed, place, profile_calls, started

Call = tuple[Any, Any]  # (next tokens [batch, 1] on the device, their logits [batch, vocab])


@dataclass(frozen=True)
class Model:
    """A backend's compiled calls over its cache (the runner keeps the weights and the cache)."""

    prefill: Callable[[np.ndarray], Call]  # the prompt [batch, prompt_len] -> the first generated tokens
    step: Callable[[Any, int], Call]  # (tokens [batch, 1], their position) -> the next
    forward: Callable[[np.ndarray], Any]  # tokens [batch, T] -> logits [batch, T, vocab], without a cache
    programs: Programs | None = None  # the compiled step, for --profile's FLOPs and bytes


def prompt(p: Params) -> np.ndarray:
    """Random prompt tokens, from the seed."""
    rng = np.random.default_rng(p["seed"])
    return rng.integers(0, p["vocab"], size=(p["batch_size"], p["prompt_len"]), dtype=np.int32)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime,
        build: Callable[[Params, Placement], tuple[int, Model]], copy: Callable[[int, Any], Any]) -> None:
    """A decode run on a backend: place, build (`build`: the model's parameter count and its calls),
    say `Started`, measure the bandwidth where none is kept, else check the kept one (`copy`: the backend's
    roofline builder), then `generate`."""
    placement = place(w, p, runtime)
    count, model = build(p, placement)
    first = started(w, p, placement, runtime.versions(), w.describe_data(p), True, decode_step_bytes(p))
    first.model = {"parameters": count}
    sink(first)
    kept = handed().knows.get(BANDWIDTH_KEPT, ())
    measure_bandwidth(kept, placement, copy(p["seed"], placement.devices[0]), sink)
    generate(p, model, sink, cancel, runtime)


def generate(p: Params, model: Model, sink: Sink, cancel: CancelToken, runtime: Runtime,
             clock: Callable[[], float] = time.perf_counter) -> None:
    """Compile (the first prefill and step, reported apart), verify if asked, then the timed
    generation: a `Step` for the prefill (token 0) and one per later token; then the profiled steps."""
    tokens, batch, start = prompt(p), p["batch_size"], p["prompt_len"]

    def timed(call: Callable[..., Call], *args: Any) -> tuple[Any, float]:
        t0 = clock()
        nxt, _ = call(*args)
        np.asarray(nxt)  # the host copy waits for the step's work
        return nxt, clock() - t0

    nxt, seconds = timed(model.prefill, tokens)
    sink(Compiled(seconds=seconds, phase=PHASE_PREFILL, synthetic=True))
    _, seconds = timed(model.step, nxt, start)
    sink(Compiled(seconds=seconds, phase=PHASE_DECODE, synthetic=True))
    metrics = verify(p, model, tokens, sink) if p["verify"] and not cancel.is_set() else {}
    if cancel.is_set():
        return
    nxt, seconds = timed(model.prefill, tokens)
    sink(Step(step=0, seconds=seconds, phase=PHASE_PREFILL, examples_per_s=batch / seconds, metrics=metrics,
              synthetic=True))
    for i in range(1, p["gen_len"]):
        if cancel.is_set():
            return
        nxt, seconds = timed(model.step, nxt, start + i - 1)
        sink(Step(step=i, seconds=seconds, phase=PHASE_DECODE, examples_per_s=batch / seconds, synthetic=True))
    last = start + p["gen_len"] - 2  # the profiled steps make the last token again, at the last step's position
    profile_calls(p, sink, cancel, runtime, lambda: np.asarray(model.step(nxt, last)[0]), model.programs)


def verify(p: Params, model: Model, tokens: np.ndarray, sink: Sink) -> dict[str, float]:
    """Generate with the cache, then run the full forward pass over the same tokens: the largest
    |difference| of their logits, said, and kept with its bound (the timed prefill's metrics); above the
    dtype's tolerance (a fraction of the largest |logit|) the run fails."""
    nxt, logits = model.prefill(tokens)
    cached, fed = [np.asarray(logits, np.float32)], []
    for i in range(1, p["gen_len"]):
        fed.append(np.asarray(nxt))
        nxt, logits = model.step(nxt, p["prompt_len"] + i - 1)
        cached.append(np.asarray(logits, np.float32))
    whole = np.concatenate([tokens, *fed], axis=1)
    reference = np.asarray(model.forward(whole), np.float32)[:, p["prompt_len"] - 1:]
    diff = float(np.max(np.abs(np.stack(cached, axis=1) - reference)))
    scale = float(np.max(np.abs(reference)))
    bound = tolerance(p) * scale
    verdict = "within" if diff <= bound else "ABOVE"
    line = (f"verify: cached against full-forward logits over {whole.shape[1]} tokens: largest difference "
            f"{diff:.3g} ({diff / scale:.2g} of the largest logit {scale:.3g}), {verdict} the {p['dtype']} "
            f"tolerance {tolerance(p):g}")
    sink(Log(text=line, synthetic=True))
    if diff > bound:
        raise TpulabError(line)
    return {VERIFIED: diff, VERIFIED_SCALE: scale, VERIFIED_TOLERANCE: tolerance(p)}
