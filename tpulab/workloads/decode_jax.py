"""decode on JAX: the shared Keras decoder as two jitted programs, a prefill and a one-token step.

The weights are arguments (read through `keras.StatelessScope`), never constants baked into the
program; the cache, one [batch, kv_heads, context, head_dim] array per layer for keys and one for
values, is donated to each call, so a step writes its token's keys and values in place. With
shards, the sequences and their caches are split over the mesh, the weights replicated.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import keras
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpulab.backends import Runtime
from tpulab.workloads import decode_loop
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.decode import decode_step_bytes, head_dim
from tpulab.workloads.decoder_keras import Config, Decoder
from tpulab.workloads.roofline_jax import builder
from tpulab.workloads.roofline_kernels import measure_bandwidth
from tpulab.workloads.running import CancelToken, Sink, place, started


def next_tokens(logits: jax.Array) -> jax.Array:
    """Greedy: the most likely token of each sequence, [batch, 1]."""
    return jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]


class Compiled:
    """The decoder's jitted calls, its weights and its cache (replaced by each call's output)."""

    def __init__(self, model: Decoder, p: Params, mesh: jax.sharding.Mesh) -> None:
        self.model, self.variables = model, model.variables
        self.rows = NamedSharding(mesh, P("batch"))
        self.weights = jax.device_put([v.value for v in self.variables], NamedSharding(mesh, P()))
        shape = (p["batch_size"], p["kv_heads"], p["context"], head_dim(p))
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
        cache = [jax.lax.dynamic_update_slice(c, x.astype(c.dtype), (0, 0, 0, 0)) for c, x in zip(cache, new)]
        return next_tokens(logits), logits[:, -1], cache

    def _step(self, weights: list[jax.Array], cache: list[jax.Array], tokens: jax.Array, position: jax.Array) -> Any:
        past = list(zip(cache[0::2], cache[1::2]))
        logits, kvs = self._call(weights, tokens, start=position, past=past, last_only=True)
        new = [x for kv in kvs for x in kv]
        at = (0, 0, position, 0)
        cache = [jax.lax.dynamic_update_slice(c, x.astype(c.dtype), at) for c, x in zip(cache, new)]
        return next_tokens(logits), logits[:, -1], cache

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


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement = place(w, p, runtime)
    keras.utils.set_random_seed(p["seed"])
    with jax.default_device(placement.devices[0]):
        model = Decoder(Config.of(p))
        model(np.zeros((1, 1), np.int32))  # builds every weight
    first = started(w, p, placement, runtime.versions(), w.describe_data(p), True, decode_step_bytes(p))
    first.model = {"parameters": int(model.count_params())}
    sink(first)
    measure_bandwidth(p, placement, builder(p["seed"], placement.devices[0]), sink)
    calls = Compiled(model, p, placement.handle)
    decode_loop.run(p, decode_loop.Model(calls.prefill, calls.step, calls.forward, calls.programs), sink, cancel,
                    runtime)
