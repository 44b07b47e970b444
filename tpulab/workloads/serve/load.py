"""The load a serve run offers, drawn before the first request from its seed: when each request is sent, and how
long its prompt and its output are (no framework, no network: the client reads these)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tpulab.workloads.serve.lengths import span

PROMPT_IDS = (100, 256)  # a prompt's token ids are drawn from these (high excluded): every tokenizer in use has them,
# and so has the smallest model tpulab's engine serves (the smoke decoder's vocabulary is 256)


@dataclass(frozen=True)
class Request:
    """One request of the run: its place in the schedule and its sizes."""

    index: int
    at: float | None  # seconds after the run's start it is due (None: sent when a slot frees, --concurrency)
    prompt_tokens: int
    output_tokens: int


def arrivals(rate: float, burstiness: float, count: int, seed: int) -> list[float]:
    """`count` due times from 0: gaps drawn from a gamma of shape `burstiness` and mean 1 / `rate` (shape 1 is
    Poisson's exponential; below 1 burstier, above 1 more even), as vLLM's `bench serve` draws them. The first
    request is due at 0."""
    gaps = np.random.default_rng(seed).gamma(burstiness, 1.0 / (rate * burstiness), count)
    due = np.cumsum(gaps) - gaps[0]
    return [float(t) for t in due]


def sizes(mean: int, spread: float, count: int, rng: np.random.Generator) -> list[int]:
    """`count` lengths: `mean` each where `spread` is 0, else drawn uniformly within mean x (1 +- spread), at least
    1 (vLLM's random range ratio)."""
    if spread == 0:
        return [mean] * count
    low, high = span(mean, spread)
    return [int(x) for x in rng.integers(low, high + 1, count)]


def plan(p: Mapping[str, Any]) -> list[Request]:
    """Every request the run may send, in order (it sends fewer where --duration ends it first)."""
    count = int(p["requests"])
    rng = np.random.default_rng([int(p["seed"]), 1])  # the sizes' own stream: the arrivals' stay those of the seed
    prompts = sizes(int(p["prompt_tokens"]), float(p["length_spread"]), count, rng)
    outputs = sizes(int(p["output_tokens"]), float(p["length_spread"]), count, rng)
    due: list[float | None] = ([None] * count if p["concurrency"] else
                               list(arrivals(float(p["rate"]), float(p["burstiness"]), count, int(p["seed"]))))
    return [Request(i, due[i], prompts[i], outputs[i]) for i in range(count)]


def prompt(request: Request, seed: int) -> list[int]:
    """A prompt of exactly `prompt_tokens` token ids (the completions API takes ids), drawn from `PROMPT_IDS`,
    different for each request so that no prefix cache serves it."""
    return [int(t) for t in np.random.default_rng([seed, 2, request.index]).integers(*PROMPT_IDS, request.prompt_tokens)]


def prompt_text(request: Request, seed: int) -> str:
    """A chat message of `prompt_tokens` words, each a number (a chat API takes text: its token count is the
    server's tokenizer's, which its usage says)."""
    return " ".join(str(t) for t in prompt(request, seed))
