"""The roofline on PyTorch: each kernel of the shared builder (`tpulab.workloads.shared.kernels_torch`)
measured, eager or compiled."""

from __future__ import annotations

import torch

from tpulab.backends import Runtime
from tpulab.workloads.base import COMPILE, Params, Workload
from tpulab.workloads.running import CancelToken, Sink
from tpulab.workloads.shared.kernels import measure, placed, profile_best
from tpulab.workloads.torch_steps import can_compile, one_program
from tpulab.workloads.shared.kernels_torch import builder


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    compiled = one_program(p, w.name)
    p, placement = placed(w, p, sink, cancel, runtime)
    device = placement.devices[0]
    can_compile(p[COMPILE.name], device)
    build = builder(p["seed"], device, compiled)
    with torch.inference_mode():
        profile_best(p, measure(p, build, sink, cancel), build, sink, cancel, runtime)
