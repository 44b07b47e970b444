"""tpulab's conv timing against a hand-written tf.function of the same shape, alternated in one run.

Prints ratios (the machine is noisy, absolute times are not comparable across runs):
  sharded/baseline: what tpulab's instrument (Keras predict + StepTimer + worker) costs; goal <= 1.05x
  naive/baseline:   the article's lesson, host arrays in and the whole output out, as a ratio

    python benchmarks/conv_overhead.py [--rounds 3] [--iterations 5] [--batch-size 128] [--image-size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINE = r"""
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
"""


def baseline(args) -> float:
    out = subprocess.run([sys.executable, "-c", BASELINE, str(args.batch_size), str(args.image_size),
                          str(args.iterations), "1"], capture_output=True, text=True, check=True,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return json.loads(out.stdout)


def tpulab(args, mode: str) -> float:
    from tpulab.runner import Run
    from tpulab.runtime.detect import detect
    from tpulab.workloads import WORKLOADS

    params = {**WORKLOADS["conv"].defaults(), "batch_size": args.batch_size, "image_size": args.image_size,
              "iterations": args.iterations, "warmup": 1, "mode": mode}
    run = Run("conv", params, detect())
    for _ in run.events():
        pass
    rec = run.recorder.record()
    assert rec["status"] == "finished", rec["error"]
    return rec["summary"]["step_seconds"]["median"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--image-size", type=int, default=256)
    args = ap.parse_args()
    sharded, naive = [], []
    t0 = time.time()
    for r in range(args.rounds):
        base = baseline(args)
        sharded.append(tpulab(args, "sharded") / base)
        base2 = baseline(args)
        naive.append(tpulab(args, "naive") / base2)
        print(f"round {r + 1}: sharded/baseline {sharded[-1]:.3f}x  naive/baseline {naive[-1]:.3f}x", flush=True)
    print(f"conv {args.batch_size}x{args.image_size}x{args.image_size}x3, 256 5x5 filters, stride 2, "
          f"{args.rounds} rounds, {time.time() - t0:.0f} s")
    print(f"tpulab sharded / hand-written tf.function: median {statistics.median(sharded):.3f}x (goal <= 1.05x)")
    print(f"naive (article's first attempt) / tf.function: median {statistics.median(naive):.3f}x")


if __name__ == "__main__":
    main()
