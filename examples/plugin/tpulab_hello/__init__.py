"""A workload named `hello`: one square matrix product per step, and its sum fetched to the host.

The declaration imports no framework; each runner is imported only in tpulab's worker.
"""

from __future__ import annotations

from typing import Any

from tpulab.base.figures import LOWER, Figure
from tpulab.workloads.base import BACKEND, DEVICE, Limits, Params, ParamSpec, SummaryPart, Workload
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
    figures = (  # its own, beside the step time every run has: each front end shows them as declared here
        Figure(name="matrix_bytes", label="matrix", unit="B"),
        Figure(name="slowest_s", label="slowest product", unit="s", better=LOWER, compare=True),
    )

    def flops_per_step(self, p: Params) -> float:
        return 2.0 * p["size"] ** 3  # a multiply and an add per term

    def total_steps(self, p: Params) -> int:
        return 1 + p["iterations"]

    def batch_size(self, p: Params) -> int:
        return 1  # one product per step

    def check(self, p: Params, limits: Limits) -> None:
        """Nothing to check across parameters: one device, any size."""

    def summary_part(self, steps: Any, started: Any, ceilings: Any, p: Params, peak: Any) -> SummaryPart:
        """Its own figures: the matrix's size, and the slowest of its timed products."""
        return SummaryPart(figures={"matrix_bytes": 4.0 * p["size"] ** 2,
                                    "slowest_s": max(self.timed_seconds(steps), default=None)})


HELLO = Hello()
