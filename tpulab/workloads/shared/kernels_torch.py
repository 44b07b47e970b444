"""The timed kernels on PyTorch (the roofline's, and decode's bandwidth copy): `torch.matmul` and an in-place copy,
each made on the device, eager or compiled.

Each call returns once its output is written (the CPU's ops are synchronous; CUDA's queue is waited
for). The copy negates its array in place, as STREAM's kernels do (and as the JAX runner's donated
buffer does): a fresh output per call would time the allocator's first touch of every page.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tpulab.backends.torch import synchronize
from tpulab.workloads.shared.kernels import Call, Kernel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def builder(seed: int, device: Any, compiled: Callable[[Any], Any] = lambda f: f) -> Callable[[Kernel], Call]:
    def build(kernel: Kernel) -> Call:
        generator = torch.Generator(device=device).manual_seed(seed)
        dtype = DTYPES[kernel.dtype]
        if kernel.kind == "matmul":
            n = kernel.size
            a, b = (torch.randn((n, n), generator=generator, device=device, dtype=dtype) for _ in range(2))
            matmul = compiled(torch.matmul)

            def call() -> Any:
                out = matmul(a, b)
                synchronize(device)
                return out

            return call
        x = torch.ones(kernel.elements(), device=device, dtype=dtype)  # a copy's time does not depend on its values
        negate = compiled(torch.Tensor.neg_)

        def copy() -> Any:
            negate(x)
            synchronize(device)
            return x

        return copy

    return build

