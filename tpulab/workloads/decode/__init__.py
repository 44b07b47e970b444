"""LLM decode: a decoder-only model generating tokens from a KV cache (`workload`), its arithmetic, figures
and loop, and a runner per backend (`jax`, `tf`, `torch`), each imported in the worker only."""

from tpulab.workloads.decode.workload import DECODE, LLMDecode, shape

__all__ = ["DECODE", "LLMDecode", "shape"]
