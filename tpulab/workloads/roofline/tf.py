"""The roofline on TensorFlow: each kernel of the shared builder (`tpulab.workloads.shared.kernels_tf`)
measured, the best matmul profiled with its traced graph."""

from __future__ import annotations

import tensorflow as tf

from tpulab.backends import Runtime
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.running import CancelToken, Programs, Sink
from tpulab.workloads.shared.kernels import Kernel, measure, placed, profile_best
from tpulab.workloads.shared.kernels_tf import builder, matmul


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    p, placement = placed(w, p, sink, cancel, runtime)
    build = builder(p["seed"], placement.devices[0])
    profile_best(p, measure(p, build, sink, cancel), build, sink, cancel, runtime, traced)


def traced(kernel: Kernel) -> Programs:
    """The matmul's graph for `kernel`'s shapes: the profile's kernels get their FLOPs and bytes."""
    operand = tf.TensorSpec((kernel.size, kernel.size), tf.dtypes.as_dtype(kernel.dtype))
    return lambda profiler: [matmul.get_concrete_function(operand, operand)]
