"""decode on TensorFlow: the shared Keras decoder as two `tf.function`s, a prefill and a one-token step.

The cache is one `tf.Variable` per layer for keys and one for values, [batch, kv_heads, context,
head_dim]: a step assigns its token's keys and values into a slice of it, in place, then reads it
(TensorFlow cannot donate a function's inputs, so a cache passed in and out would be copied each
token). The prefill and the step have fixed input signatures: each is traced once.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tpulab.backends import Placement, Runtime
from tpulab.workloads.decode import loop as decode_loop
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.decode.arithmetic import cache_len, head_dim
from tpulab.workloads.shared.decoder_config import Config
from tpulab.workloads.shared.decoder_keras import Decoder
from tpulab.workloads.shared.kernels_tf import builder
from tpulab.workloads.running import CancelToken, Sink


def next_tokens(logits: tf.Tensor) -> tf.Tensor:
    """Greedy: the most likely token of each sequence, [batch, 1]."""
    return tf.cast(tf.argmax(logits[:, -1], axis=-1), tf.int32)[:, None]


def write(cache: tf.Variable, new: tf.Tensor, start: Any) -> tf.Tensor:
    """The tokens' keys or values assigned into a layer's cache variable at `start`; the cache as written."""
    cache[:, :, start:start + new.shape[2]].assign(tf.cast(new, cache.dtype))
    return cache.value()


class TfCalls:
    """The decoder's traced calls over its cache variables, on one device."""

    def __init__(self, model: Decoder, p: Params, device: str) -> None:
        self.model, self.device = model, device
        batch, prompt = p["batch_size"], p["prompt_len"]
        shape = (batch, p["kv_heads"], cache_len(p), head_dim(p))
        with tf.device(device):
            self.cache = [tf.Variable(tf.zeros(shape, p["dtype"]), trainable=False) for _ in range(2 * p["layers"])]
        self.prefill_fn = tf.function(self._prefill, input_signature=[tf.TensorSpec((batch, prompt), tf.int32)])
        self.step_fn = tf.function(self._step, input_signature=[tf.TensorSpec((batch, 1), tf.int32),
                                                                tf.TensorSpec((), tf.int32)])
        self.forward_fn = tf.function(lambda t: self.model(t)[0])  # traced once: --verify calls it once

    def _prefill(self, tokens: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits, kvs = self.model(tokens, last_only=True)
        for c, x in zip(self.cache, [x for kv in kvs for x in kv]):
            write(c, x, 0)
        return next_tokens(logits), logits[:, -1]

    def _step(self, tokens: tf.Tensor, position: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        past = list(zip(self.cache[0::2], self.cache[1::2]))
        logits, _ = self.model(tokens, start=position, past=past, last_only=True, write=write)
        return next_tokens(logits), logits[:, -1]

    def prefill(self, tokens: np.ndarray) -> decode_loop.Call:
        with tf.device(self.device):
            return self.prefill_fn(tf.constant(tokens))

    def step(self, tokens: tf.Tensor, position: int) -> decode_loop.Call:
        with tf.device(self.device):
            return self.step_fn(tokens, tf.constant(position, tf.int32))

    def forward(self, tokens: np.ndarray) -> tf.Tensor:
        with tf.device(self.device):
            return self.forward_fn(tf.constant(tokens))

    def programs(self, profiler: Any) -> list[Any]:
        """The step's concrete function (its graph names the profiled ops)."""
        return [self.step_fn.get_concrete_function()]


def build(p: Params, placement: Placement) -> tuple[int, decode_loop.Model]:
    """The model with its random weights on the placement's device, and its traced calls."""
    device = placement.devices[0]
    keras.utils.set_random_seed(p["seed"])
    with tf.device(device):
        model = Decoder(Config.of(p))
        model(np.zeros((1, 2), np.int32))  # builds every weight (two tokens: a softmax over one warns)
    calls = TfCalls(model, p, device)
    return model.count_params(), decode_loop.Model(calls.prefill, calls.step, calls.forward, calls.programs)


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    decode_loop.run(w, p, sink, cancel, runtime, build, builder)
