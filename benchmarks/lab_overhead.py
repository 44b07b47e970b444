"""What the lab costs a run it shows: the same convolution on this CPU headless and in the lab, its steady step.

A run on the CPU shares its cores with the lab drawing it (the charts, the header, the bar). Here the lab runs
under Textual's pilot at 80x24 on the run's tab, as a user watching the run; the headless run takes the path of
`tpulab --run conv --no-ui`. Rounds alternate, headless first. Goal: the lab's median step within 5% of the
headless one (a ratio of 1.05 or less).

Then the lab's own CPU beside a run replayed at its own pace (200 steps a second and telemetry twice a second, as a
small conv streams them; the replay takes no CPU, so what is measured is the lab's), on the run's tab and on
another. Goal: under 30% of a core on the run's tab, under 15% elsewhere (38-40% and 20-23% before the lab left
the run's cores alone, 16-17% and 8% after, on a 2-core VM).

    python benchmarks/lab_overhead.py [--rounds 3] [--iterations 400] [--share-s 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TPULAB_HOME"] = tempfile.mkdtemp(prefix="tpulab-lab-overhead-")  # never the user's store
os.environ["TPULAB_STANDBY"] = "off"  # one worker at a time: the run's

from benchmarks.through import record  # noqa: E402
from tpulab.lab.app import TpulabApp  # noqa: E402
from tpulab.lab.panes.workloads import WorkloadsPane  # noqa: E402
from tpulab.workloads import registry  # noqa: E402


def conv(iterations: int) -> dict[str, Any]:
    """A small conv on JAX: steps of milliseconds, so that the lab's work per second shows in them."""
    return {"batch_size": 16, "image_size": 128, "filters": 64, "iterations": iterations, "warmup": 5,
            "backend": "jax", "device": "cpu"}


def headless(values: dict[str, Any]) -> float:
    return record("conv", values).summary.median or float("nan")


async def in_lab(values: dict[str, Any]) -> float:
    workload = registry()["conv"]
    app = TpulabApp(probe=False, db=Path(tempfile.mkdtemp(prefix="tpulab-lab-overhead-")) / "r.db")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        app.post_message(WorkloadsPane.RunRequested(workload, {**workload.defaults(), **values}))
        while not app.records:
            await pilot.pause(0.2)
    done = app.records[0]
    assert done.status == "finished", done.error
    return done.summary.median or float("nan")


async def lab_share(seconds: float) -> tuple[float, float]:
    """The lab's CPU as a share of one core (its threads' too: the charts build in them) over `seconds` beside a
    replayed streaming run: on the run's tab, then on the Runtime tab."""
    import time

    from tests.helpers import cpu_only, streaming

    folder = Path(tempfile.mkdtemp(prefix="tpulab-lab-share-"))
    app = TpulabApp(probe=False, report=cpu_only(folder), db=folder / "r.db")
    shares = []
    async with app.run_test(size=(80, 24)) as pilot:
        pane = await streaming(app, pilot, 4000)
        for tab in ("3", "1"):
            await pilot.press(tab)
            await pilot.pause(0.5)
            t0, c0 = time.monotonic(), time.process_time()
            await pilot.pause(seconds)
            shares.append((time.process_time() - c0) / (time.monotonic() - t0))
        pane.cancel()
    return shares[0], shares[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--share-s", type=float, default=2.0, help="seconds the lab's CPU share is read on each tab")
    args = ap.parse_args()
    values = conv(args.iterations)
    alone, lab = [], []
    for _ in range(args.rounds):
        alone.append(headless(values))
        lab.append(asyncio.run(in_lab(values)))
    ratio = statistics.median(b / a for a, b in zip(alone, lab))
    print(f"steady step: headless {' '.join(f'{s * 1e3:.2f}' for s in alone)} ms; "
          f"in the lab {' '.join(f'{s * 1e3:.2f}' for s in lab)} ms")
    print(f"lab / headless: {ratio:.3f} (median of {args.rounds} rounds; goal <= 1.05)")
    in_sight, elsewhere = asyncio.run(lab_share(args.share_s))
    print(f"the lab beside a streaming run: {in_sight:.0%} of a core on its tab (goal < 30%), {elsewhere:.0%} on "
          "another (goal < 15%)")


if __name__ == "__main__":
    main()
