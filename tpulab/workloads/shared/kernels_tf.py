"""The timed kernels on TensorFlow (the roofline's, and decode's bandwidth copy): each a `tf.function` on the device, its output waited for.

A call returns the product (or the scaled copy) and one element of it; fetching that element to
the host waits for the whole output to be computed. The copy writes a fresh output per call (TF
has no buffer donation): on a CPU, its allocator's first touch of each page is in the figure, so
JAX's in-place copy usually measures the higher, truer memory ceiling.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tpulab.workloads.shared.kernels import Call, Kernel


@tf.function
def matmul(a: tf.Tensor, b: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    c = tf.linalg.matmul(a, b)
    return c, c[0, 0]


@tf.function
def scale(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    y = x * 2
    return y, y[0]


def operands(kernel: Kernel, seed: int) -> tuple[tf.Tensor, ...]:
    """The kernel's inputs, made on the current device: a matmul's random."""
    dtype = tf.dtypes.as_dtype(kernel.dtype)
    if kernel.kind == "matmul":
        n = kernel.size
        return (tf.random.stateless_normal((n, n), seed=[seed, 0], dtype=dtype),
                tf.random.stateless_normal((n, n), seed=[seed, 1], dtype=dtype))
    return (tf.ones((kernel.elements(),), dtype=dtype),)  # a copy's time does not depend on its values


def builder(seed: int, device: Any) -> Any:
    def build(kernel: Kernel) -> Call:
        with tf.device(device):
            args = operands(kernel, seed)
        f = matmul if kernel.kind == "matmul" else scale

        def call() -> float:
            with tf.device(device):
                return float(f(*args)[1].numpy())

        return call

    return build

