"""Decode's MBU: how far it agrees with itself on a quiet machine, and that a busy one is named.

With no bandwidth ceiling kept (a fresh store, as a machine without a roofline has), each decode run divides by
the best of its own copies; its summary says so (`bandwidth_basis`: run). Each round: one run on the quiet
machine, then one beside a process holding one core in a busy loop (started before the run, ended after it).
Prints each run's MBU, what it divides by, its copies' median and interval, and whether it was flagged
`disturbed`; then the quiet runs' spread (goal: within 10%: (max - min) / median) and how many busy runs were
flagged (goal: all).

    python benchmarks/decode_mbu.py [--rounds 3] [--preset tiny] [--gen-len 32] [--backend jax]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from through import record

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BUSY = "while True: pass"  # holds one core


def params(args: argparse.Namespace) -> dict[str, Any]:
    from tpulab.workloads import registry

    return {**registry()["decode"].preset(args.preset), "gen_len": args.gen_len, "device": "cpu",
            "backend": args.backend}


def run(p: dict[str, Any], busy: bool) -> tuple[float, bool]:
    """One decode run (beside a busy loop with `busy`): prints its line; returns its MBU and whether it was flagged
    disturbed."""
    from tpulab.base import fmt

    neighbour = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        if neighbour is not None:
            time.sleep(0.5)  # the loop holds its core before the run starts
        rec = record("decode", p)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    d: dict[str, Any] = dict(rec.summary.figures)
    assert d.get("mbu") is not None, "the run has no MBU"
    disturbed = any(f.code == "disturbed" for f in rec.summary.flags)
    low, high = d.get("copies_low"), d.get("copies_high")
    copies = (f"{d['copies_count']:.0f} copies, median {fmt.rate(d['copies_median'], 'B/s')}"
              + (f" [{fmt.rate(low, 'B/s')}, {fmt.rate(high, 'B/s')}]" if low is not None and high else "")
              if d.get("copies_count") else "no copies")
    print(f"{'busy ' if busy else 'quiet'}  MBU {d['mbu']:6.1%} of {fmt.rate(d['bandwidth'], 'B/s')} "
          f"({d['bandwidth_basis']}: {copies}); ITL p50 {fmt.seconds(d['itl_p50'])}; "
          f"{'disturbed' if disturbed else 'not flagged'}", flush=True)
    return d["mbu"], disturbed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--gen-len", type=int, default=32)
    ap.add_argument("--backend", default="jax")
    args = ap.parse_args()
    p = params(args)
    t0 = time.time()
    quiet, busy = [], []
    for _ in range(args.rounds):
        quiet.append(run(p, busy=False))
        busy.append(run(p, busy=True))
    mbus = [m for m, _ in quiet]
    spread = (max(mbus) - min(mbus)) / statistics.median(mbus)
    print(f"quiet MBU spread: {spread:.1%} of their median ((max - min) / median over {len(mbus)}; goal <= 10%): "
          f"{'met' if spread <= 0.10 else 'NOT met'}; {sum(d for _, d in quiet)} of them flagged disturbed")
    print(f"beside a busy core: {sum(d for _, d in busy)} of {len(busy)} runs flagged disturbed (goal: all); MBU "
          f"{min(m for m, _ in busy):.1%} to {max(m for m, _ in busy):.1%}")
    print(f"{time.time() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
