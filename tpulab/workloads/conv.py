"""The seed's first experiment: one convolution, timed on CPU, GPU or TPU (declaration only)."""

from __future__ import annotations

from tpulab.core.timing import conv_flops
from tpulab.workloads.base import BACKEND, DEVICE, PROCESSES, Chart, Limits, ParamError, Params, ParamSpec, Workload, check_shards

MODES = ("sharded", "naive", "batch-parallel")

PARAMS = (
    ParamSpec("batch_size", int, 128, "images per iteration, split evenly across the shards (global batch)",
              1, 4096, unit="images", term="batch"),
    ParamSpec("image_size", int, 256, "height and width of each random image", 4, 2048, unit="px"),
    ParamSpec("channels", int, 3, "input channels per image (3 = RGB)", 1, 1024),
    ParamSpec("filters", int, 256, "convolution kernels, i.e. output channels", 1, 4096, term="convolution"),
    ParamSpec("kernel_size", int, 5, "height and width of each kernel", 1, 15, unit="px", term="convolution"),
    ParamSpec("stride", int, 2, "step between kernel positions", 1, 8, unit="px", term="stride"),
    ParamSpec("padding", str, "SAME", "SAME keeps ceil(size/stride) outputs; VALID drops the border",
              choices=("SAME", "VALID"), term="padding"),
    ParamSpec("dtype", str, "float32", "number format of images and kernels",
              choices=("float32", "bfloat16", "float16"), term="precision"),
    ParamSpec("iterations", int, 10, "timed iterations after warm-up", 1, 100000),
    ParamSpec("warmup", int, 2, "iterations run after the first call and left out of the statistics", 0, 1000,
              term="warm-up"),
    ParamSpec("shards", int, 1, "replicas the batch is split over (1 = no sharding)", 1, 64, term="shard"),
    ParamSpec("mode", str, "sharded", "sharded: a compiled step per replica, each holding its slice of the "
              "images, output reduced on device; naive: the article's first attempt, host arrays in, whole output "
              "out, one device after another; batch-parallel: the article's call (TensorFlow: TPU only; JAX: "
              "shard_map on any device)", choices=MODES, term="mode"),
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


def flops(p: Params) -> float:
    return conv_flops(p["batch_size"], p["image_size"], p["image_size"], p["channels"], p["filters"],
                      p["kernel_size"], p["stride"], p["padding"])


def check(p: Params, limits: Limits) -> None:
    check_shards(p, limits)
    if (p["mode"] == "batch-parallel" and limits.device_for(p["device"]) != "tpu"
            and limits.backend_for(p["backend"], p["device"]) == "tensorflow"):
        raise ParamError("mode", "--mode batch-parallel needs a TPU on TensorFlow (tf.compat.v1.tpu.batch_parallel); "
                         "use --backend jax (shard_map runs it on any device) or --mode sharded")
    if p["mode"] == "naive" and p["processes"] > 1:
        raise ParamError("mode", "--mode naive runs one device after another on one host: use --mode sharded or "
                         "batch-parallel with --processes")
    if p["padding"] == "VALID" and p["kernel_size"] > p["image_size"]:
        raise ParamError("kernel_size", f"--kernel-size must be at most --image-size {p['image_size']} "
                         f"with VALID padding (got {p['kernel_size']})")


def total_steps(p: Params) -> int:
    return 1 + p["warmup"] + p["iterations"]


CONV = Workload(
    name="conv",
    title="Raw convolution",
    summary="The article's first test: 128 random 256x256x3 images, 256 kernels of 5x5, stride 2. "
            "Shows what one op costs, and what an unconsumed output hides.",
    params=PARAMS,
    runners={"tensorflow": "tpulab.workloads.conv_tf", "jax": "tpulab.workloads.conv_jax"},
    flops_per_step=flops,
    check=check,
    total_steps=total_steps,
    compute_dtype=lambda p: p["dtype"],
    shorten=lambda p, steps: {**p, "iterations": steps},
    presets={
        "smoke": {"batch_size": 8, "image_size": 32, "filters": 16, "iterations": 5, "warmup": 1},
        "article": {},
        "article-sharded": {"shards": 8},
    },
    unit="iteration",
    charts=(Chart("time", "ms per iteration"), Chart("gflops", "GFLOP/s")),
)
