"""`calibration`: a step of exactly known work, so that a difference between two runs can be made on purpose.

Each step multiplies `matmuls` square matrices of `size` by one more, as one batched product, and fetches the sum
of the result (so the whole product is done before the clock stops). `--pad` adds products that the step does
but does not count as its work: `--matmuls 100 --pad 0.05` is the same counted work as `--matmuls 100` in 5% more
time, a known slowdown a comparison must find. `tpulab calibrate` runs it in fresh processes to measure how far
alike runs differ on this machine (`tpulab.engine.calibrate`).
"""

from __future__ import annotations

from tpulab.base.charts import GFLOPS, step_time
from tpulab.workloads.base import BACKEND, DEVICE, Limits, ParamError, Params, ParamSpec, RunnerAt, Workload

PARAMS = (
    ParamSpec("size", int, 96, "rows and columns of each matrix", 8, 4096),
    ParamSpec("matmuls", int, 100, "matrix products per step: the work a step counts (100: --pad 0.03 is 3 more)",
              1, 10000),
    ParamSpec("pad", float, 0.0, "products a step does beyond --matmuls, as a fraction of it, not counted as its "
              "work: a known slowdown (0.05 makes a step 1.05x as long for the same work)", 0.0, 1.0, tunes=False),
    ParamSpec("iterations", int, 500, "timed steps after the first call and the warm-up (about a second here: a "
              "level timed over a tenth of one moves with the machine)", 1, 100000),
    ParamSpec("warmup", int, 2, "steps after the first call left out of the figures", 0, 1000, advanced=True),
    ParamSpec("seed", int, 0, "seed of the random matrices", 0, 2**31 - 1, tunes=False),
    DEVICE,
    BACKEND,
)


def padded(p: Params) -> int:
    """The products a step does: `matmuls`, and its pad."""
    return int(p["matmuls"]) + round(p["matmuls"] * p["pad"])


class Calibration(Workload):
    name = "calibration"
    title = "Calibration"
    summary = ("A step of exactly known work (a batch of square matrix products): what `tpulab calibrate` times in "
               "fresh processes for this machine's noise floor, and a known difference with --pad.")
    params = PARAMS
    presets = {"smoke": {"size": 32, "matmuls": 8, "iterations": 10, "warmup": 1}}
    unit = "step"
    charts = (step_time("step"), GFLOPS)
    sizes = ("size", "matmuls")
    runners = {"tensorflow": RunnerAt("tpulab.workloads.calibration.tf:run"),
               "jax": RunnerAt("tpulab.workloads.calibration.jax:run"),
               "torch": RunnerAt("tpulab.workloads.calibration.torch:run")}

    def flops_per_step(self, p: Params) -> float:
        return 2.0 * p["matmuls"] * p["size"] ** 3  # the counted products only: a pad is time without work

    def total_steps(self, p: Params) -> int:
        return int(1 + p["warmup"] + p["iterations"])

    def batch_size(self, p: Params) -> int:
        return 1

    def shorten(self, p: Params, steps: int) -> Params:
        return {**p, "iterations": steps}

    def check(self, p: Params, limits: Limits) -> None:
        """A pad is a whole number of products, so that the slowdown it makes is the one asked for."""
        extra = p["matmuls"] * p["pad"]
        if abs(extra - round(extra)) > 1e-9:
            raise ParamError("pad", f"--pad x --matmuls must be a whole number of products (got {p['pad']:g} x "
                             f"{p['matmuls']} = {extra:g}): e.g. --matmuls 100 --pad 0.03")

    def describe_data(self, p: Params) -> str:
        pad = f", {padded(p) - p['matmuls']} uncounted" if padded(p) > p["matmuls"] else ""
        return f"{padded(p)} random {p['size']}x{p['size']} float32 matrices{pad} (seed {p['seed']})"


CALIBRATION = Calibration()
