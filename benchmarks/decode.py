"""tpulab's decode against a hand-written `jax.jit` loop over the same model and cache, alternated.

Each round, in fresh processes: the baseline (the decode workload's Keras decoder and preallocated
cache, jitted as tpulab's JAX runner jits them, driven by a bare Python loop: each token's step
called, its tokens fetched, timed), then tpulab's worker on JAX, then on TensorFlow. Prints:
  tpulab/baseline: ms per token (ITL p50) over the bare loop's median; goal <= 1.05x (the harness
                   costs nothing)
  MBU:             tpulab's bytes per step over the ITL, against the bandwidth it is measured against
  tensorflow/jax:  the same preset's ITL p50, tpulab on each backend

    python benchmarks/decode.py [--rounds 5] [--preset gpt2-small] [--prompt-len 128] [--gen-len 32]
                                [--no-tensorflow]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINE = r"""
import json, sys, time, statistics
import jax, keras, numpy as np
from tpulab.workloads.decode import DECODE
from tpulab.workloads.decode_jax import Compiled, next_tokens
from tpulab.workloads.decoder_keras import Config, Decoder
p = json.loads(sys.argv[1])
keras.utils.set_random_seed(p["seed"])
model = Decoder(Config.of(p))
model(np.zeros((1, 1), np.int32))
mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("batch",))
calls = Compiled(model, p, mesh)
prompt = np.random.default_rng(p["seed"]).integers(0, p["vocab"], (p["batch_size"], p["prompt_len"]), np.int32)
def generate():
    tokens, _ = calls.prefill(prompt)
    times = []
    for i in range(1, p["gen_len"]):
        t0 = time.perf_counter()
        tokens, _ = calls.step(tokens, p["prompt_len"] + i - 1)
        np.asarray(tokens)
        times.append(time.perf_counter() - t0)
    return times
generate()  # compile both programs
print(json.dumps(statistics.median(generate())))
"""


def params(args: argparse.Namespace, backend: str) -> dict[str, Any]:
    from tpulab.workloads import registry

    w = registry()["decode"]
    return {**w.preset(args.preset), "prompt_len": args.prompt_len, "gen_len": args.gen_len, "batch_size": 1,
            "device": "cpu", "backend": backend}


def baseline(args: argparse.Namespace) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "JAX_PLATFORMS": "cpu", "KERAS_BACKEND": "jax",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", BASELINE, json.dumps(params(args, "jax"))], capture_output=True,
                         text=True, env=env)
    if out.returncode:
        raise SystemExit(f"the baseline failed: {out.stderr[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def tpulab(args: argparse.Namespace, backend: str) -> Any:
    """tpulab's run (no store: it measures its own bandwidth first, as a machine without a roofline does)."""
    from tpulab.engine.runner import Run
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    run = Run(resolve("decode", params(args, backend), detect()), detect())
    for _ in run.events():
        pass
    rec = run.recorder.record()
    assert rec.status == "finished" and rec.summary.decode is not None, rec.error
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--preset", default="gpt2-small")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--no-tensorflow", action="store_true")
    args = ap.parse_args()
    ratios: list[float] = []
    tf_jax: list[float] = []
    mbus: list[tuple[float, float, str]] = []
    t0 = time.time()
    for r in range(args.rounds):
        base = baseline(args)
        jax_run = tpulab(args, "jax")
        d = jax_run.summary.decode
        itl = d.itl.p50
        ratios.append(itl / base)
        mbus.append((d.mbu, d.bandwidth, d.bandwidth_source))
        line = (f"round {r + 1}: baseline {base * 1e3:.2f} ms/token, tpulab jax {itl * 1e3:.2f} ms/token "
                f"({ratios[-1]:.3f}x), MBU {d.mbu:.1%} of {d.bandwidth / 1e9:.1f} GB/s")
        if not args.no_tensorflow:
            tf_run = tpulab(args, "tensorflow")
            tf_jax.append(tf_run.summary.decode.itl.p50 / itl)
            line += f", tensorflow {tf_run.summary.decode.itl.p50 * 1e3:.2f} ms/token ({tf_jax[-1]:.3f}x jax)"
        print(line, flush=True)
    print(f"decode {args.preset}, batch 1, prompt {args.prompt_len}, {args.gen_len} tokens, {args.rounds} rounds, "
          f"{time.time() - t0:.0f} s")
    print(f"tpulab/baseline: ms per token, median {statistics.median(ratios):.3f}x "
          f"(rounds {min(ratios):.3f}-{max(ratios):.3f}) (goal <= 1.05x)")
    mbu, bw, source = sorted(mbus)[len(mbus) // 2]
    print(f"MBU (tpulab, jax): median {mbu:.1%} of {bw / 1e9:.1f} GB/s ({source}); "
          f"rounds {min(m for m, _, _ in mbus):.1%}-{max(m for m, _, _ in mbus):.1%}")
    if tf_jax:
        print(f"tensorflow/jax: ms per token, median {statistics.median(tf_jax):.3f}x "
              f"(rounds {min(tf_jax):.3f}-{max(tf_jax):.3f})")


if __name__ == "__main__":
    main()
