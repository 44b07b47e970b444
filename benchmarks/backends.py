"""The article's CNN, one steady training step on each backend, alternated in one run on this machine.

Each round runs the same Keras model and configuration (synthetic data of the real shapes, so only
compute is compared) through tpulab's worker on TensorFlow, JAX and PyTorch (Keras on torch, eager),
the order alternating, and prints one table: each backend's median steady step and first call (trace +
compile, which differs most), each as a ratio against the first backend's in the same round.

    python benchmarks/backends.py [--rounds 2] [--steps 8] [--batch-size 256] [--precision float32]
                                  [--backends tensorflow,jax,torch]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from through import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def step(args: argparse.Namespace, backend: str) -> tuple[float, float]:
    """(median steady step, first call) of one short training run."""
    from tpulab.workloads import registry

    params = {**registry()["fashion-mnist"].defaults(), "batch_size": args.batch_size, "epochs": 1,
              "steps_per_epoch": args.steps, "validation": False, "dataset": "synthetic",
              "precision": args.precision, "device": "cpu", "backend": backend}
    rec = record("fashion-mnist", params)
    assert rec.median and rec.summary.compile_seconds, rec.summary
    return rec.median, rec.summary.compile_seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--precision", default="float32")
    ap.add_argument("--backends", default="tensorflow,jax,torch", help="the first is what the others are set against")
    args = ap.parse_args()
    names = args.backends.split(",")
    steps: dict[str, list[float]] = {b: [] for b in names}
    firsts: dict[str, list[float]] = {b: [] for b in names}
    t0 = time.time()
    for r in range(args.rounds):
        for b in names if r % 2 == 0 else names[::-1]:  # which goes first alternates
            median, first = step(args, b)
            steps[b].append(median)
            firsts[b].append(first)
        print(f"round {r + 1}: " + ", ".join(f"{b} {steps[b][-1] * 1e3:.0f} ms (first {firsts[b][-1]:.1f} s)"
                                               for b in names), flush=True)
    print(f"the article's CNN (Keras), batch {args.batch_size}, {args.precision}, {args.steps} steps a run, "
          f"{args.rounds} rounds, {time.time() - t0:.0f} s")
    base = names[0]
    print(f"{'backend':<12}{'steady step':>14}{'/ ' + base:>16}{'first call':>14}{'/ ' + base:>16}")
    for b in names:
        ratio = statistics.median(s / t for s, t in zip(steps[b], steps[base]))
        first = statistics.median(s / t for s, t in zip(firsts[b], firsts[base]))
        print(f"{b:<12}{statistics.median(steps[b]) * 1e3:>11.0f} ms{ratio:>15.2f}x"
              f"{statistics.median(firsts[b]):>12.1f} s{first:>15.2f}x")

if __name__ == "__main__":
    main()
