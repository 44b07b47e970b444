"""A decoder-only language model trained with Keras (`workload`), its blocks the shared decoder's
(`tpulab.workloads.shared.decoder_keras`), run by the shared Keras runner."""

from tpulab.workloads.transformer.workload import TRANSFORMER, flops_per_token, matmul_parameters, parameters

__all__ = ["TRANSFORMER", "flops_per_token", "matmul_parameters", "parameters"]
