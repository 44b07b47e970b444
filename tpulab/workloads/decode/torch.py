"""decode on PyTorch: the decoder as an `nn.Module` (`torch_model`: the shared Keras decoder's model, layer for
layer, written in PyTorch, as a PyTorch user writes one), a prefill and a one-token step.

The same model as on TensorFlow and JAX, with no Keras in the worker. The cache is one torch
tensor per layer for keys and one for values, [batch, kv_heads, context, head_dim], allocated once
(static): a step writes its token's keys and values into it in place (`index_copy_` at a position
given as a tensor, so a compiled step is not specialised to each position), then attends over it.
Calls run under `torch.inference_mode` (no autograd bookkeeping on the step's many small views: 3% of a
GPT-2 step at batch 1 here). Eager by default; `--compile on` puts the prefill and the step under
`torch.compile`. Tokens stay on the device between steps; the loop's host copy (`np.asarray`) waits for
the step's work.

With `--model hf:...`, the model is a transformers causal LM (`HFCalls`), its cache a transformers `StaticCache`
of the same positions, its calls the same: greedy tokens, timed by the same loop.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np
import torch

from tpulab.backends import Placement, Runtime
from tpulab.workloads.decode import loop as decode_loop
from tpulab.workloads.base import COMPILE, Params, Workload
from tpulab.workloads.decode.arithmetic import cache_len, head_dim
from tpulab.workloads.decode.torch_model import TorchDecoder
from tpulab.workloads.shared.decoder_config import Config
from tpulab.workloads.shared.hf_torch import hf_model
from tpulab.workloads.shared.kernels_torch import DTYPES, builder
from tpulab.workloads.shared.model_source import hf_config
from tpulab.workloads.running import CancelToken, Sink
from tpulab.workloads.torch_steps import can_compile, one_program, parameters


class OnDevice:
    """A tensor left on its device, which numpy reads by copying it to the host (waiting for its work)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.tensor.detach().float().cpu().numpy() if self.tensor.is_floating_point() else \
            self.tensor.detach().cpu().numpy()
        return host if dtype is None else host.astype(dtype)


def next_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Greedy: the most likely token of each sequence, [batch, 1]."""
    return torch.argmax(logits[:, -1], dim=-1).to(torch.int32)[:, None]


def write(cache: torch.Tensor, new: torch.Tensor, start: Any) -> torch.Tensor:
    """The tokens' keys or values written into a layer's cache at `start`, in place; the cache as written."""
    positions = start + torch.arange(new.shape[2], device=cache.device)
    return cache.index_copy_(2, positions, new.to(cache.dtype))


class TorchCalls:
    """The decoder's calls over its static cache, on one device, eager or compiled."""

    def __init__(self, model: TorchDecoder, p: Params, device: Any, compiled: Callable[[Any], Any]) -> None:
        self.model, self.device = model, device
        shape = (p["batch_size"], p["kv_heads"], cache_len(p), head_dim(p))
        self.cache = [torch.zeros(shape, dtype=DTYPES[p["dtype"]], device=device) for _ in range(2 * p["layers"])]
        self.prefill_fn, self.step_fn = compiled(self._prefill), compiled(self._step)

    def _prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, kvs = self.model(tokens, last_only=True)
        for c, x in zip(self.cache, [x for kv in kvs for x in kv]):
            write(c, x, 0)
        return next_tokens(logits), logits[:, -1]

    def _step(self, tokens: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        past = list(zip(self.cache[0::2], self.cache[1::2]))
        logits, _ = self.model(tokens, start=position, past=past, last_only=True, write=write)
        return next_tokens(logits), logits[:, -1]

    def prefill(self, tokens: np.ndarray) -> decode_loop.Call:
        with torch.inference_mode():
            nxt, logits = self.prefill_fn(torch.from_numpy(tokens).to(self.device))
        return OnDevice(nxt), OnDevice(logits)

    def step(self, tokens: OnDevice, position: int) -> decode_loop.Call:
        with torch.inference_mode():
            nxt, logits = self.step_fn(tokens.tensor, torch.tensor(position, device=self.device))
        return OnDevice(nxt), OnDevice(logits)

    def forward(self, tokens: np.ndarray) -> OnDevice:
        with torch.inference_mode():
            return OnDevice(self.model(torch.from_numpy(tokens).to(self.device))[0])


class HFCalls:
    """A transformers causal LM's calls over a transformers `StaticCache` of `cache_len` positions: the prefill
    from position 0 (the cache emptied first), a step of one token at its position, greedy; the full forward
    without a cache."""

    def __init__(self, model: torch.nn.Module, config: Any, p: Params, device: Any,
                 compiled: Callable[[Any], Any]) -> None:
        import transformers

        self.model, self.device = model, device
        self.cache = transformers.StaticCache(config=config, max_cache_len=cache_len(p))  # sized at its first call
        takes = inspect.signature(model.forward).parameters
        self.cache_arg = "cache" if "cache" in takes else "past_key_values"  # transformers 5.x renamed it
        self.prefill_fn, self.step_fn = compiled(self._call), compiled(self._call)

    def _call(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=tokens, cache_position=positions, use_cache=True, **{self.cache_arg: self.cache})
        logits = out.logits[:, -1]
        return next_tokens(logits[:, None]), logits

    def prefill(self, tokens: np.ndarray) -> decode_loop.Call:
        with torch.inference_mode():
            self.cache.reset()
            ids = torch.from_numpy(tokens).to(self.device)
            nxt, logits = self.prefill_fn(ids, torch.arange(ids.shape[1], device=self.device))
        return OnDevice(nxt), OnDevice(logits)

    def step(self, tokens: OnDevice, position: int) -> decode_loop.Call:
        with torch.inference_mode():
            nxt, logits = self.step_fn(tokens.tensor, torch.tensor([position], device=self.device))
        return OnDevice(nxt), OnDevice(logits)

    def forward(self, tokens: np.ndarray) -> OnDevice:
        with torch.inference_mode():
            return OnDevice(self.model(input_ids=torch.from_numpy(tokens).to(self.device), use_cache=False).logits)


def build(p: Params, placement: Placement) -> tuple[int, decode_loop.Model]:
    """The model with its random weights on the placement's device, and its calls: tpulab's decoder, or the
    transformers model --model names (`tpulab.workloads.shared.hf_torch`)."""
    compiled = one_program(p, "decode")
    device = placement.devices[0]
    can_compile(p[COMPILE.name], device)
    torch.manual_seed(p["seed"])
    if p.get("model"):
        hf, config = hf_model(hf_config(p["model"], "model")[0], p["weights"])
        hf = hf.to(device=device, dtype=DTYPES[p["dtype"]]).eval()
        calls: TorchCalls | HFCalls = HFCalls(hf, config, p, device, compiled)
        return parameters(hf), decode_loop.Model(calls.prefill, calls.step, calls.forward)
    model = TorchDecoder(Config.of(p)).to(device=device, dtype=DTYPES[p["dtype"]]).eval()
    calls = TorchCalls(model, p, device, compiled)
    return parameters(model), decode_loop.Model(calls.prefill, calls.step, calls.forward)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    decode_loop.run(w, p, sink, cancel, runtime, build, builder)
