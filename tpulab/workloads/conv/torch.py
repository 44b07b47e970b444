"""The convolution in PyTorch: `F.conv2d` on one device, eager or under `torch.compile`.

PyTorch runs on one device here (`--shards 1`; the runtime refuses more in one line), so the
modes are the article's two: `sharded`, the images and kernels held on the device and the
output reduced there to one number, fetched to the host; and `naive`, host arrays in and the
whole output copied back. Images are NCHW, PyTorch's own layout; TensorFlow's SAME padding is
padded by hand (PyTorch's 'same' takes no stride). Every call returns only once its value is
on the host (which waits for CUDA's queue), so only completed work is timed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tpulab.backends import Runtime
from tpulab.base.timing import conv_output_size
from tpulab.workloads.base import COMPILE, Params, Workload
from tpulab.workloads.running import CancelToken, Sink, begin, profile_calls
from tpulab.workloads.torch_steps import can_compile, one_program

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's SAME: ceil(size / stride) outputs, the extra pad on the far side."""
    total = max((conv_output_size(size, kernel, stride, "SAME") - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv(x: torch.Tensor, k: torch.Tensor, stride: int, pad: tuple[int, int]) -> torch.Tensor:
    if any(pad):
        x = F.pad(x, (pad[0], pad[1], pad[0], pad[1]))
    return F.conv2d(x, k, stride=stride)


def inputs(p: Params) -> tuple[np.ndarray, np.ndarray]:
    """The batch of images (NCHW) and the kernels (OIHW), from the seed, on the host, float32."""
    rng = np.random.default_rng(p["seed"])
    images = rng.standard_normal((p["batch_size"], p["channels"], p["image_size"], p["image_size"]), np.float32)
    kernel = rng.standard_normal((p["filters"], p["channels"], p["kernel_size"], p["kernel_size"]), np.float32)
    return images, kernel


def run(w: Workload, p: Params, sink: Sink, cancel: CancelToken, runtime: Runtime) -> None:
    compiled = one_program(p, w.name)
    placement, timer = begin(w, p, sink, cancel, runtime, w.describe_data(p), warmup=p["warmup"])
    device, dtype = placement.devices[0], DTYPES[p["dtype"]]
    can_compile(p[COMPILE.name], device)
    stride = p["stride"]
    pad = same_padding(p["image_size"], p["kernel_size"], stride) if p["padding"] == "SAME" else (0, 0)
    images, kernel = inputs(p)
    k = torch.from_numpy(kernel).to(device, dtype)

    if p["mode"] == "naive":
        f = compiled(lambda x, k: conv(x, k, stride, pad))

        def step() -> Any:
            out = f(torch.from_numpy(images).to(device, dtype), k).float().cpu().numpy()  # the whole output back
            return out.reshape(-1)[:1]
    else:
        x = torch.from_numpy(images).to(device, dtype)
        f = compiled(lambda x, k: conv(x, k, stride, pad).sum(dtype=torch.float32))

        def step() -> Any:
            return f(x, k).cpu().numpy()  # the host copy waits for the work to finish

    with torch.inference_mode():
        for i in range(w.total_steps(p)):
            timer.on_predict_batch_begin(i)
            timer.on_predict_batch_end(i, {"outputs": step()})
            if cancel.is_set():
                break
        profile_calls(p, sink, cancel, runtime, step)
