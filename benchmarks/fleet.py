"""The fleet card (`tpulab bench --ray`) against the same cards made alone, on a local Ray cluster.

1. entry/alone: each node's entries from a fleet card, against the same card made on that node alone (the same
   suite, budget and cores, `Bench` in a process of its own restricted to the node's cores, as the node's task
   is), rounds alternated; goal: alone/fleet <= 1.03x for each entry's median (the fleet adds nothing to what a
   card measures).
2. overhead: the fleet's wall time (from its first task asked for to its last card kept) beyond its slowest
   host's cards (on one host, its nodes' cards one after another: their sum); goal: under 10 s.

The cluster is `ray.cluster_utils.Cluster` on this host: `--nodes` raylets of `--cpus` CPUs each (they share one
host, so their cards run one after another). The suite is the smoke roofline and a conv at `--budget` seconds per
node (`--suite card`: the card's own quick suite, minutes per node).

    python benchmarks/fleet.py [--rounds 2] [--nodes 2] [--cpus 1] [--budget 20] [--suite tiny|card]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tpulab.engine import bench  # noqa: E402
from tpulab.engine.card import Card  # noqa: E402
from tpulab.engine.fleet import FleetBench  # noqa: E402

TINY = bench.Suite("bench-fleet", 1, ceilings=bench.Entry("roofline", {"preset": "smoke"}, {}, (), ()), entries=(
    bench.Entry("conv", {"preset": "smoke", "batch_size": 16, "image_size": 128, "filters": 64}, {"iterations": 10},
                (bench.Headline("conv", "gflops_per_s", "GFLOP/s"),), ("iterations",)),))

ALONE = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, {root!r})
cpus = {cpus}
have = sorted(os.sched_getaffinity(0))
if cpus < len(have):
    os.sched_setaffinity(0, have[:cpus])
os.environ["OMP_NUM_THREADS"] = str(cpus)  # as Ray sets it for a task of that many CPUs
sys.path.insert(0, {bench_dir!r})
from fleet import TINY
from tpulab.engine import bench
from tpulab.engine.bench_run import Bench
from tpulab.machine.detect import detect
suite = TINY if {tiny} else bench.SUITE
card = Bench(detect(), Path({db!r}), "jax", quick=True, suite=suite, budget_s={budget}).run()
print(json.dumps({{e.name: e.median for e in card.entries if e.status == "ok"}}))
"""


def alone(cpus: int, budget: float, tiny: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        code = ALONE.format(root=str(ROOT), cpus=cpus, bench_dir=str(ROOT / "benchmarks"), tiny=tiny,
                            db=str(Path(tmp) / "alone.db"), budget=budget)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        print(f"  alone: failed ({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
        return {}
    return json.loads(lines[-1])


def overhead(wall: float, cards: list[Card]) -> tuple[float, float]:
    """The fleet's wall time beyond its slowest host's cards (one host's cards one after another: their sum)."""
    hosts: dict[str, float] = {}
    for c in cards:
        address = c.node.address if c.node else "?"
        hosts[address] = hosts.get(address, 0.0) + (c.wall_s or 0.0)
    slowest = max(hosts.values(), default=0.0)
    return wall - slowest, slowest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=1, help="each node's CPUs")
    ap.add_argument("--budget", type=float, default=20.0, help="each node's budget (seconds)")
    ap.add_argument("--suite", choices=("tiny", "card"), default="tiny")
    args = ap.parse_args()

    from ray.cluster_utils import Cluster

    tiny = args.suite == "tiny"
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus})
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=args.cpus)
    cluster.wait_for_nodes()
    print(f"cluster: {args.nodes} nodes of {args.cpus} CPUs on this host ({time.monotonic() - t0:.1f} s to start), "
          f"suite {args.suite}, budget {args.budget:.0f} s per node, {args.rounds} rounds; {os.cpu_count()} cores here")
    fleet_figures: dict[str, list[float]] = {}
    alone_figures: dict[str, list[float]] = {}
    overheads = []
    try:
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                began = time.monotonic()
                fleet, cards = FleetBench(Path(tmp) / "fleet.db", cluster.address, "jax", quick=True,
                                          suite=TINY if tiny else None, budget_s=args.budget).run()
                whole = time.monotonic() - began
            over, slowest = overhead(fleet.wall_s or 0.0, cards)
            overheads.append(over)
            print(f"round {r + 1}: fleet {fleet.short_id} {fleet.status}: {fleet.wall_s:.1f} s from its first task to "
                  f"its last card kept, {whole:.1f} s with ray.init; its host's cards {slowest:.1f} s: overhead "
                  f"{over:.1f} s")
            for c in cards:
                for e in c.entries:
                    if e.status == "ok" and e.median:
                        fleet_figures.setdefault(e.name, []).append(e.median)
            for _ in range(args.nodes):  # each node alone, as many cards as the fleet made
                for name, value in alone(args.cpus, args.budget, tiny).items():
                    alone_figures.setdefault(name, []).append(value)
    finally:
        cluster.shutdown()
    print("\nentry            fleet (median)  alone (median)  alone/fleet  goal <= 1.03x")
    for name, values in fleet_figures.items():
        mine = alone_figures.get(name)
        if not mine:
            print(f"{name:16s} {statistics.median(values):14.4g}  (no alone figure)")
            continue
        ratio = statistics.median(mine) / statistics.median(values)
        print(f"{name:16s} {statistics.median(values):14.4g}  {statistics.median(mine):14.4g}  {ratio:10.3f}x  "
              f"{'ok' if ratio <= 1.03 else 'MISSED'} (n {len(values)} and {len(mine)})")
    worst = max(overheads)
    print(f"overhead beyond the slowest host's cards: median {statistics.median(overheads):.1f} s, worst {worst:.1f} s: "
          f"goal < 10 s: {'ok' if worst < 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
