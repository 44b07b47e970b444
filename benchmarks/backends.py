"""The article's CNN, one steady training step on each backend, alternated in one run on this machine.

Each round runs the same configuration (synthetic data of the real shapes, so only compute is
compared) through tpulab's worker on TensorFlow, then on JAX, and prints the ratio of their median
steady step times, plus each backend's first call (trace + compile), which differs most.

    python benchmarks/backends.py [--rounds 2] [--steps 8] [--batch-size 256] [--precision float32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def step(args: argparse.Namespace, backend: str) -> tuple[float, float]:
    """(median steady step, first call) of one short training run."""
    from tpulab.engine.runner import run_job
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect
    from tpulab.workloads import registry

    params = {**registry()["fashion-mnist"].defaults(), "batch_size": args.batch_size, "epochs": 1,
              "steps_per_epoch": args.steps, "validation": False, "dataset": "synthetic",
              "precision": args.precision, "device": "cpu", "backend": backend}
    run = run_job(resolve("fashion-mnist", params, detect()), detect())
    for _ in run.events():
        pass
    rec = run.recorder.record()
    assert rec.status == "finished" and rec.median and rec.summary.compile_seconds, rec.error
    return rec.median, rec.summary.compile_seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--precision", default="float32")
    args = ap.parse_args()
    ratios, firsts = [], []
    t0 = time.time()
    for r in range(args.rounds):
        tf_step, tf_first = step(args, "tensorflow")
        jax_step, jax_first = step(args, "jax")
        ratios.append(jax_step / tf_step)
        firsts.append(jax_first / tf_first)
        print(f"round {r + 1}: steady step jax/tensorflow {ratios[-1]:.2f}x "
              f"(tensorflow {tf_step * 1e3:.0f} ms, jax {jax_step * 1e3:.0f} ms); "
              f"first call jax/tensorflow {firsts[-1]:.2f}x", flush=True)
    print(f"the article's CNN, batch {args.batch_size}, {args.precision}, {args.steps} steps a run, "
          f"{args.rounds} rounds, {time.time() - t0:.0f} s")
    print(f"steady step, JAX / TensorFlow: median {statistics.median(ratios):.2f}x "
          f"(rounds {min(ratios):.2f}-{max(ratios):.2f}); first call: median {statistics.median(firsts):.2f}x")


if __name__ == "__main__":
    main()
