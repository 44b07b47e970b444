"""tpulab's conv timing against a hand-written program of the same shape, alternated in one run.

For each backend, a hand-written baseline in a fresh process (TensorFlow: a tf.function returning
`reduce_sum(conv)`; JAX: `jax.jit` of the same, its result fetched; PyTorch: `F.conv2d` in NCHW, its sum
fetched), then tpulab's worker.
Prints ratios (the machine is noisy, absolute times are not comparable across runs):
  sharded/baseline: what tpulab's instrument costs; goal <= 1.05x on TensorFlow and JAX, 1.02x on torch
  naive/baseline:   the article's lesson, host arrays in and the whole output out, as a ratio
  jax/tensorflow:   the same convolution, tpulab's sharded mode on each backend

    python benchmarks/conv_overhead.py [--rounds 3] [--iterations 5] [--batch-size 128] [--image-size 256]
                                       [--backends tensorflow,jax,torch]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from through import as_worker, record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINES = {
    "tensorflow": r"""
import json, sys, time, statistics
import tensorflow as tf
b, s, it, warm = (int(x) for x in sys.argv[1:5])
images = tf.Variable(tf.random.normal([b, s, s, 3]))
kernel = tf.Variable(tf.random.normal([5, 5, 3, 256]))
@tf.function
def conv():
    return tf.reduce_sum(tf.nn.conv2d(images, kernel, 2, "SAME"))
times = []
for i in range(1 + warm + it):
    t0 = time.perf_counter(); conv().numpy(); times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times[1 + warm:])))
""",
    "jax": r"""
import json, sys, time, statistics
import jax, jax.numpy as jnp
b, s, it, warm = (int(x) for x in sys.argv[1:5])
images = jax.random.normal(jax.random.key(0), (b, s, s, 3))
kernel = jax.random.normal(jax.random.key(1), (5, 5, 3, 256))
@jax.jit
def conv(x, k):
    y = jax.lax.conv_general_dilated(x, k, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.sum(y)
times = []
for i in range(1 + warm + it):
    t0 = time.perf_counter(); float(conv(images, kernel)); times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times[1 + warm:])))
""",
    "torch": r"""
import json, sys, time, statistics
import torch, torch.nn.functional as F
b, s, it, warm = (int(x) for x in sys.argv[1:5])
images = torch.randn(b, 3, s, s)
kernel = torch.randn(256, 3, 5, 5)
pad = max((-(-s // 2) - 1) * 2 + 5 - s, 0)
def conv():
    return F.conv2d(F.pad(images, (pad // 2, pad - pad // 2, pad // 2, pad - pad // 2)), kernel, stride=2).sum()
times = []
with torch.inference_mode():
    for i in range(1 + warm + it):
        t0 = time.perf_counter(); float(conv()); times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times[1 + warm:])))
""",
}
GOAL = {"tensorflow": 1.05, "jax": 1.05, "torch": 1.02}  # tpulab's sharded conv against the bare loop


def baseline(args: argparse.Namespace, backend: str) -> float:
    env = as_worker(backend)
    out = subprocess.run([sys.executable, "-c", BASELINES[backend], str(args.batch_size), str(args.image_size),
                          str(args.iterations), "1"], capture_output=True, text=True, check=True, env=env)
    return float(json.loads(out.stdout))


def tpulab(args: argparse.Namespace, backend: str, mode: str) -> float:
    from tpulab.workloads import registry

    params = {**registry()["conv"].defaults(), "batch_size": args.batch_size, "image_size": args.image_size,
              "iterations": args.iterations, "warmup": 1, "mode": mode, "device": "cpu", "backend": backend}
    return float(record("conv", params).median)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--image-size", type=int, default=256)
    ap.add_argument("--backends", default="tensorflow,jax")
    args = ap.parse_args()
    backends = args.backends.split(",")
    ratios: dict[str, list[float]] = {}
    sharded: dict[str, list[float]] = {b: [] for b in backends}
    t0 = time.time()
    for r in range(args.rounds):
        line = []
        for backend in backends:
            for mode in ("sharded", "naive"):
                base = baseline(args, backend)
                seconds = tpulab(args, backend, mode)
                if mode == "sharded":
                    sharded[backend].append(seconds)
                ratios.setdefault(f"{backend} {mode}", []).append(seconds / base)
                line.append(f"{backend} {mode}/baseline {seconds / base:.3f}x")
        if {"jax", "tensorflow"} <= set(backends):
            ratios.setdefault("jax/tensorflow", []).append(sharded["jax"][-1] / sharded["tensorflow"][-1])
            line.append(f"tpulab jax/tensorflow {ratios['jax/tensorflow'][-1]:.3f}x")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)
    print(f"conv {args.batch_size}x{args.image_size}x{args.image_size}x3, 256 5x5 filters, stride 2, "
          f"{args.rounds} rounds, {time.time() - t0:.0f} s")
    for name, values in ratios.items():
        goal = f" (goal <= {GOAL[name.split()[0]]:.2f}x)" if name.endswith("sharded") else ""
        what = "time per iteration" if "/" in name else "tpulab / hand-written baseline"
        print(f"{name}: {what}, median {statistics.median(values):.3f}x "
              f"(rounds {min(values):.3f}-{max(values):.3f}){goal}")


if __name__ == "__main__":
    main()
