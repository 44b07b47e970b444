"""The roofline's matmul against a hand-written one of the same size, and the measured ceilings against the
spec estimate, alternated in one run.

For each backend and round: a hand-written baseline in a fresh process (JAX: `jax.jit(a @ b)` with
`block_until_ready`; TensorFlow: a `tf.function` matmul, its result fetched; PyTorch: `torch.matmul`, the CUDA
queue waited for), then tpulab's roofline
worker at that single size. Prints ratios (the machine is noisy: absolute times are not comparable
across runs):
  roofline/baseline: what tpulab's kernel and instrument cost; goal <= 1.05x on TensorFlow and JAX, 1.02x on torch
  ceiling/spec:      the best matmul FLOP/s and the copy's bytes/s tpulab measured, against the spec
                     estimate of this machine's peak (on a VM: the reported clock x a boost allowance)

    python benchmarks/roofline.py [--rounds 3] [--size 1024] [--iterations 10] [--copy-mib 256]
                                  [--backends jax,tensorflow,torch] [--device cpu]
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
    "jax": r"""
import json, sys, time, statistics
import jax
n, it, warm = (int(x) for x in sys.argv[1:4])
a = jax.random.normal(jax.random.key(0), (n, n))
b = jax.random.normal(jax.random.key(1), (n, n))
f = jax.jit(lambda a, b: a @ b)
times = []
for i in range(1 + warm + it):
    t0 = time.perf_counter(); f(a, b).block_until_ready(); times.append(time.perf_counter() - t0)
print(json.dumps([statistics.median(times[1 + warm:]), min(times[1 + warm:])]))
""",
    "tensorflow": r"""
import json, sys, time, statistics
import tensorflow as tf
n, it, warm = (int(x) for x in sys.argv[1:4])
a = tf.random.normal((n, n))
b = tf.random.normal((n, n))
f = tf.function(lambda a, b: tf.linalg.matmul(a, b))
times = []
for i in range(1 + warm + it):
    t0 = time.perf_counter(); f(a, b).numpy(); times.append(time.perf_counter() - t0)
print(json.dumps([statistics.median(times[1 + warm:]), min(times[1 + warm:])]))
""",
    "torch": r"""
import json, sys, time, statistics
import torch
n, it, warm = (int(x) for x in sys.argv[1:4])
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
a, b = torch.randn((n, n), device=device), torch.randn((n, n), device=device)
times = []
for i in range(1 + warm + it):
    t0 = time.perf_counter(); torch.matmul(a, b); torch.cuda.synchronize() if device.type == "cuda" else None
    times.append(time.perf_counter() - t0)
print(json.dumps([statistics.median(times[1 + warm:]), min(times[1 + warm:])]))
""",
}
PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}
GOALS = {"torch": 1.02}  # tpulab / hand-written; 1.05 elsewhere


def baseline(args: argparse.Namespace, backend: str) -> tuple[float, float]:
    """The hand-written matmul's median and fastest call, in a fresh process."""
    env = {**as_worker(backend, args.device), "JAX_PLATFORMS": PLATFORMS[args.device]}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-c", BASELINES[backend], str(args.size), str(args.iterations), "2"],
                         capture_output=True, text=True, check=True, env=env)
    median, fastest = json.loads(out.stdout)
    return float(median), float(fastest)


def tpulab(args: argparse.Namespace, backend: str):  # -> RunRecord
    from tpulab.workloads import registry

    params = {**registry()["roofline"].defaults(), "min_size": args.size, "max_size": args.size,
              "dtypes": "float32", "copy_mib": args.copy_mib, "iterations": args.iterations, "warmup": 2,
              "device": args.device, "backend": backend}
    rec = record("roofline", params)
    assert rec.median
    return rec


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f}x (rounds {min(values):.3f}-{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--copy-mib", type=int, default=256)
    ap.add_argument("--backends", default="jax,tensorflow,torch")
    ap.add_argument("--device", default="cpu", choices=tuple(PLATFORMS))
    args = ap.parse_args()
    backends = args.backends.split(",")
    ratios: dict[str, list[float]] = {b: [] for b in backends}
    fastest: dict[str, list[float]] = {b: [] for b in backends}
    records = []
    t0 = time.time()
    for r in range(args.rounds):
        line = []
        for backend in backends:
            base, base_min = baseline(args, backend)
            rec = tpulab(args, backend)
            records.append(rec)
            ratios[backend].append(rec.median / base)
            fastest[backend].append(rec.summary.step_seconds.min / base_min)
            line.append(f"{backend} roofline/baseline {rec.median / base:.3f}x "
                        f"({rec.median * 1e3:.2f} ms vs {base * 1e3:.2f} ms)")
        print(f"round {r + 1}: " + ", ".join(line), flush=True)
    print(f"float32 matmul n={args.size} on {args.device}, {args.rounds} rounds, {time.time() - t0:.0f} s")
    for backend, values in ratios.items():
        print(f"{backend}: tpulab roofline / hand-written matmul time, {spread(values)} (goal <= {GOALS.get(backend, 1.05)}x); "
              f"fastest calls: {spread(fastest[backend])}")
    best = max(records, key=lambda r: r.summary.gflops_per_s or 0)
    s = best.summary
    print(f"measured ceiling {s.gflops_per_s:.1f} GFLOP/s ({best.backend}, n={args.size}) = "
          f"{s.gflops_per_s * 1e9 / s.peak_flops:.1%} of the spec estimate {s.peak_flops / 1e9:.1f} GFLOP/s "
          f"({s.peak_source})")
    copies = [r.summary.gbytes_per_s for r in records if r.summary.gbytes_per_s]
    print(f"measured memory ceiling {max(copies):.2f} GB/s read+written ({args.copy_mib} MiB copy; median over "
          f"runs {statistics.median(copies):.2f} GB/s); no spec bandwidth is known to compare it with")


if __name__ == "__main__":
    main()
