"""The calibration step on PyTorch: one batched product, its sum fetched to the host (which waits for the work)."""

from __future__ import annotations

import numpy as np
import torch

from tpulab.backends import Runtime
from tpulab.workloads.base import Params, Workload
from tpulab.workloads.calibration.workload import padded
from tpulab.workloads.running import CancelToken, Sink, begin


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    rng = np.random.default_rng(p["seed"])
    device = placement.devices[0]
    a = torch.from_numpy(rng.standard_normal((padded(p), p["size"], p["size"]), np.float32)).to(device)
    b = torch.from_numpy(rng.standard_normal((p["size"], p["size"]), np.float32)).to(device)
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        timer.on_predict_batch_end(i, {"outputs": float(torch.sum(a @ b))})
        if cancel.is_set():
            break
