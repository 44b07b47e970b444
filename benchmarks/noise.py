"""What honest numbers cost: the intervals and verdicts of `tpulab.base.noise`, and how often alike runs agree.

1. A run's statistics: real conv runs (JAX, headless, through the runner as every front end runs them),
   whole-run wall time with the median's interval computed and without (`noise.interval` answering None, as
   before it existed), alternating. Goal: at most 1.01x. (The load's sampling is the telemetry sampler's:
   `benchmarks/telemetry_overhead.py` measures it on and off.)
2. (`tpulab results compare` of two runs of 100,000 steps: `benchmarks/store_reads.py` measures it.)
3. Alike pairs: real conv runs of one configuration made back to back, each pair compared; prints how many
   said "no difference detected" (goal: all, on a quiet machine) with each pair's verdict.
4. A run with twice the pixels against one of the first size, back to back (goal: slower, about 0.5x). Real pairs
   are measured here, not asserted in the suite: on this 2-core VM two alike runs in a row have compared as 0.71x
   [0.63x, 0.87x] in a noisy minute, which no threshold a test could fix would call noise.

    python benchmarks/noise.py [--pairs 10] [--iterations 1500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tpulab.base import noise  # noqa: E402
from tpulab.base.events import RunRecord  # noqa: E402
from tpulab.engine.store import timed  # noqa: E402

CONV = {"backend": "jax", "batch_size": 8, "image_size": 64, "filters": 32}


def run_job(iterations: int, image_size: int = 64) -> tuple[RunRecord, float]:
    """One real conv run as the CLI makes it (a worker, the recorder here), its record and wall time."""
    from tpulab.engine.runner import run_job as start
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    report = detect()
    values = {**CONV, "iterations": iterations, "image_size": image_size}
    spec = resolve("conv", {k: str(v) for k, v in values.items()}, report)
    t0 = time.perf_counter()
    run = start(spec, report)
    for _ in run.events():
        pass
    record = run.recorder.record()
    elapsed = time.perf_counter() - t0
    assert record.status == "finished", record.error
    return record, elapsed


def statistics_cost(rounds: int, iterations: int) -> None:
    real = noise.interval
    with_ci, without = [], []
    for _ in range(rounds):
        for on in (True, False):
            noise.interval = real if on else (lambda samples, level=noise.LEVEL: None)  # type: ignore[assignment]
            record, seconds = run_job(iterations)
            assert (record.summary.step_seconds.low is not None) == on  # type: ignore[union-attr]
            (with_ci if on else without).append(seconds)
    noise.interval = real
    a, b = statistics.median(with_ci), statistics.median(without)
    print(f"1. a conv run of {iterations} steps, whole: {a:.3f} s with its interval, {b:.3f} s without "
          f"(median of {rounds} each, alternating): {a / b:.3f}x (goal <= 1.01x)")


def alike_pairs(pairs: int, iterations: int) -> None:
    verdicts = []
    for i in range(pairs):
        a, _ = run_job(iterations)
        b, _ = run_job(iterations)
        c = noise.change(timed(a), timed(b))
        verdicts.append(c.word if c else "-")
        disturbed = [r.short_id for r in (a, b) if r.summary.has_flag("disturbed")]
        said = f" (disturbed: {', '.join(disturbed)})" if disturbed else ""
        print(f"   pair {i + 1}: {c.cell() if c else '-'}{said}")
    same = verdicts.count(noise.SAME)
    print(f"3. {same} of {pairs} alike pairs said '{noise.SAME}' (conv, JAX, {iterations} steps a run)")
    a, _ = run_job(iterations)
    big, _ = run_job(iterations, image_size=90)
    c = noise.change(timed(a), timed(big))
    print(f"4. twice the pixels (90x90 against 64x64), back to back: {c.cell() if c else '-'} (goal: slower, about 0.5x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    statistics_cost(args.rounds, args.iterations)
    alike_pairs(args.pairs, args.iterations)


if __name__ == "__main__":
    main()
