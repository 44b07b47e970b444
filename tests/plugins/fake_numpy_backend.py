"""A third backend, as a plugin would write it: NumPy on the host, running tpulab's own conv.

Registered by the tests through an entry point (`tpulab.backends`), never imported by tpulab itself.
"""

from __future__ import annotations

import platform
from typing import Any

from tpulab.backends import Backend, Fitness, Placement, Runtime


class NumpyBackend(Backend):
    name = "numpy"
    title = "NumPy"
    short = "np"
    distributions = ("numpy",)
    install = "pip install numpy"
    multi_host = "NumPy runs in one process"

    def worker_env(self, device: str, shards: int, environ: Any) -> dict[str, str]:
        return {"KERAS_BACKEND": "numpy"}  # the step timer is a Keras callback; Keras's NumPy backend suffices

    def fitness(self, report: Any, device: str) -> Fitness:
        return Fitness(device == "cpu", "NumPy drives the CPU only", preference=-1)

    def runner_for(self, workload: Any) -> Any:
        return (lambda: run_conv) if workload.name == "conv" else None

    def runtime(self) -> Runtime:
        return NumpyRuntime()


BACKEND = NumpyBackend()


class NumpyRuntime(Runtime):
    """What a backend must say: where the replicas are and its versions; the base answers the rest
    (one process, no compilation cache, no allocator figures)."""

    def place(self, device: str, shards: int) -> Placement:
        from tpulab.machine.detect import detect

        return Placement(kind="cpu", name=detect().cpu.model, replicas=shards, strategy="numpy",
                         devices=["host"] * shards)

    def versions(self) -> dict[str, str]:
        import numpy as np

        return {"numpy": np.__version__, "python": platform.python_version()}


def run_conv(w: Any, p: dict[str, Any], sink: Any, cancel: Any, runtime: Any) -> None:
    """The article's convolution by windows and a tensordot (a BLAS matrix product: an einsum to the sum took 7x
    as long, and a card's conv runs up to 20 times), its sum fetched (NumPy is synchronous)."""
    import numpy as np

    from tpulab.base.timing import conv_output_size

    _, timer = w.begin(p, sink, cancel, runtime, "random NumPy images and kernels", warmup=p["warmup"])
    rng = np.random.default_rng(p["seed"])
    n, size, c, f, k, s = p["batch_size"], p["image_size"], p["channels"], p["filters"], p["kernel_size"], p["stride"]
    x = rng.standard_normal((n, size, size, c), np.float32)
    kernel = rng.standard_normal((k, k, c, f), np.float32)
    out = conv_output_size(size, k, s, p["padding"])
    if p["padding"] == "SAME":
        total = max((out - 1) * s + k - size, 0)
        x = np.pad(x, ((0, 0), (total // 2, total - total // 2), (total // 2, total - total // 2), (0, 0)))
    for i in range(w.total_steps(p)):
        timer.on_predict_batch_begin(i)
        windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, ::s, ::s][:, :out, :out]
        timer.on_predict_batch_end(i, {"outputs": np.tensordot(windows, kernel, axes=([3, 4, 5], [2, 0, 1])).sum()})
        if cancel.is_set():
            break
