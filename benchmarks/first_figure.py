"""Time to the first step figure: headless from the command, and in the lab from Enter.

For the smoke conv on TensorFlow and on JAX, a first run (a fresh tpulab home: nothing compiled
before) and a repeated run (JAX's persistent compilation cache now holds the program):
- headless: from starting `tpulab --run conv --no-ui --json` to its first `step` line;
- lab: from Enter to the first step in the Run tab, Enter pressed once the pre-started worker
  said it was ready (its framework imported), so a slow import does not make the figure flaky.
Rounds alternate the backends. Goal in the lab: under 1 s on both backends.

    python benchmarks/first_figure.py [--rounds 2]
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
SMOKE = ["--preset", "smoke", "--device", "cpu"]


def headless(backend: str, home: str) -> float:
    env = {**os.environ, "TPULAB_HOME": home}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", "--run", "conv", "--no-ui", "--json", "--backend",
                             backend, *SMOKE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:
        if json.loads(line).get("event") == "step":
            took = time.perf_counter() - t0
            break
    else:
        raise RuntimeError("no step")
    proc.wait()
    return took


async def lab(backend: str, home: str, runs: int = 2) -> list[float]:
    """Enter to the first step, for each of `runs` runs in one lab (the second one's worker pre-started again)."""
    os.environ["TPULAB_HOME"] = home
    from tpulab.lab.app import TpulabApp
    from tpulab.lab.panes.run import RunPane
    from tpulab.machine.detect import detect

    app = TpulabApp(probe=False, workload="conv", params={"batch_size": 8, "image_size": 32, "filters": 16,
                                                         "iterations": 5, "warmup": 1, "device": "cpu",
                                                         "backend": backend},
                    db=Path(home) / "results.db", report=detect())
    out = []
    async with app.run_test(size=(80, 24)) as pilot:
        for _ in range(runs):
            await pilot.pause()
            deadline = time.monotonic() + 120
            while app.standby.handle is None or not app.standby.handle.ready.is_set():
                assert time.monotonic() < deadline, "the worker never said it was ready"
                await pilot.pause(0.05)
            t0 = time.perf_counter()
            await pilot.press("ctrl+r")
            pane = app.query_one(RunPane)
            while pane.run is None or not pane.run.recorder.steps:
                await pilot.pause(0.01)
            out.append(time.perf_counter() - t0)
            while pane.running:
                await pilot.pause(0.1)
            await pilot.pause(0.5)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    figures: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(args.rounds):
        for backend in ("tensorflow", "jax"):
            home = tempfile.mkdtemp()
            figures.setdefault(("headless", backend, "first"), []).append(headless(backend, home))
            figures.setdefault(("headless", backend, "repeated"), []).append(headless(backend, home))
            first, repeated = asyncio.run(lab(backend, tempfile.mkdtemp()))
            figures.setdefault(("lab", backend, "first"), []).append(first)
            figures.setdefault(("lab", backend, "repeated"), []).append(repeated)
    print(f"{'path':9} {'backend':11} {'run':9} {'median s':>9} {'min-max s':>12}  lab/headless")
    for (where, backend, which), xs in figures.items():
        ratio = ""
        if where == "lab":
            ratio = f"{statistics.median(xs) / statistics.median(figures[('headless', backend, which)]):.3f}x"
        print(f"{where:9} {backend:11} {which:9} {statistics.median(xs):9.3f} {min(xs):5.2f}-{max(xs):5.2f}  {ratio}")
    worst = max(statistics.median(xs) for (where, _, _), xs in figures.items() if where == "lab")
    print(f"lab, from Enter (worker ready) to the first step: worst median {worst:.3f} s (goal < 1 s): "
          f"{'met' if worst < 1 else 'NOT met'}")


if __name__ == "__main__":
    main()
