"""A language model generating text: prefill, then one token per step with a KV cache (declaration).

Decode is the work a chat answer is made of: each step reads every weight and the whole cache to
make one token per sequence, so it is bound by memory bandwidth, not by compute. The model is a
decoder-only LM built from its configuration (the `transformer` workload's blocks, shared), with
random weights: only the speed means something. Its arithmetic (parameters, bytes, FLOPs) is
plain functions (`decode_math`), so the figures can be derived without a framework.

A run: the first prefill and the first decode step are compile time, reported apart; then one
timed generation: a prefill that reads the prompt and yields the first token (a `Step` of phase
prefill, token 0), and one `Step` of phase decode per later token, timed from its call until its
token reached the host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tpulab.base import fmt
from tpulab.base.events import PHASE_PREDICT, Started, Step
from tpulab.base.figures import FigureValue
from tpulab.base.timing import median
from tpulab.workloads.decode import figures as decode_figures
from tpulab.workloads.base import (
    BACKEND,
    DEVICE,
    Limits,
    ParamError,
    Params,
    ParamSpec,
    SummaryPart,
    Workload,
    batch_size,
    check_shards,
)
from tpulab.workloads.decode.arithmetic import (
    BYTES,
    CACHE_BLOCK,
    DTYPE_FORMATS,
    DTYPES,
    WEIGHT_FORMATS,
    cache_len,
    decode_step_flops,
    head_dim,
    matmul_bytes,
    parameters,
    prefill_flops,
    weight_format,
)
from tpulab.workloads.decode import gguf_model
from tpulab.workloads.decode.charts import TOKEN_RATE, TOKEN_TIME
from tpulab.workloads.decode.hf_shape import MODEL, with_model
from tpulab.workloads.decode.rows import decode_rows
from tpulab.workloads.shared.decoder_shapes import SHAPES
from tpulab.workloads.shared.kernels import bandwidth_kept
from tpulab.workloads.shared.model_source import hf_config
from tpulab.workloads.running import RunnerAt

if TYPE_CHECKING:
    from tpulab.backends import RuntimeReport
    from tpulab.base.ceilings import MeasuredCeilings
    from tpulab.base.ceilings import Sourced

GPT2 = SHAPES["gpt2-small"]  # the defaults' shape
TOKEN_LINE_EVERY = 16  # a run's narration: a line every this many tokens (the summary has each one's figures)

PARAMS = (
    batch_size(1, 1024, unit="sequences", what="sequences generated together"),
    ParamSpec("prompt_len", int, 128, "tokens of each prompt, read in one prefill", 1, 131072, unit="tokens",
              term="prefill"),
    ParamSpec("gen_len", int, 128, "tokens generated per sequence: the first by the prefill, then one per "
              "decode step", 2, 131072, unit="tokens"),
    ParamSpec("context", int, GPT2["context"], "positions the model has (its position table, where learned); the KV cache "
              "holds no more", 2, 131072, unit="tokens"),
    ParamSpec("kv_cache", int, 0, f"positions the KV cache holds; 0: the prompt and the generated tokens, rounded up "
              f"to {CACHE_BLOCK} (no more than --context)", 0, 131072, unit="tokens"),
    ParamSpec("dtype", str, "float32", "number format of the weights, the cache and the math", options=DTYPES,
              term="precision"),
    ParamSpec("layers", int, GPT2["layers"], "decoder blocks (attention, then a feed-forward network)", 1, 128),
    ParamSpec("width", int, GPT2["width"], "model width (d_model)", 8, 16384),
    ParamSpec("heads", int, GPT2["heads"], "query heads; must divide the width", 1, 256),
    ParamSpec("kv_heads", int, GPT2["kv_heads"], "key/value heads (grouped-query attention); must divide the heads", 1, 256),
    ParamSpec("mlp_width", int, GPT2["mlp_width"], "the feed-forward network's inner width", 1, 131072),
    ParamSpec("vocab", int, GPT2["vocab"], "vocabulary size (GPT-2's is 50257, Llama 3's 128256)", 2, 1_000_000,
              unit="tokens"),
    ParamSpec("positions", str, GPT2["positions"], "learned: a position embedding (GPT-2); rope: rotary, in each "
              "attention (Llama)", options=("learned", "rope")),
    ParamSpec("block", str, GPT2["block"], "gpt2: LayerNorm, biases, GELU feed-forward; llama: RMSNorm, no biases, "
              "SwiGLU feed-forward", options=("gpt2", "llama")),
    ParamSpec("verify", bool, False, "before the timed tokens, check that decoding with the cache gives a full "
              "forward pass's logits (the run fails above the dtype's tolerance); on llama.cpp, that its greedy "
              "tokens and their log-probabilities are the PyTorch decoder's on the same weights (the run fails above "
              "the weight format's tolerance)", tunes=False),
    ParamSpec("weight_format", str, "dtype", "the weights' format in a GGUF file: dtype (--dtype's), f32, f16, bf16, or "
              "quantized: q8_0 (8.5 bits a weight) or q4_0 (4.5 bits); the bytes a token reads follow it",
              options=WEIGHT_FORMATS, term="precision", backends=lambda: _taking("weight_format"),
              why_not=lambda backend: f"the weights are in --dtype on {backend}: use --backend "
              f"{' or '.join(_taking('weight_format'))}"),
    ParamSpec("threads", int, 0, "CPU threads that run the model (0: the machine's physical cores)", 0, 1024,
              advanced=True, backends=lambda: _taking("threads"), why_not=lambda backend: f"{backend} sizes its own "
              f"thread pools: --threads is for --backend {' or '.join(_taking('threads'))}"),
    ParamSpec("shards", int, 1, "replicas the sequences are split over (1 = no sharding)", 1, 64, term="shard",
              backends=lambda: _sharded(), why_not=lambda backend: f"decode runs on one device on {backend}: use "
              f"--backend {' or '.join(_sharded())}"),
    ParamSpec(MODEL, str, "", "your language model instead of tpulab's decoder: hf:DIR or hf:NAME, a transformers "
              "causal LM (its config.json, in that folder or the local Hugging Face cache; llama, mistral, qwen2 or "
              "gpt2), or gguf:FILE, a GGUF file on llama.cpp (llama or gpt2); its config or metadata sets the shape; "
              "\"\": tpulab's decoder of the shape above", tunes=False, term="your model",
              backends=lambda: _taking(MODEL), why_not=lambda backend: f"a transformers model runs on PyTorch, a GGUF "
              f"file on llama.cpp: use --backend {' or '.join(_taking(MODEL))}"),
    ParamSpec("weights", str, "random", "--model's weights: random, from its config; or pretrained, from its files "
              "on disk", options=("random", "pretrained"), tunes=False, backends=lambda: _taking("weights"),
              why_not=lambda backend: f"only a transformers model (--model hf:) takes pretrained weights: use "
              f"--backend {' or '.join(_taking('weights'))}; for llama.cpp, convert it to GGUF (llama.cpp's "
              "convert_hf_to_gguf.py) and give --model gguf:FILE"),
    DEVICE,
    BACKEND,
    ParamSpec("seed", int, 0, "seed of the random weights and prompts", 0, 2**31 - 1, advanced=True, tunes=False),
)


# --- the workload ---------------------------------------------------------------------------------
def _sharded() -> tuple[str, ...]:
    """The backends whose decode runner shards (by the runners' declaration: no name is compared here)."""
    return tuple(name for name, r in LLMDecode.runners.items() if isinstance(r, RunnerAt) and r.shards)


def _taking(param: str) -> tuple[str, ...]:
    """The backends whose decode runner takes `param` (by the runners' declaration: no name is compared here)."""
    return tuple(name for name, r in LLMDecode.runners.items() if isinstance(r, RunnerAt) and param in r.takes)


class LLMDecode(Workload):
    name = "decode"
    title = "LLM decode (KV cache)"
    summary = ("A language model generating tokens: a prefill reads the prompt, then each step makes one token "
               "per sequence from a KV cache. Tokens/s, time to first token and latency per token, against "
               "the device's memory bandwidth.")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 2, "prompt_len": 8, "gen_len": 8, **SHAPES["smoke"]},
        "tiny": {"batch_size": 4, "prompt_len": 64, "gen_len": 64, **SHAPES["tiny"]},
        "gpt2-small": {},  # the defaults' shape
        "llama-1b": {"prompt_len": 128, "gen_len": 128, "context": 2048, "dtype": "bfloat16", "layers": 16,
                     "width": 2048, "heads": 32, "kv_heads": 8, "mlp_width": 8192, "vocab": 128256,
                     "positions": "rope", "block": "llama"},
    }
    unit = "token"
    charts = (TOKEN_TIME, TOKEN_RATE)
    throughput_unit = "tokens/s"
    headlines = ("figures.decode_tokens_per_s", "figures.ttft_s", "figures.itl_p50", "figures.mbu")
    figures = decode_figures.FIGURES
    latency = "itl_p50"
    phases = (decode_figures.PHASE_PREFILL, decode_figures.PHASE_DECODE)
    synthetic_data = "random prompts, and random weights unless a model's own were read"
    model_flops = True
    flop_rates = False  # a token step reads every weight for little arithmetic: its figure is MBU
    runners = {"tensorflow": RunnerAt("tpulab.workloads.decode.tf:run"),
               "jax": RunnerAt("tpulab.workloads.decode.jax:run", shards=True),  # the sequences split over a mesh
               "torch": RunnerAt("tpulab.workloads.decode.torch:run", takes=(MODEL, "weights")),
               "llamacpp": RunnerAt("tpulab.workloads.decode.llamacpp:run", takes=("weight_format", "threads", MODEL),
                                   checks="tpulab.workloads.decode.gguf_shapes:check")}

    def flops_per_step(self, p: Params) -> float:
        return decode_step_flops(p)

    def total_steps(self, p: Params) -> int:
        """The first prefill and the first decode step (compile), the timed prefill, a step per later token."""
        return int(2 + p["gen_len"])

    def compute_dtype(self, p: Params) -> str:
        return str(p["dtype"])

    def dtype_words(self, p: Mapping[str, Any], dtype: str) -> str:
        """'q4_0 weights, float32 cache' where the weights are in a format of their own (--weight-format, a GGUF
        file's), else the dtype."""
        if p.get("weight_format", "dtype") == "dtype" and gguf_model.source(p) is None:
            return dtype
        try:
            held = weight_format(dict(p))
        except ParamError:  # a kept run's GGUF file, since moved: its formats are the data row's
            held = "the file's own"
        return dtype if held == DTYPE_FORMATS.get(dtype) else f"{held} weights, {dtype} cache"

    def backend_hint(self, p: Params) -> tuple[str, str] | None:
        """A transformers model (--model) runs on the backend that takes it (PyTorch)."""
        if gguf_model.source(p) is not None:  # a runner that writes GGUF files reads them
            reading = _taking("weight_format")
            return (reading[0], "a GGUF file (--model gguf:) runs on llama.cpp") if reading else None
        taking = _taking("weights")
        return (taking[0], "a transformers model (--model) runs on PyTorch") if p[MODEL] and taking else None

    def with_model(self, p: Params) -> tuple[Params, dict[str, str]]:
        """The parameters with --model's shape from its config.json (read here as JSON), and why; as they are
        without --model."""
        if not p[MODEL]:
            return p, {}
        if gguf_model.source(p) is not None:
            return gguf_model.with_file(p, self.defaults())
        source, config = hf_config(p[MODEL], MODEL)
        return with_model(p, source, config, self.defaults())

    def resolve_auto(self, p: Params, device: str, report: RuntimeReport) -> tuple[Params, dict[str, str]]:
        """With --model, the shape parameters become its config's, so the figures follow the model."""
        return self.with_model(p)

    def check(self, p: Params, limits: Limits) -> None:
        check_shards(p, limits)
        if p["weights"] != "random" and not p[MODEL]:
            raise ParamError("weights", "--weights pretrained: only a transformers model (--model hf:...) has "
                             "weights on disk")
        p = self.with_model(p)[0]
        backend = p.get(BACKEND.name, "auto")
        if gguf_model.source(p) is not None and backend not in ("auto", *_taking("weight_format")):
            raise ParamError(MODEL, f"--model {p[MODEL]}: a GGUF file runs on llama.cpp: use --backend "
                             f"{' or '.join(_taking('weight_format'))}")
        if p["width"] % p["heads"]:
            raise ParamError("heads", f"--heads must divide --width {p['width']} (got {p['heads']})")
        if p["heads"] % p["kv_heads"]:
            raise ParamError("kv_heads", f"--kv-heads must divide --heads {p['heads']} (got {p['kv_heads']})")
        if p["positions"] == "rope" and head_dim(p) % 2:
            raise ParamError("heads", f"--positions rope needs an even head width (--width / --heads): "
                             f"got {head_dim(p)}")
        if p["prompt_len"] + p["gen_len"] > p["context"]:
            raise ParamError("context", f"--prompt-len {p['prompt_len']} plus --gen-len {p['gen_len']} must fit "
                             f"--context {p['context']} (got {p['prompt_len'] + p['gen_len']})")
        need = p["prompt_len"] + p["gen_len"]
        if p["kv_cache"] and not need <= p["kv_cache"] <= p["context"]:
            raise ParamError("kv_cache", f"--kv-cache must be from {need} (--prompt-len plus --gen-len) to "
                             f"{p['context']} (--context), or 0 to size it by them (got {p['kv_cache']})")
        runner = self.runners.get(p.get(BACKEND.name, "auto"))  # once the backend is decided: its own refusals
        if isinstance(runner, RunnerAt):
            runner.check(p)

    def describe_data(self, p: Params) -> str:
        if gguf_model.source(p) is not None:
            return (f"{p[MODEL]} (its own weights, {weight_format(p)}, {parameters(p) / 1e6:.1f}M parameters) and "
                    f"random prompts (seed {p['seed']}): {p['batch_size']} x {p['prompt_len']} tokens")
        if p[MODEL]:
            return (f"{p[MODEL]} ({p['weights']} weights, {parameters(p) / 1e6:.1f}M parameters as decode counts "
                    f"them) and random prompts (seed {p['seed']}): {p['batch_size']} x {p['prompt_len']} tokens")
        return (f"random weights and prompts (seed {p['seed']}): {parameters(p) / 1e6:.1f}M parameters, "
                f"{p['batch_size']} x {p['prompt_len']} prompt tokens")

    def summary_part(self, steps: list[Step], started: Started, ceilings: MeasuredCeilings,
                     p: Params, peak: Sourced | None) -> SummaryPart:
        """The run's step is a decode step (the prefill is not one); its figures: `decode_figures`."""
        return decode_figures.summary_part(steps, started, ceilings, shape(p), peak)

    def timed_seconds(self, steps: Iterable[Step], phase: str = "") -> list[float]:
        """The decode steps' times: a run's one step is a token's (`summary_part`); it has no inference phase
        apart (its steps are inference: an 'inference step time' would repeat the token's)."""
        return [] if phase == PHASE_PREDICT else [s.seconds for s in decode_figures.decode_steps(list(steps))]

    def figure_rows(self, values: Mapping[str, FigureValue]) -> list[tuple[str, str]]:
        """Its figures in words: what each token cost, and what MBU divides by, said so."""
        return decode_rows(values)

    def step_cells(self, step: Step, steps: list[Step]) -> list[tuple[str, str]] | None:
        """'prefill (token 0)  52.1 ms: time to first token', then every 16 tokens 'token 32  4.1 ms  ITL p50
        4.0 ms (tokens 17-32)  1.9 ktok/s' (the rate over the batch); nothing of the tokens between."""
        if step.phase == decode_figures.PHASE_PREFILL:
            return [("prefill (token 0)", ""), (f"{fmt.seconds(step.seconds)}: time to first token", "")]
        if step.phase != decode_figures.PHASE_DECODE:
            return None
        if step.step % TOKEN_LINE_EVERY:
            return []
        last = [s.seconds for s in steps[-TOKEN_LINE_EVERY:] if s.phase == decode_figures.PHASE_DECODE and not s.warmup]
        return [(f"token {step.step}", ""), (fmt.seconds(step.seconds), ""),
                (f"ITL p50 {fmt.seconds(median(last))} (tokens {step.step - len(last) + 1}-{step.step})", ""),
                (fmt.rate(step.examples_per_s, "tok/s"), "")]

    def sweep_baseline(self, point: Params, axes: Mapping[str, Any]) -> Params | None:
        """Batch 1 at the same lengths: what batching buys (the article's configuration means nothing here)."""
        return {**point, "batch_size": 1} if "batch_size" in axes else None

    def worker_knows(self, p: Params, ceilings: MeasuredCeilings) -> dict[str, Any]:
        """The worker measures the bandwidth first where no ceiling is kept, and checks a kept one
        (`measure_bandwidth`)."""
        return bandwidth_kept(p, ceilings)


def shape(p: Params) -> decode_figures.Shape:
    """What the figures need of the model: its sizes (above) at the run's batch and lengths."""
    per_position = 2 * p["layers"] * p["kv_heads"] * head_dim(p) * BYTES[p["dtype"]]
    return decode_figures.Shape(batch=p["batch_size"], prompt_len=p["prompt_len"], cache=cache_len(p),
                                weight_bytes=matmul_bytes(p),
                                kv_bytes_per_position=per_position, prefill_flops=prefill_flops(p),
                                replicas=p["shards"])


DECODE = LLMDecode()
