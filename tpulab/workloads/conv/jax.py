"""The convolution on JAX: the same three modes, timed by the same step timer (`StepTimes`).

Dispatch is asynchronous in JAX: a jitted call returns before the work is done. Every mode
therefore stops the clock only after a value that depends on the whole output reached the host.
The first call (trace and compile) is reported apart, as on TensorFlow.

- sharded: the global batch lives on N devices, each holding its slice; one jitted program
  convolves and reduces it to one sum (XLA partitions it over the mesh).
- batch-parallel: the article's `batch_parallel`, as `shard_map`: each device runs the op on its
  slice and returns its own sum; all N sums are fetched. It runs on host CPU devices, GPUs and
  TPU cores alike.
- naive: the article's first attempt: host arrays in, the whole output copied back, one device
  after another.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from tpulab.backends import Placement, Runtime
from tpulab.backends.jax_cost import bytes_accessed
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.running import CancelToken, Programs, Sink, begin, profile_calls


def conv(x: jax.Array, k: jax.Array, stride: int, padding: str) -> jax.Array:
    return jax.lax.conv_general_dilated(x, k, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_sum(x: jax.Array, k: jax.Array, stride: int, padding: str) -> jax.Array:
    """The convolution reduced to one float32 number: it depends on every output element."""
    return jnp.sum(conv(x, k, stride, padding), dtype=jnp.float32)


def inputs(p: Params) -> tuple[np.ndarray, np.ndarray]:
    """The global batch of images and the kernels, from the seed, on the host."""
    rng = np.random.default_rng(p["seed"])
    dtype = jnp.dtype(p["dtype"])
    images = rng.standard_normal((p["batch_size"], p["image_size"], p["image_size"], p["channels"]), np.float32)
    kernel = rng.standard_normal((p["kernel_size"], p["kernel_size"], p["channels"], p["filters"]), np.float32)
    return images.astype(dtype), kernel.astype(dtype)


def shard_map(f: Any, mesh: jax.sharding.Mesh, in_specs: Any, out_specs: Any) -> Any:
    """`jax.shard_map` (JAX >= 0.7), or its experimental home in older releases."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    from jax.experimental.shard_map import shard_map as experimental

    return experimental(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def batch_parallel(p: Params, mesh: jax.sharding.Mesh) -> Any:
    """The article's call, fixed: every shard returns the sum of its convolution, and all N sums are added.

    The sums are added on the device so that the total is one replicated number, which every
    process of a multi-host run can fetch.
    """
    def shard(x: jax.Array, k: jax.Array) -> jax.Array:
        return conv_sum(x, k, p["stride"], p["padding"]).reshape(1)

    per_shard = shard_map(shard, mesh, in_specs=(P("batch"), P()), out_specs=P("batch"))
    return jax.jit(lambda x, k: jnp.sum(per_shard(x, k)))


def on_mesh(p: Params, placement: Placement) -> tuple[jax.Array, jax.Array]:
    """The images split over the mesh's devices along the batch, the kernels on every device.

    Each process places only the slices its own devices hold (on one process: all of them).
    """
    mesh = placement.handle
    images, kernel = inputs(p)
    return (jax.make_array_from_callback(images.shape, NamedSharding(mesh, P("batch")), lambda i: images[i]),
            jax.make_array_from_callback(kernel.shape, NamedSharding(mesh, P()), lambda i: kernel[i]))


def step_bytes(p: Params) -> float | None:
    """The bytes one convolution-and-sum of the global batch accesses, as XLA counts them."""
    dtype = jnp.dtype(p["dtype"])
    images = (p["batch_size"], p["image_size"], p["image_size"], p["channels"])
    kernel = (p["kernel_size"], p["kernel_size"], p["channels"], p["filters"])
    return bytes_accessed(partial(conv_sum, stride=p["stride"], padding=p["padding"]),
                          jax.ShapeDtypeStruct(images, dtype), jax.ShapeDtypeStruct(kernel, dtype))


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"],
                                 bytes_per_step=step_bytes(p))
    programs: Programs | None = None
    if p["mode"] == "naive":
        step = naive(p, placement)
    else:
        x, k = on_mesh(p, placement)
        f = (batch_parallel(p, placement.handle) if p["mode"] == "batch-parallel"
             else jax.jit(partial(conv_sum, stride=p["stride"], padding=p["padding"])))

        def step() -> np.ndarray:
            return np.asarray(f(x, k))  # the host copy waits for the work to finish

        def programs(profiler: Any) -> list[Any]:
            return [f.lower(x, k).compile()]

    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": step()})
        if cancel.is_set():
            break
    profile_calls(p, sink, cancel, runtime, step, programs)


def naive(p: Params, placement: Placement) -> Any:
    """Host arrays in, the whole output out, device after device: what the article first timed."""
    images, kernel = inputs(p)
    slices = np.split(images, len(placement.devices))
    f = jax.jit(partial(conv, stride=p["stride"], padding=p["padding"]))

    def step() -> np.ndarray:
        firsts = []
        for device, part in zip(placement.devices, slices):
            out = np.asarray(f(jax.device_put(part, device), jax.device_put(kernel, device)))
            firsts.append(out.flat[0])
        return np.array(firsts, dtype=np.float32)

    return step
