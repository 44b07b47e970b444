"""Random keys in the lab and in `tpulab top` under Textual's pilot, longer than the tests' own: keys per second,
and the first seed that ends an app (its test: tests/test_lab_monkey.py, where such a seed is kept).

The lab's runs are short fixed replays (no worker, no framework), as in the tests; --in-flight streams a real small
conv on JAX under the lab's keys instead, at the lowest priority (x then stays out of the stream). Exit code 1 names a failing seed.

    python benchmarks/lab_monkey.py [--seeds 4] [--keys 2000] [--in-flight]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TPULAB_HOME"] = tempfile.mkdtemp(prefix="tpulab-monkey-")  # never the user's store

from tests.helpers import cpu_only  # noqa: E402
from tests.monkey import (  # noqa: E402
    cheap_runs,
    lab_keys,
    lab_leave,
    monkey,
    run_in_flight,
    stream,
    top_keys,
)
from tpulab.lab.app import TpulabApp  # noqa: E402
from tpulab.lab.top import TopApp  # noqa: E402

SIZES = ((80, 24), (120, 40))


async def one(app_name: str, seed: int, count: int, size: tuple[int, int], in_flight: bool) -> float:
    """Keys per second of one seed in one app."""
    folder = Path(tempfile.mkdtemp(prefix="tpulab-monkey-"))
    if app_name == "top":
        done = await monkey(TopApp([], interval_s=0.25), size, stream(seed, count, top_keys()), ("escape",))
        return done.per_second
    if in_flight:
        app = TpulabApp(probe=False, db=folder / "r.db")
        start, stop = run_in_flight(app)
        done = await monkey(app, size, stream(seed, count, lab_keys(running=True)), lab_leave(), start, stop)
    else:
        app = TpulabApp(probe=False, report=cpu_only(folder), db=folder / "r.db")
        done = await monkey(app, size, stream(seed, count, lab_keys()), lab_leave())
    return done.per_second


async def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--seeds", type=int, default=4, help="seeds per app and size, from --first; default 4")
    a.add_argument("--first", type=int, default=100, help="the first seed; default 100 (the tests use 1..8)")
    a.add_argument("--keys", type=int, default=2000, help="keys per seed; default 2000")
    a.add_argument("--in-flight", action="store_true", help="a real small conv on JAX streams under the lab's keys")
    args = a.parse_args()
    if not args.in_flight:
        cheap_runs(setattr)
    failed = []
    for app_name in ("lab", "top"):
        rates = []
        for size in SIZES:
            for seed in range(args.first, args.first + args.seeds):
                where = f"{app_name} {size[0]}x{size[1]} seed {seed}"
                try:
                    rate = await one(app_name, seed, args.keys, size, args.in_flight)
                except Exception as e:  # noqa: BLE001 - a failing seed is the finding: named, and the next run
                    failed.append(where)
                    print(f"{where}: FAILED after some of {args.keys} keys: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc()
                    continue
                rates.append(rate)
                print(f"{where}: {args.keys} keys, {rate:.0f} keys/s", flush=True)
        if rates:
            print(f"{app_name}: {len(rates)} seed(s) of {args.keys} keys, median {sorted(rates)[len(rates) // 2]:.0f} "
                  f"keys/s (min {min(rates):.0f}, max {max(rates):.0f})" + (", a run in flight" if args.in_flight and
                                                                               app_name == "lab" else ""), flush=True)
    if failed:
        print("failing seeds (keep each as a test): " + "; ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
