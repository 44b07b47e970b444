"""The seed's first experiment, one convolution timed (`workload`), with a runner per backend (`jax`, `tf`,
`torch`), each imported in the worker only."""

from tpulab.workloads.conv.workload import CONV, MODES, Conv, batch_parallel_devices, batch_parallel_refused

__all__ = ["CONV", "MODES", "Conv", "batch_parallel_devices", "batch_parallel_refused"]
