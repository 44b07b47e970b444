"""The timed kernels on JAX (the roofline's, and decode's bandwidth copy): each jitted, its inputs made on the device, each call waited for.

A call waits (`block_until_ready`) until the kernel's whole output is written. The copy negates
its array in place (the input buffer is donated to the output), as STREAM's kernels do: a fresh
output per call would time the allocator's first touch of every page instead of the memory.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tpulab.workloads.shared.kernels import Call, Kernel


def operands(kernel: Kernel, seed: int, device: Any) -> list[jax.Array]:
    """The kernel's inputs, made on `device` (never copied from the host): a matmul's random."""
    key = jax.random.key(seed)
    dtype = jnp.dtype(kernel.dtype)
    with jax.default_device(device):
        if kernel.kind == "matmul":
            ka, kb = jax.random.split(key)
            n = kernel.size
            return [jax.random.normal(ka, (n, n), dtype), jax.random.normal(kb, (n, n), dtype)]
        return [jnp.ones((kernel.elements(),), dtype)]  # a copy's time does not depend on its values


def builder(seed: int, device: Any) -> Any:
    def build(kernel: Kernel) -> Call:
        args = operands(kernel, seed, device)
        if kernel.kind == "matmul":
            matmul = jax.jit(jnp.matmul)
            return lambda: matmul(*args).block_until_ready()
        negate = jax.jit(jnp.negative, donate_argnums=0)

        def copy() -> Any:
            args[0] = negate(args[0]).block_until_ready()  # the result is the next call's input
            return args[0]

        return copy

    return build

