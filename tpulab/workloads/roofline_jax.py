"""The roofline on JAX: each kernel jitted, its inputs made on the device, its output waited for.

A call returns the product (or the scaled copy), so XLA must write all of it, and fetches one
element of it: the host copy of that element waits for the whole program to finish.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tpulab.backends import Runtime
from tpulab.workloads.base import CancelToken, Params, Sink, Workload
from tpulab.workloads.roofline_kernels import Call, Kernel, measure, placed


def matmul(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    c = a @ b
    return c, c[0, 0]


def scale(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    y = x * 2
    return y, y[0]


def operands(kernel: Kernel, seed: int, device: Any) -> tuple[jax.Array, ...]:
    """The kernel's inputs, random, made on `device` (never copied from the host)."""
    key = jax.random.key(seed)
    dtype = jnp.dtype(kernel.dtype)
    with jax.default_device(device):
        if kernel.kind == "matmul":
            ka, kb = jax.random.split(key)
            n = kernel.size
            return jax.random.normal(ka, (n, n), dtype), jax.random.normal(kb, (n, n), dtype)
        return (jax.random.normal(key, (kernel.elements(),), dtype),)


def builder(seed: int, device: Any) -> Any:
    def build(kernel: Kernel) -> Call:
        args = operands(kernel, seed, device)
        f = jax.jit(matmul if kernel.kind == "matmul" else scale)

        def call() -> float:
            return float(np.asarray(f(*args)[1]))

        return call

    return build


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement = placed(w, p, sink, cancel, runtime)
    measure(p, builder(p["seed"], placement.devices[0]), sink, cancel)
