"""The noise floor and repeats, measured: issue 63's goals, each against what the same machine does in this run.

1. The spread between processes: the issue's conv (`--batch-size 16 --image-size 96 --filters 32`, TensorFlow where
   auto takes it) in fresh processes at 30 iterations (about 0.1 s timed) and at 300 (about 1 s), interleaved: each
   side's process medians, max/min and floor (`noise.floor_of`). What a single short run cannot see.
2. Alike pairs of single runs of that conv, idle and just after a burst (a process held a core for 8 s, stopped 3 s
   before), compared as `results compare` compares them (the store's floor: the default, uncalibrated): goal, no
   false finding.
3. Repeats: `tpulab calibrate` (JAX, into a scratch store), then pairs of groups of `--repeat` fresh processes of
   the calibration workload, interleaved (A B A B ...), each pair compared over its processes with the calibrated
   floor: alike pairs (goal: at least 19 in 20 "no difference detected"), a known 10% slowdown (`--pad 0.1`: goal
   at least 9 in 10 "slower") and a known 5% one (`--pad 0.05`).
4. The control probe: its cost per run (goal under 0.1 s, and at most 1% of a one-minute run).

    python benchmarks/noise_floor.py [--pairs 10] [--groups 10] [--repeat 5] [--processes 10] [--parts 1234]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tpulab.base.noise import SAME, SLOWER, change, floor_of  # noqa: E402
from tpulab.base.events import RunRecord  # noqa: E402
from tpulab.base.probe import probe  # noqa: E402
from tpulab.engine.calibrate import Calibrate  # noqa: E402
from tpulab.engine.ceilings import Ceilings  # noqa: E402
from tpulab.engine.runner import run_job  # noqa: E402
from tpulab.engine.spec import resolve  # noqa: E402
from tpulab.engine.store import Store, compare  # noqa: E402
from tpulab.machine.detect import detect  # noqa: E402

REPORT = detect()
CONV = {"batch_size": "16", "image_size": "96", "filters": "32"}


def one(workload: str, values: dict[str, str]) -> RunRecord:
    """One run in a fresh worker, as every front end makes it."""
    run = run_job(resolve(workload, values, REPORT), REPORT, ceilings=Ceilings(), kept=False)
    for _ in run.events():
        pass
    record = run.recorder.record()
    assert record.status == "finished", record.error
    return record


def burst(seconds: float) -> None:
    subprocess.run([sys.executable, "-c", f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"])


def spread(processes: int) -> None:
    sides: dict[int, list[float]] = {30: [], 300: []}
    for _ in range(processes):
        for iterations, medians in sides.items():
            medians.append(one("conv", {**CONV, "iterations": str(iterations)}).median or 0.0)
    for iterations, medians in sides.items():
        print(f"  conv at {iterations} iterations, {processes} fresh processes: medians "
              f"{', '.join(f'{m * 1e3:.2f}' for m in medians)} ms; {max(medians) / min(medians):.2f}x apart, "
              f"floor ±{floor_of(medians):.1%}")


def single_pairs(pairs: int, store: Store) -> None:
    for after in (False, True):
        false = 0
        said = []
        for _ in range(pairs):
            if after:
                burst(8.0)
                time.sleep(3.0)
            a, b = one("conv", {**CONV, "iterations": "30"}), one("conv", {**CONV, "iterations": "30"})
            found = compare([a, b], floor=store.floor_for([a, b])).changes[1]
            assert found is not None
            false += found.word != SAME
            said.append(found.cell())
        print(f"  {'after a burst' if after else 'idle'}: {false} false finding(s) in {pairs} pairs "
              f"(goal 0); {'; '.join(said)}")
    print(f"  threshold: {store.floor_for([a]).source}, ±{store.floor_for([a]).spread:.0%}")


def groups(store: Store, pairs: int, repeat: int, processes: int) -> None:
    job = Calibrate(REPORT, "jax", "cpu", processes)
    calibration = job.run()
    store.save_calibration(calibration)
    floor = calibration.floor()
    print(f"  calibrated: floor ±{floor.spread:.1%} over {processes} processes ({calibration.disturbed} disturbed); "
          f"the least change {repeat} and {repeat} processes tell: ±{floor.resolves(repeat):.1%}")
    base = {"backend": "jax", "device": "cpu"}
    for pad, want in (("0", SAME), ("0.1", SLOWER), ("0.05", SLOWER)):
        got, cells = 0, []
        for _ in range(pairs):
            a: list[list[float]] = []
            b: list[list[float]] = []
            for _ in range(repeat):  # A B A B ...: interleaved
                a.append(_steps(one_steps(base, "0", "0")))
                b.append(_steps(one_steps(base, "1", pad)))
            found = change([], [], base_repeats=a, other_repeats=b, floor=floor)
            assert found is not None
            got += found.word == want
            cells.append(found.cell())
        print(f"  pad {pad}: {got} of {pairs} pairs {want}; {'; '.join(cells)}")


def one_steps(base: dict[str, str], seed: str, pad: str) -> RunRecord:
    return one("calibration", {**base, "seed": seed, "pad": pad})


def _steps(record: RunRecord) -> list[float]:
    from tpulab.workloads import registry

    return registry()["calibration"].timed_seconds(record.steps)


def probe_cost() -> None:
    t0 = time.perf_counter()
    for _ in range(10):
        probe()
    each = (time.perf_counter() - t0) / 10
    print(f"  the control probe: {each * 1e3:.1f} ms a call, two a run: {2 * each:.3f} s (goal < 0.1 s), "
          f"{2 * each / 60:.2%} of a one-minute run (goal <= 1%)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10, help="alike single-run pairs, idle and after a burst, each")
    p.add_argument("--groups", type=int, default=10, help="pairs of repeated groups for each change")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--processes", type=int, default=10, help="the calibration's, and the spread's")
    p.add_argument("--parts", default="1234", help="which parts to run: 1234 (all), 3 (repeats alone)...")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "results.db")
        if "4" in args.parts:
            print("4. the control probe")
            probe_cost()
        if "1" in args.parts:
            print("1. the spread between processes")
            spread(args.processes)
        if "2" in args.parts:
            print("2. alike single runs (uncalibrated)")
            single_pairs(args.pairs, store)
        if "3" in args.parts:
            print("3. repeats, interleaved, with the calibrated floor")
            groups(store, args.groups, args.repeat, args.processes)


if __name__ == "__main__":
    main()
