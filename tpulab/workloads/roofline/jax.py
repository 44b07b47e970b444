"""The roofline on JAX: each kernel of the shared builder (`tpulab.workloads.shared.kernels_jax`) measured,
the best matmul profiled with XLA's compiled program."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from tpulab.backends import Runtime
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.running import CancelToken, Programs, Sink
from tpulab.workloads.shared.kernels import Kernel, measure, placed, profile_best
from tpulab.workloads.shared.kernels_jax import builder


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    p, placement = placed(w, p, sink, cancel, runtime)
    build = builder(p["seed"], placement.devices[0])
    profile_best(p, measure(p, build, sink, cancel), build, sink, cancel, runtime, compiled)


def compiled(kernel: Kernel) -> Programs:
    """The matmul as XLA compiled it for `kernel`'s shapes: the profile's ops get their FLOPs and bytes."""
    operand = jax.ShapeDtypeStruct((kernel.size, kernel.size), jnp.dtype(kernel.dtype))
    return lambda profiler: [jax.jit(jnp.matmul).lower(operand, operand).compile()]
