"""decode on JAX: the shared Keras decoder as two jitted programs, a prefill and a one-token step.

The weights are arguments (read through `keras.StatelessScope`), never constants baked into the
program. The cache, one [batch, kv_heads, context, head_dim] array per layer for keys and one for
values, is donated to each call, which writes its tokens' keys and values into it and returns it:
the step writes each layer's before it reads them (`dynamic_update_slice`, in place), so a
token's time holds its own write. With shards, the sequences and their caches are split over the
mesh, the weights replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpulab.backends import Placement, Runtime
from tpulab.workloads.decode import loop as decode_loop
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.decode.arithmetic import cache_len, head_dim
from tpulab.workloads.shared.decoder_config import Config
from tpulab.workloads.shared.decoder_keras import Decoder
from tpulab.workloads.shared.kernels_jax import builder
from tpulab.workloads.running import CancelToken, Sink


def next_tokens(logits: jax.Array) -> jax.Array:
    """Greedy: the most likely token of each sequence, [batch, 1]."""
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]


def write(cache: jax.Array, new: jax.Array, position: jax.Array) -> jax.Array:
    """The tokens' keys or values written into a (donated) layer's cache at `position`, in place."""
    return jax.lax.dynamic_update_slice(cache, new.astype(cache.dtype), (0, 0, position, 0))


class JaxCalls:
    """The decoder's jitted calls, its weights and its cache (replaced by each call's output)."""

    def __init__(self, model: Decoder, p: Params, mesh: jax.sharding.Mesh) -> None:
        self.model, self.variables = model, model.variables
        self.rows = NamedSharding(mesh, P("batch"))
        self.weights = jax.device_put([v.value for v in self.variables], NamedSharding(mesh, P()))
        shape = (p["batch_size"], p["kv_heads"], cache_len(p), head_dim(p))
        zeros = jax.jit(lambda: [jnp.zeros(shape, p["dtype"]) for _ in range(2 * p["layers"])],
                        out_shardings=self.rows)
        self.cache = zeros()
        self.prefill_jit = jax.jit(self._prefill, donate_argnums=1)
        self.step_jit = jax.jit(self._step, donate_argnums=1)
        self.forward_jit = jax.jit(lambda weights, tokens: self._call(weights, tokens)[0])

    def _call(self, weights: list[jax.Array], tokens: jax.Array, **kwargs: Any) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(self.variables, weights))):
            return self.model(tokens, **kwargs)

    def _prefill(self, weights: list[jax.Array], cache: list[jax.Array], tokens: jax.Array) -> Any:
        logits, kvs = self._call(weights, tokens, last_only=True)
        new = [x for kv in kvs for x in kv]
        return next_tokens(logits), logits[:, -1], [write(c, x, np.int32(0)) for c, x in zip(cache, new)]

    def _step(self, weights: list[jax.Array], cache: list[jax.Array], tokens: jax.Array, position: jax.Array) -> Any:
        past = list(zip(cache[0::2], cache[1::2]))
        logits, kvs = self._call(weights, tokens, start=position, past=past, last_only=True, write=write)
        return next_tokens(logits), logits[:, -1], [x for kv in kvs for x in kv]

    def prefill(self, tokens: np.ndarray) -> decode_loop.Call:
        nxt, logits, self.cache = self.prefill_jit(self.weights, self.cache, jax.device_put(tokens, self.rows))
        return nxt, logits

    def step(self, tokens: jax.Array, position: int) -> decode_loop.Call:
        nxt, logits, self.cache = self.step_jit(self.weights, self.cache, tokens, np.int32(position))
        return nxt, logits

    def forward(self, tokens: np.ndarray) -> jax.Array:
        return self.forward_jit(self.weights, jax.device_put(tokens, self.rows))

    def programs(self, profiler: Any) -> list[Any]:
        """The step as compiled (its HLO gives the profiled ops' FLOPs and bytes)."""
        tokens = jax.device_put(np.zeros((len(self.cache[0]), 1), np.int32), self.rows)
        return [self.step_jit.lower(self.weights, self.cache, tokens, np.int32(0)).compile()]


def build(p: Params, placement: Placement) -> tuple[int, decode_loop.Model]:
    """The model with its random weights on the placement's devices, and its compiled calls."""
    keras.utils.set_random_seed(p["seed"])
    with jax.default_device(placement.devices[0]):
        model = Decoder(Config.of(p))
        model(keras.KerasTensor((1, 2), "int32"))  # builds every weight, traced once (an eager call on JAX compiles
        # each op apart: 5.4 s against 3.0 s for the smoke preset), the same weights from the seed
    calls = JaxCalls(model, p, placement.handle)
    return model.count_params(), decode_loop.Model(calls.prefill, calls.step, calls.forward, calls.programs)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    decode_loop.run(w, p, sink, cancel, runtime, build, builder)
