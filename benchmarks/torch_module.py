"""A user's nn.Module through tpulab against a hand-written training loop, and what --profile costs, on torch.

1. The step: examples/models/torch_mlp.py's module trained with Adam on random batches, by a bare loop in a
   fresh process (set up as the torch worker is: `through.as_worker`) and by
   `tpulab run model` (eager); the ratio of the steady medians (goal <= 1.03x).
2. --profile: the same run with and without it; the ratio of the steady medians (goal <= 1.02x: the traced
   steps come after the timed ones). Each round alternates which side goes first.

    python benchmarks/torch_module.py [--rounds 3] [--steps 60] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from through import as_worker, record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODEL = "examples/models/torch_mlp.py:build"

BASELINE = r"""
import json, statistics, sys, time
import torch
from torch import nn
b, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
batches = [(torch.randn(b, 64), torch.randint(0, 10, (b,))) for _ in range(2)]
times = []
for i in range(steps):
    x, y = batches[i % 2]
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    float(loss.detach())
    times.append(time.perf_counter() - t0)
print(json.dumps(statistics.median(times[1:])))
"""


def baseline(args: argparse.Namespace) -> float:
    env = as_worker("torch")
    out = subprocess.run([sys.executable, "-c", BASELINE, str(args.batch_size), str(args.steps)],
                         capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    return float(json.loads(out.stdout))


def tpulab(args: argparse.Namespace, profile: bool) -> float:
    values = {"model": MODEL, "batch_size": args.batch_size, "epochs": 1, "steps_per_epoch": args.steps,
              "predict_steps": 0, "device": "cpu", "backend": "torch", "profile": profile}
    return float(record("model", values).median)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args()
    os.chdir(ROOT)
    steps, profiles = [], []
    for r in range(args.rounds):
        if r % 2:
            ours, base = tpulab(args, False), baseline(args)
            profiled = tpulab(args, True)
        else:
            base, ours = baseline(args), tpulab(args, False)
            profiled, ours_again = tpulab(args, True), tpulab(args, False)
            ours = statistics.median([ours, ours_again])
        steps.append(ours / base)
        profiles.append(profiled / ours)
        print(f"round {r + 1}: step tpulab/bare {steps[-1]:.3f}x ({ours * 1e3:.2f} ms against {base * 1e3:.2f} ms), "
              f"--profile/without {profiles[-1]:.3f}x", flush=True)
    print(f"torch_mlp, batch {args.batch_size}, {args.steps} steps, {args.rounds} rounds")
    for name, values, goal in (("nn.Module step: tpulab / hand-written loop", steps, 1.03),
                               ("steady step with --profile / without", profiles, 1.02)):
        print(f"{name}: median {statistics.median(values):.3f}x (rounds {min(values):.3f}-{max(values):.3f}) "
              f"(goal <= {goal:.2f}x)")


if __name__ == "__main__":
    main()
