"""A workload named `hello`: one square matrix product per step, and its sum fetched to the host.

The declaration imports no framework; each runner is imported only in tpulab's worker.
"""

from __future__ import annotations

from tpulab.workloads.base import BACKEND, DEVICE, Limits, Params, ParamSpec, Workload
from tpulab.workloads.running import Runner


def _tensorflow() -> Runner:
    from tpulab_hello.hello_tf import run

    return run


def _jax() -> Runner:
    from tpulab_hello.hello_jax import run

    return run


class Hello(Workload):
    name = "hello"
    title = "Hello, matmul"
    summary = "A square matrix product per step: the smallest workload a plugin can add."
    params = (
        ParamSpec("size", int, 512, "rows and columns of the matrix", 1, 16384),
        ParamSpec("iterations", int, 10, "timed products after the first call", 1, 100000),
        ParamSpec("seed", int, 0, "seed of the random matrix", 0, 2**31 - 1, tunes=False),
        DEVICE,
        BACKEND,
    )
    presets = {"smoke": {"size": 64, "iterations": 3}}
    unit = "product"
    runners = {"tensorflow": _tensorflow, "jax": _jax}

    def flops_per_step(self, p: Params) -> float:
        return 2.0 * p["size"] ** 3  # a multiply and an add per term

    def total_steps(self, p: Params) -> int:
        return 1 + p["iterations"]

    def batch_size(self, p: Params) -> int:
        return 1  # one product per step

    def check(self, p: Params, limits: Limits) -> None:
        """Nothing to check across parameters: one device, any size."""


HELLO = Hello()
