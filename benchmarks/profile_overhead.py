"""What --profile costs and whether its op times are true (issue 24).

1. The steady state with --profile against without: conv on JAX in its own worker, whole runs
   alternating (which side goes first alternates too); the median of the per-pair ratios of the
   steady medians (goal <= 1.02x: the traced steps come after the timed ones, so only noise is left).
2. Reading the trace of a ResNet-50 smoke step (goal < 2 s): `benchmarks/profile_read.py`, run here.
3. The profiled conv's convolution op against the same op in a trace taken by hand with
   `jax.profiler` (a fresh process, the same jitted function and inputs, each step in a
   `StepTraceAnnotation`), read by hand from its XSpace: the median step's wall time in which the op
   of that name ran (on any thread), tpulab's over the hand-taken's (goal: within 5%). Median of the
   rounds' ratios.

    python benchmarks/profile_overhead.py [--pairs 5] [--iterations 30] [--rounds 3] [--profile-steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from through import as_worker, record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
CONV = {"batch_size": "32", "image_size": "128", "filters": "64", "warmup": "2", "device": "cpu", "backend": "jax"}
ANNOTATION = "step"


def run_once(values: dict[str, str]):
    """One real run of conv in its own worker, as the CLI runs it; its record."""
    return record("conv", values)


def overhead(pairs: int, iterations: int) -> None:
    on: list[float] = []
    off: list[float] = []
    values = {**CONV, "iterations": str(iterations)}
    for pair in range(pairs):
        first_on = pair % 2 == 0
        for profile in (first_on, not first_on):
            record = run_once({**values, "profile": str(profile)})
            assert (record.summary.profile is not None) == profile
            assert record.summary.step_seconds is not None and record.summary.step_seconds.count == iterations
            (on if profile else off).append(record.summary.step_seconds.median)
        print(f"  pair {pair + 1}: with {on[-1] * 1e3:.3f} ms, without {off[-1] * 1e3:.3f} ms", flush=True)
    ratios = sorted(a / b for a, b in zip(on, off))
    print(f"1. steady median with --profile / without, conv on JAX ({CONV['batch_size']} images of "
          f"{CONV['image_size']}x{CONV['image_size']}, {CONV['filters']} filters, {iterations} steps): median of "
          f"{pairs} pairs {statistics.median(ratios):.3f}x (goal <= 1.02x), pairs {ratios[0]:.3f}x-{ratios[-1]:.3f}x",
          flush=True)


def hand_taken(steps: int) -> dict[str, float]:
    """In this process (a fresh one): conv's jitted step traced by hand; each op's median time per step."""
    from functools import partial

    import jax
    import numpy as np

    from tpulab.backends import get
    from tpulab.workloads.conv import CONV as W
    from tpulab.workloads.conv.jax import conv_sum, on_mesh

    p = W.parse({k: v for k, v in CONV.items() if k not in ("device", "backend")})
    x, k = on_mesh(p, get("jax").load().place("cpu", 1))  # the runner's own inputs, placed as it places them
    f = jax.jit(partial(conv_sum, stride=p["stride"], padding=p["padding"]))
    for _ in range(1 + p["warmup"]):
        np.asarray(f(x, k))
    with tempfile.TemporaryDirectory() as folder:
        jax.profiler.start_trace(folder)
        for n in range(steps):
            with jax.profiler.StepTraceAnnotation(ANNOTATION, step_num=n):
                np.asarray(f(x, k))
        jax.profiler.stop_trace()
        [path] = Path(folder).rglob("*.xplane.pb")
        data = jax.profiler.ProfileData.from_file(str(path))
    events = [(e.name, e.start_ns, e.duration_ns) for plane in data.planes for line in plane.lines
              for e in line.events]
    windows = sorted((start, start + duration) for name, start, duration in events if name == ANNOTATION)
    assert len(windows) == steps, f"{len(windows)} step annotations, not {steps}"
    per_step: dict[str, list[float]] = {}
    for lo, hi in windows:
        inside: dict[str, list[tuple[int, int]]] = {}
        for name, start, duration in events:
            if lo <= start and start + duration <= hi and name != ANNOTATION:
                inside.setdefault(name, []).append((start, start + duration))
        for name, spans in inside.items():
            per_step.setdefault(name, []).append(wall(spans) / 1e9)
    return {name: statistics.median(xs) for name, xs in per_step.items() if len(xs) == steps}


def wall(spans: list[tuple[int, int]]) -> int:
    """The wall time in which any of `spans` ran: XLA:CPU runs one op on several threads at once (one
    event per thread), and the step's time an op takes is that, not the threads' time added up."""
    total, end = 0, None
    for lo, hi in sorted(spans):
        if end is None or lo > end:
            total, end = total + hi - lo, hi
        elif hi > end:
            total, end = total + hi - end, hi
    return total


def op_time(rounds: int, steps: int) -> None:
    ratios = []
    for i in range(rounds):
        record = run_once({**CONV, "iterations": "5", "profile": "true", "profile_steps": str(steps)})
        profile = record.summary.profile
        assert profile is not None
        conv = next(o for o in profile.ops if o.category == "matmul/conv")
        env = as_worker("jax")  # the hand-taken trace's process is set up as a worker
        out = subprocess.run([sys.executable, __file__, "--hand", str(steps)], capture_output=True, text=True,
                             env=env, check=True)
        hand = json.loads(out.stdout.splitlines()[-1])
        if conv.name not in hand:
            raise SystemExit(f"the hand-taken trace has no op {conv.name!r} in every step: {sorted(hand)[:10]}")
        ratios.append(conv.seconds / hand[conv.name])
        print(f"  round {i + 1}: {conv.name} tpulab {conv.seconds * 1e3:.3f} ms, by hand "
              f"{hand[conv.name] * 1e3:.3f} ms per step ({ratios[-1]:.3f}x)", flush=True)
    ratios.sort()
    print(f"3. the profiled conv's op against a hand-taken jax.profiler trace: median of {rounds} rounds "
          f"{statistics.median(ratios):.3f}x (goal within 5%: 0.95x-1.05x), rounds {ratios[0]:.3f}x-{ratios[-1]:.3f}x",
          flush=True)



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--hand", type=int, help=argparse.SUPPRESS)  # the hand-taken trace, in a process of its own
    args = ap.parse_args()
    if args.hand:
        print(json.dumps(hand_taken(args.hand)))
        return
    with tempfile.TemporaryDirectory() as home:
        os.environ["TPULAB_HOME"] = home  # the runs' traces and nothing else: they go with it
        overhead(args.pairs, args.iterations)
        read = ROOT / "benchmarks" / "profile_read.py"
        print("2. reading the trace of a ResNet-50 smoke step (goal < 2 s):", flush=True)
        subprocess.run([sys.executable, str(read), "jax", "tensorflow"], check=True)
        op_time(args.rounds, args.profile_steps)


if __name__ == "__main__":
    main()
