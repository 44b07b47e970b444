"""The roofline: this machine's compute and memory ceilings, from timed matmuls and copies (`workload`), with a
runner per backend (`jax`, `tf`, `torch`) over the shared kernels (`tpulab.workloads.shared`)."""

from tpulab.workloads.roofline.workload import MATMUL_GFLOPS, ROOFLINE, Roofline

__all__ = ["MATMUL_GFLOPS", "ROOFLINE", "Roofline"]
