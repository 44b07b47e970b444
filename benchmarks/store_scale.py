"""How the store's readers scale with the history kept: 100, 10,000 and 100,000 runs.

One real conv run (tiny shapes) is recorded, then copied with new ids and dates into a store of each
size through the store's import. For each size, alternating sizes round by round, it times:
  - `tpulab results list` as a subprocess (80x24, piped, as a user's `| less` would run it);
  - the lab's Results tab showing its first rows, under Textual's pilot (from the app's start);
  - the workload form's estimate: a fresh Store's indexed candidates query and the estimate itself.
Medians are printed with their ratio to the smallest store (goal: 1.2x listing and tab, 1.5x estimate).

    python benchmarks/store_scale.py [--runs 100,10000,100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
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

from tests.helpers import copies  # noqa: E402
from tpulab.base.events import RunRecord  # noqa: E402
from tpulab.engine.store import Exported, Store  # noqa: E402

TINY = ["--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "5", "--warmup", "1"]


def real_record(folder: Path) -> RunRecord:
    """One conv run, really run, as every kept record is made."""
    db = folder / "one.db"
    out = subprocess.run([sys.executable, "-m", "tpulab", "--run", "conv", "--no-ui", "--json", "--db", str(db),
                          "--device", "cpu", *TINY], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the conv run failed: {out.stderr[-2000:]}")
    run_id = json.loads(out.stdout.splitlines()[-1])["id"]
    return Store(db).get(run_id)


def build(folder: Path, record: RunRecord, n: int) -> tuple[Path, float]:
    path = folder / f"runs-{n}.db"
    t0 = time.perf_counter()
    Store(path).import_records(Exported(copies(record, n, backends=("tensorflow", "jax")), []))
    return path, time.perf_counter() - t0


def time_list(db: Path) -> float:
    env = {**os.environ, "COLUMNS": "80", "LINES": "24"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "tpulab", "results", "--db", str(db)], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=300)
    elapsed = time.perf_counter() - t0
    assert out.returncode == 0 and "newest" in out.stdout, out.stderr
    return elapsed


def time_tab(db: Path, report: object, refills: int = 5) -> tuple[float, float]:
    """From the lab's start to the Results tab showing its first rows; then the tab filled again (its
    listing asked afresh, as a filter does), the median of `refills`."""
    from tpulab.lab.app import TpulabApp
    from tpulab.lab.panes.results import ResultsPane

    async def go() -> tuple[float, float]:
        t0 = time.perf_counter()
        app = TpulabApp(probe=False, db=db, report=report)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("4")
            while not (app.query(ResultsPane) and app.query_one(ResultsPane).table.row_count):
                await pilot.pause(0.002)
            first = time.perf_counter() - t0
            pane = app.query_one(ResultsPane)
            await pilot.pause(1.0)  # the lab's start-up work done: the refills time the listing alone
            again = []
            for _ in range(refills):
                pane.table.clear()
                t1 = time.perf_counter()
                pane.reload()
                while not pane.table.row_count:
                    await asyncio.sleep(0.0005)
                again.append(time.perf_counter() - t1)
                while pane.total is None:  # the count that follows the rows, done before the next refill
                    await asyncio.sleep(0.001)
            return first, statistics.median(again)

    return asyncio.run(go())


def time_estimate(db: Path, record: RunRecord, report: object, repeat: int = 40) -> float:
    from tpulab.engine.estimate import estimate, wanted
    from tpulab.workloads import registry
    from tpulab.workloads.base import Limits

    conv = registry()["conv"]
    limits = Limits.of(report)  # type: ignore[arg-type]
    params = dict(record.params)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        guess = estimate(conv, params, limits, report, Store(db).candidates(wanted(conv, params, limits)))  # type: ignore[arg-type]
        times.append(time.perf_counter() - t0)
        assert guess.kind == "run", guess
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="100,10000,100000")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(x) for x in args.runs.split(",")]
    from tpulab.machine.detect import detect

    report = detect()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        record = real_record(folder)
        print(f"one real conv record ({len(json.dumps(record.to_json())):,} bytes of JSON), copied:")
        dbs = {}
        for n in sizes:
            dbs[n], took = build(folder, record, n)
            print(f"  {n:>7,} runs imported in {took:6.1f} s, {Store(dbs[n]).size() / 2**20:7.1f} MiB")
        time_list(dbs[sizes[0]]), time_tab(dbs[sizes[0]], report), time_estimate(dbs[sizes[0]], record, report)  # warm-up
        kinds = ("list", "tab", "refill", "estimate")
        found: dict[str, dict[int, list[float]]] = {k: {n: [] for n in sizes} for k in kinds}
        for _ in range(args.rounds):  # alternating sizes, so a busy machine weighs on every size alike
            for n in sizes:
                found["list"][n].append(time_list(dbs[n]))
                tab, refill = time_tab(dbs[n], report)
                found["tab"][n].append(tab)
                found["refill"][n].append(refill)
                found["estimate"][n].append(time_estimate(dbs[n], record, report))
        base = sizes[0]
        print(f"\nmedians of {args.rounds} rounds; ratio to {base:,} runs (goal: list and tab 1.2x, estimate 1.5x)")
        print("(Results tab: from the lab's start to its first rows on screen; refill: the tab's listing asked")
        print(" afresh in the running lab, until its first rows are back)")
        print(f"{'runs':>9} {'results list':>13} {'ratio':>6} {'Results tab':>12} {'ratio':>6} {'refill':>9} "
              f"{'ratio':>6} {'estimate':>9} {'ratio':>6}")
        med = {k: {n: statistics.median(v) for n, v in by.items()} for k, by in found.items()}
        for n in sizes:
            print(f"{n:>9,} {med['list'][n]:>11.3f} s {med['list'][n] / med['list'][base]:>5.2f}x "
                  f"{med['tab'][n]:>10.3f} s {med['tab'][n] / med['tab'][base]:>5.2f}x "
                  f"{med['refill'][n] * 1e3:>6.1f} ms {med['refill'][n] / med['refill'][base]:>5.2f}x "
                  f"{med['estimate'][n] * 1e3:>6.2f} ms {med['estimate'][n] / med['estimate'][base]:>5.2f}x")


if __name__ == "__main__":
    main()
