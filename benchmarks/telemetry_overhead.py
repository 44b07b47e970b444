"""What the telemetry sampler costs: per sample, and on the step time (sampler on / off, alternating).

1. In one process, as in a worker: a step that releases the GIL (a NumPy matmul, as TensorFlow and
   XLA do) and one that holds it (pure Python, the worst case for a sampler thread), timed in short
   blocks with the sampler (the CPU probe, as every run has, at 4 Hz: twice the default rate) running
   or not, alternating block by block so both sides see the same machine state.
2. Real runs: the conv workload in its own worker, --telemetry on and off alternating (whole runs are
   noisier on a shared machine; the per-pair spread says how much).
3. The cost of one sample (the CPU probe through its guarded call).
Each prints the ratio of medians (goal <= 1.01x) and the spread of the per-pair ratios.

    python benchmarks/telemetry_overhead.py [--blocks 16] [--block-s 0.5] [--pairs 2] [--iterations 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: on a shared machine, a team of them is noise


def run_once(spec, report, telemetry: bool) -> tuple[float, int]:
    """(median steady step time, samples taken) of one real run."""
    from tpulab.engine.runner import run_job

    os.environ["TPULAB_TELEMETRY"] = "on" if telemetry else "off"  # read by the worker, as --telemetry sets it
    run = run_job(spec, report)
    for _ in run.events():
        pass
    record = run.recorder.record()
    assert record.status == "finished", record.error
    assert record.median is not None
    return record.median, len(record.telemetry)


def sample_cost(samples: int) -> tuple[float, float, float]:
    """Median and p90 wall seconds of one sample of the CPU probe (what every run samples), guarded; and
    the CPU seconds it used on average (all threads of this process), which the machine's load does not inflate."""
    from tpulab.base.timing import summarize
    from tpulab.engine.telemetry import Sampler, probes_for

    sampler = Sampler(probes_for(["cpu"], os.getpid()), lambda s: None)
    times = []
    cpu = 0.0
    for _ in range(samples):
        time.sleep(0.005)
        t0, c0 = time.perf_counter(), time.process_time()
        sampler.sample()
        times.append(time.perf_counter() - t0)
        cpu += time.process_time() - c0
    stats = summarize(times)  # the p90 every record reports (interpolated), not the nearest rank below it
    assert stats is not None
    return stats.median, stats.p90, cpu / samples


def block(step, seconds: float) -> float:
    """Median seconds per step over a block of `seconds`."""
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def in_process(name: str, step, blocks: int, block_s: float) -> None:
    from tpulab.engine.telemetry import Sampler, probes_for

    on: list[float] = []
    off: list[float] = []
    samples = 0
    for i in range(blocks):
        for telemetry in ((True, False) if i % 2 == 0 else (False, True)):
            sampler = None
            if telemetry:
                sampler = Sampler(probes_for(["cpu"], os.getpid()), lambda s: None, interval_s=0.25)
                sampler.start("steady")
            (on if telemetry else off).append(block(step, block_s))
            if sampler is not None:
                sampler.stop()
                samples += int(block_s / 0.25) + 2
    show(f"{name}, {blocks} pairs of {block_s:g} s blocks, about {samples} samples", on, off)


def show(what: str, on: list[float], off: list[float]) -> None:
    ratios = sorted(a / b for a, b in zip(on, off))
    print(f"{what}: step {statistics.median(off) * 1e3:.3f} ms off, {statistics.median(on) * 1e3:.3f} ms on; "
          f"on / off {statistics.median(on) / statistics.median(off):.3f}x (goal <= 1.01x), per-pair ratios "
          f"{ratios[0]:.3f}x-{ratios[-1]:.3f}x, median {statistics.median(ratios):.3f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=16)
    ap.add_argument("--block-s", type=float, default=0.5)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--samples", type=int, default=200)
    args = ap.parse_args()

    import numpy as np

    a = np.random.default_rng(0).standard_normal((320, 320), dtype=np.float32)
    in_process("matmul 320x320 (releases the GIL)", lambda: a @ a, args.blocks, args.block_s)
    in_process("pure Python loop (holds the GIL)", lambda: sum(range(20_000)), args.blocks, args.block_s)
    med, p90, cpu = sample_cost(args.samples)
    print(f"one sample (CPU probe, guarded call): wall median {med * 1e6:.0f} us, p90 {p90 * 1e6:.0f} us; CPU "
          f"{cpu * 1e6:.0f} us, {cpu * 2 * 100:.3f}% of a core at the default 2 Hz", flush=True)
    if args.pairs < 1:
        return

    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    report = detect()
    spec = resolve("conv", {"batch_size": "8", "image_size": "64", "filters": "16", "iterations": str(args.iterations),
                            "warmup": "2", "device": "cpu"}, report)
    on: list[float] = []
    off: list[float] = []
    for pair in range(args.pairs):
        first_on = pair % 2 == 0  # alternate which side goes first, too
        for telemetry in (first_on, not first_on):
            median, n = run_once(spec, report, telemetry)
            (on if telemetry else off).append(median)
            if telemetry:
                taken = n
        print(f"  run pair {pair + 1}: on {on[-1] * 1e3:.3f} ms ({taken} samples), off {off[-1] * 1e3:.3f} ms",
              flush=True)
    show(f"real runs: conv on the CPU, batch 8, 64x64, 16 filters, {args.iterations} steps, {args.pairs} pairs",
           on, off)


if __name__ == "__main__":
    main()
