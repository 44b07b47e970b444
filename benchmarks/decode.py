"""tpulab's decode against a decoder written for the benchmark in each framework's own terms, alternated.

The baseline (`benchmarks/decode_plain.py`) shares no code with tpulab's decode: GPT-2 in plain JAX,
TensorFlow or PyTorch, with the same configuration and parameter count, its cache updated in place,
checked against its own full forward pass. Each round, in fresh processes and for each backend and
batch size: the plain decoder, then tpulab's worker. Prints, per backend and batch:
  tpulab/plain: ms per token (ITL p50) over the plain decoder's median; goal <= 1.05x
  MBU:          tpulab's bytes per step over the ITL, against the bandwidth it is measured against

    python benchmarks/decode.py [--rounds 5] [--preset gpt2-small] [--batch-sizes 1,8] [--prompt-len 128]
                                [--gen-len 32] [--context 160] [--backends jax,tensorflow,torch]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from through import as_worker, record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def params(args: argparse.Namespace, backend: str, batch: int) -> dict[str, Any]:
    from tpulab.workloads import registry

    w = registry()["decode"]
    return {**w.preset(args.preset), "prompt_len": args.prompt_len, "gen_len": args.gen_len, "batch_size": batch,
            "context": args.context or args.prompt_len + args.gen_len, "device": "cpu", "backend": backend}


def plain(p: dict[str, Any]) -> float:
    """The plain decoder's median seconds per token, in a fresh process like tpulab's worker."""
    env = as_worker(p["backend"])
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_plain.py"), p["backend"], json.dumps(p)],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"the plain decoder failed: {out.stderr[-2000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    from tpulab.workloads.decode.arithmetic import parameters

    assert got["parameters"] == parameters(p), (got["parameters"], parameters(p))
    return float(got["seconds"])


def tpulab(p: dict[str, Any]) -> Any:
    """tpulab's run (no store: it measures its own bandwidth first, as a machine without a roofline does)."""
    rec = record("decode", p)
    assert rec.summary.figures.get("itl_p50") is not None
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--preset", default="gpt2-small")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--context", type=int, default=0, help="default: the prompt and the generated tokens")
    ap.add_argument("--backends", default="jax,tensorflow,torch")
    args = ap.parse_args()
    backends = args.backends.split(",")
    cases = [(b, int(n)) for b in backends for n in args.batch_sizes.split(",")]
    ratios: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
    mbus: dict[tuple[str, int], list[float]] = {c: [] for c in cases}
    t0 = time.time()
    for r in range(args.rounds):
        for backend, batch in cases:
            p = params(args, backend, batch)
            base = plain(p)
            d: dict[str, Any] = tpulab(p).summary.figures
            ratios[backend, batch].append(d["itl_p50"] / base)
            mbus[backend, batch].append(d["mbu"])
            print(f"round {r + 1} {backend} batch {batch}: plain {base * 1e3:.2f} ms/token, tpulab "
                  f"{d['itl_p50'] * 1e3:.2f} ms/token ({ratios[backend, batch][-1]:.3f}x), MBU {d['mbu']:.1%} of "
                  f"{d['bandwidth'] / 1e9:.1f} GB/s ({d['bandwidth_source']})", flush=True)
    print(f"decode {args.preset}, prompt {args.prompt_len}, {args.gen_len} tokens, {args.rounds} rounds, "
          f"{time.time() - t0:.0f} s")
    for (backend, batch), rs in ratios.items():
        m = mbus[backend, batch]
        print(f"{backend} batch {batch}: tpulab/plain ms per token, median {statistics.median(rs):.3f}x "
              f"(rounds {min(rs):.3f}-{max(rs):.3f}) (goal <= 1.05x); MBU median {statistics.median(m):.1%} "
              f"(rounds {min(m):.1%}-{max(m):.1%})")


if __name__ == "__main__":
    main()
