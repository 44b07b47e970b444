"""ResNet-50 and the transformer through tpulab against a plain `model.fit` of the same model.

Each round runs the same configuration twice, alternating: through tpulab (its worker, pipeline,
distribution scope and StepTimer), then in a plain process that builds the very same model
(the workload's own hooks) and calls `model.fit` on numpy arrays, as a user would. Both run two
epochs of `--steps` steps and are judged by the second epoch's wall time per step (the first
holds the compile; the gaps between steps count on both sides). Prints tpulab / plain per round,
the median and the range (goal: <= 1.03), and the transformer's MFU on this machine.

    python benchmarks/models.py [--rounds 3] [--steps 8] [--backend jax]
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
from typing import Any

from through import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = {  # small sizes, so that the whole benchmark takes minutes on a 2-core CPU
    "resnet50": {"batch_size": 8, "image_size": 64, "classes": 100},
    "transformer": {"batch_size": 8, "layers": 2, "width": 128, "heads": 4, "seq_len": 128, "vocab": 2048},
}


def params(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from tpulab.workloads import registry

    return {**registry()[name].defaults(), **CASES[name], "epochs": 2, "steps_per_epoch": args.steps,
            "predict_steps": 0, "device": "cpu", "backend": args.backend}


def through_tpulab(name: str, p: dict[str, Any]) -> tuple[float, float | None]:
    """(second epoch's seconds per step, MFU) of a run through tpulab's worker."""
    rec = record(name, p)
    assert len(rec.epochs) == 2, rec.epochs
    return rec.epochs[1].seconds / p["steps_per_epoch"], rec.summary.mfu


def plain(name: str, p: dict[str, Any]) -> float:
    """The second epoch's seconds per step of a plain `model.fit`, in a fresh process like tpulab's worker."""
    env = {**os.environ, "KERAS_BACKEND": p["backend"], "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, __file__, "--plain", name, json.dumps(p)], capture_output=True, text=True,
                         env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def plain_child(name: str, p: dict[str, Any]) -> None:
    """What a user writes: build, compile, fit on arrays; epoch times from a callback that does nothing else."""
    import keras
    import numpy as np

    from tpulab.workloads import registry

    w = registry()[name]
    keras.utils.set_random_seed(p["seed"])
    model = w.build_model(p)
    w.compile_model(model, p, True if p["backend"] == "jax" else p["xla"])  # as tpulab compiles it
    d = w.data(p)
    reps = -(-p["steps_per_epoch"] * p["batch_size"] // len(d.x_train))
    x = np.concatenate([d.x_train] * reps).astype(np.float32 if d.x_train.dtype == np.uint8 else d.x_train.dtype)
    y = np.concatenate([d.y_train] * reps)
    n = p["steps_per_epoch"] * p["batch_size"]
    times: list[float] = []

    class Epochs(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            times.append(time.perf_counter())

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            times[-1] = time.perf_counter() - times[-1]

    model.fit(x[:n], y[:n], batch_size=p["batch_size"], epochs=2, callbacks=[Epochs()], verbose=0)
    print(times[1] / p["steps_per_epoch"])


def main() -> None:
    if sys.argv[1:2] == ["--plain"]:
        plain_child(sys.argv[2], json.loads(sys.argv[3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--backend", default="jax")
    ap.add_argument("--only", choices=list(CASES), help="one workload")
    args = ap.parse_args()
    t0 = time.time()
    for name in [args.only] if args.only else list(CASES):
        p = params(name, args)
        ratios, mfus = [], []
        for r in range(args.rounds):
            ours, mfu = through_tpulab(name, p)
            theirs = plain(name, p)
            ratios.append(ours / theirs)
            mfus.append(mfu)
            print(f"{name} round {r + 1}: tpulab {ours * 1e3:.1f} ms/step, plain fit {theirs * 1e3:.1f} ms/step, "
                  f"ratio {ratios[-1]:.3f}" + (f", MFU {mfu:.2%}" if mfu else ""), flush=True)
        size = ", ".join(f"{k}={v}" for k, v in CASES[name].items())
        print(f"{name} ({size}; {args.backend}, CPU, {args.steps} steps): tpulab / plain fit median "
              f"{statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})"
              + (f"; MFU median {statistics.median([m for m in mfus if m]):.2%}" if any(mfus) else ""))
    print(f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
