"""The seed's first experiment: one convolution, timed on CPU, GPU or TPU (declaration only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpulab.backends import registry
from tpulab.base.charts import GFLOPS, step_time
from tpulab.base.timing import conv_flops
from tpulab.workloads.base import (
    BACKEND,
    DEVICE,
    PROCESSES,
    SHARDS,
    Limits,
    ParamError,
    Params,
    ParamSpec,
    Workload,
    batch_size,
    check_shards,
)
from tpulab.workloads.running import RunnerAt

if TYPE_CHECKING:
    from tpulab.backends import Backend

BATCH_PARALLEL = "batch-parallel"
ALL_DEVICES = ("cpu", "gpu", "tpu")
MODES = ("sharded", "naive", BATCH_PARALLEL)

PARAMS = (
    batch_size(128, 4096, unit="images", what="images per iteration"),
    ParamSpec("image_size", int, 256, "height and width of each random image", 4, 2048, unit="px"),
    ParamSpec("channels", int, 3, "input channels per image (3 = RGB)", 1, 1024),
    ParamSpec("filters", int, 256, "convolution kernels, i.e. output channels", 1, 4096, term="convolution"),
    ParamSpec("kernel_size", int, 5, "height and width of each kernel", 1, 15, unit="px", term="convolution"),
    ParamSpec("stride", int, 2, "step between kernel positions", 1, 8, unit="px", term="stride"),
    ParamSpec("padding", str, "SAME", "SAME keeps ceil(size/stride) outputs; VALID drops the border",
              options=("SAME", "VALID"), term="padding"),
    ParamSpec("dtype", str, "float32", "number format of images and kernels",
              options=("float32", "bfloat16", "float16"), term="precision"),
    ParamSpec("iterations", int, 10, "timed iterations after warm-up", 1, 100000),
    ParamSpec("warmup", int, 2, "iterations run after the first call and left out of the statistics", 0, 1000,
              term="warm-up"),
    SHARDS,
    ParamSpec("mode", str, "sharded", "sharded: a compiled step per replica, each holding its slice of the "
              "images, output reduced on device; naive: the article's first attempt, host arrays in, whole output "
              "out, one device after another; batch-parallel: the article's call (TensorFlow: TPU only; JAX: "
              "shard_map on any device)", options=MODES, term="mode"),
    DEVICE,
    BACKEND,
    PROCESSES,
    ParamSpec("seed", int, 0, "seed of the random images and kernels", 0, 2**31 - 1, advanced=True,
              tunes=False),
)


DATA_BY_MODE = {
    "sharded": "random images and kernels (seed {seed}) held on each replica's device",
    "naive": "random numpy images and kernels (seed {seed}) sent from the host to each shard at every call",
    "batch-parallel": "random images and kernels (seed {seed}), each shard's slice held on its device",
}


def check(p: Params, limits: Limits) -> None:
    check_shards(p, limits)
    if p["mode"] == "batch-parallel":  # (auto: checked again once the run's spec decided it)
        refused = batch_parallel_refused(p["backend"], limits.device_for(p["device"]))
        if refused:
            raise ParamError("mode", refused)
    if p["mode"] == "naive" and p["processes"] > 1:
        raise ParamError("mode", "--mode naive runs one device after another on one host: use --mode sharded or "
                         "batch-parallel with --processes")
    if p["padding"] == "VALID" and p["kernel_size"] > p["image_size"]:
        raise ParamError("kernel_size", f"--kernel-size must be at most --image-size {p['image_size']} "
                         f"with VALID padding (got {p['kernel_size']})")


def batch_parallel_devices(backend: Backend) -> tuple[str, ...]:
    """The devices conv's runner on `backend` runs batch-parallel on, as the runner declares (one declared by a
    function alone, a plugin's: every device; none where conv has no runner)."""
    runner = CONV.runner(backend)
    if runner is None:  # conv does not run there at all (llama.cpp runs decode alone)
        return ()
    return runner.modes.get(BATCH_PARALLEL, ALL_DEVICES) if isinstance(runner, RunnerAt) else ALL_DEVICES


def batch_parallel_refused(backend: str, device: str) -> str | None:
    """Why the backend named cannot run batch-parallel on `device`, and which can; None where it can."""
    found = registry()
    chosen = found.get(backend)
    if chosen is None or device in batch_parallel_devices(chosen):
        return None
    others = " or ".join(b.name for b in found.values() if device in batch_parallel_devices(b))
    devices = " or ".join(d.upper() for d in batch_parallel_devices(chosen))
    return ((f"--mode batch-parallel needs a {devices} on {chosen.title}" if devices else
             f"--mode batch-parallel does not run on {chosen.title}")
            + "; use " + (f"--backend {others} or " if others else "") + "--mode sharded")


class Conv(Workload):
    name = "conv"
    title = "Raw convolution"
    summary = ("The article's first test: 128 random 256x256x3 images, 256 kernels of 5x5, stride 2. "
               "Shows what one op costs, and what an unconsumed output hides.")
    params = PARAMS
    presets = {
        "smoke": {"batch_size": 8, "image_size": 32, "filters": 16, "iterations": 5, "warmup": 1},
        "article": {},
        "article-sharded": {"shards": 8},
    }
    unit = "iteration"
    charts = (step_time("iteration"), GFLOPS)
    how = ("mode",)
    sizes = ("image_size", "channels", "filters", "kernel_size", "stride")
    runners = {"tensorflow": RunnerAt("tpulab.workloads.conv.tf:run", modes={BATCH_PARALLEL: ("tpu",)}),  # tf.compat.v1.tpu
               "jax": RunnerAt("tpulab.workloads.conv.jax:run"),  # shard_map, on any device
               "torch": RunnerAt("tpulab.workloads.conv.torch:run", modes={BATCH_PARALLEL: ()},
                                 one_process="PyTorch's runs over several processes train a model data-parallel "
                                 "(DistributedDataParallel), and conv trains none: use --backend jax")}

    def flops_per_step(self, p: Params) -> float:
        return float(conv_flops(p["batch_size"], p["image_size"], p["image_size"], p["channels"], p["filters"],
                                p["kernel_size"], p["stride"], p["padding"]))

    def total_steps(self, p: Params) -> int:
        return int(1 + p["warmup"] + p["iterations"])

    def compute_dtype(self, p: Params) -> str:
        return str(p["dtype"])

    def shorten(self, p: Params, steps: int) -> Params:
        return {**p, "iterations": steps}

    def check(self, p: Params, limits: Limits) -> None:
        check(p, limits)

    def describe_data(self, p: Params) -> str:
        return DATA_BY_MODE[p["mode"]].format(seed=p["seed"])


CONV = Conv()
