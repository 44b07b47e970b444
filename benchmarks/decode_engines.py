"""Decode on every engine, alternated in each round: tpulab's llama.cpp line against llama.cpp alone, the frameworks
against llama.cpp, and a Llama block on every backend.

- harness: tpulab's llama.cpp line (its worker, the record's TPOT, from llama.cpp's own clock) over the same GGUF
  file, threads and sizes completed by xllamacpp alone in a fresh process, with no tpulab code, read from the
  completion's own `predicted_per_token_ms` (xllamacpp ships no llama-bench). Goal <= 1.05x.
- frameworks: each framework backend's ITL p50 over llama.cpp's at float32, per batch size (GPT-2 small).
  Goal: the best framework <= 1.25x at batch 1; TensorFlow within 1.25x of the best framework at batch 8.
- llama: the smoke preset (a Llama block) on every backend, llama.cpp at f32, one table.

    python benchmarks/decode_engines.py [--rounds 3] [--batch-sizes 1,8] [--prompt-len 16] [--gen-len 32]
                                        [--backends jax,tensorflow,torch|none] [--threads 0]
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

from through import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ENGINE = "llamacpp"


def params(preset: str, backend: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    from tpulab.workloads import registry

    p = {**registry()["decode"].preset(preset), "batch_size": batch, "prompt_len": args.prompt_len,
         "gen_len": args.gen_len, "device": "cpu", "backend": backend}
    if preset == "smoke":
        p["context"] = args.prompt_len + args.gen_len
    return {**p, "weight_format": "f32", "threads": args.threads} if backend == ENGINE else p


def alone(p: dict[str, Any]) -> float:
    """llama.cpp's seconds per generated token over tpulab's GGUF file, completed by xllamacpp alone (`--alone`)."""
    out = subprocess.run([sys.executable, __file__, "--alone", json.dumps(p)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"llama.cpp alone failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def run_alone(p: dict[str, Any]) -> None:
    """The baseline's process: the file tpulab writes for these parameters (written first where it is not yet),
    served with the same threads, cache length and cache type, one greedy completion per sequence."""
    import psutil
    import xllamacpp

    from tpulab.workloads.shared import gguf_writer
    from tpulab.workloads import registry

    values = {**registry()["decode"].defaults(), **p}
    path, _ = gguf_writer.cached(values, "f32")
    threads = p["threads"] or psutil.cpu_count(logical=False) or 1
    c = xllamacpp.CommonParams()
    c.model.path = str(path)
    c.n_parallel = p["batch_size"]
    positions = -(-(p["prompt_len"] + p["gen_len"]) // 64) * 64
    c.n_ctx = positions * p["batch_size"]
    c.cpuparams.n_threads = c.cpuparams_batch.n_threads = threads
    c.cache_type_k = c.cache_type_v = xllamacpp.ggml_type.GGML_TYPE_F32
    c.cache_prompt, c.verbosity = False, -1
    server = xllamacpp.Server(c)
    prompt = [[(7 * i + j) % values["vocab"] for j in range(p["prompt_len"])] for i in range(p["batch_size"])]
    ask = {"prompt": prompt, "n_predict": p["gen_len"], "temperature": 0, "cache_prompt": False}
    server.handle_completions({**ask, "n_predict": 2})  # the weights' pages read, as tpulab's first completion does
    done = server.handle_completions(ask)
    results = done if isinstance(done, list) else [done]
    print(max(r["timings"]["predicted_per_token_ms"] for r in results) / 1e3)


def itl(p: dict[str, Any]) -> tuple[float, float]:
    """tpulab's run: its ITL p50 and its TPOT (seconds)."""
    d = record("decode", p).summary.figures
    return float(d["itl_p50"]), float(d["tpot_s"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--backends", default="jax,tensorflow,torch")
    ap.add_argument("--threads", type=int, default=0, help="llama.cpp's (0: the physical cores)")
    ap.add_argument("--alone", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.alone:
        return run_alone(json.loads(args.alone))
    backends = [] if args.backends == "none" else args.backends.split(",")  # none: the harness alone
    batches = [int(b) for b in args.batch_sizes.split(",")]
    harness: list[float] = []
    itls: dict[tuple[str, int], list[float]] = {}
    llama: dict[str, list[float]] = {}
    t0 = time.time()
    for r in range(args.rounds):
        for batch in batches:
            engine = params("gpt2-small", ENGINE, batch, args)
            if r % 2:  # A B, B A: neither side always second
                line, tpot = itl(engine)
                base = alone(engine)
            else:
                base = alone(engine)
                line, tpot = itl(engine)
            itls.setdefault((ENGINE, batch), []).append(line)
            if batch == batches[0]:
                harness.append(tpot / base)
            print(f"round {r + 1} batch {batch}: llama.cpp alone {base * 1e3:.2f} ms/token, tpulab's line TPOT "
                  f"{tpot * 1e3:.2f} ({tpot / base:.3f}x), ITL p50 {line * 1e3:.2f}", flush=True)
            for b in backends:
                itls.setdefault((b, batch), []).append(itl(params("gpt2-small", b, batch, args))[0])
                print(f"  {b}: ITL p50 {itls[b, batch][-1] * 1e3:.2f} ms", flush=True)
        for b in [*backends, ENGINE] if backends else []:
            llama.setdefault(b, []).append(itl(params("smoke", b, 2, args))[0])
    print(f"decode, prompt {args.prompt_len}, {args.gen_len} tokens, {args.rounds} rounds, {time.time() - t0:.0f} s")
    h = statistics.median(harness)
    print(f"harness: tpulab's llama.cpp line over llama.cpp alone (TPOT, batch {batches[0]}, f32): median {h:.3f}x "
          f"(rounds {min(harness):.3f}-{max(harness):.3f}) (goal <= 1.05x)")
    for batch in batches:
        ref = statistics.median(itls[ENGINE, batch])
        ranked = sorted((statistics.median(itls[b, batch]), b) for b in backends)
        if not ranked:
            continue
        print(f"batch {batch}: llama.cpp f32 ITL p50 {ref * 1e3:.2f} ms; " + ", ".join(
            f"{b} {m * 1e3:.2f} ms ({m / ref:.2f}x)" for m, b in ranked))
        if batch == 1:
            print(f"  best framework ({ranked[0][1]}) over llama.cpp: {ranked[0][0] / ref:.2f}x (goal <= 1.25x)")
        elif "tensorflow" in backends:
            tf = statistics.median(itls["tensorflow", batch])
            print(f"  tensorflow over the best framework ({ranked[0][1]}): {tf / ranked[0][0]:.2f}x (goal <= 1.25x)")
    if llama:
        print("the smoke preset (a Llama block, batch 2): ITL p50 per backend")
    for b, xs in llama.items():
        print(f"  {b:<11} {statistics.median(xs) * 1e3:8.3f} ms (rounds {min(xs) * 1e3:.3f}-{max(xs) * 1e3:.3f})")


if __name__ == "__main__":
    main()
