"""`tpulab calibrate`: measure how far alike runs differ here between fresh processes, and keep it as the noise
floor every later comparison of runs made here takes."""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any

from tpulab.base import fmt, safe
from tpulab.base.errors import EXIT_OK
from tpulab.cli.command import DB, JSON, Command
from tpulab.cli.usage import Parser


def _arguments(parser: Parser) -> None:
    from tpulab.engine.calibrate import PROCESSES

    parser.add_argument("--backend", default="auto", metavar="NAME", help="the framework its processes run on; "
                        "default auto (a floor is kept per machine, backend and device kind)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu", "tpu"), help="default auto")
    parser.add_argument("--processes", type=int, default=PROCESSES, metavar="N",
                        help=f"fresh processes, two alike configurations interleaved; default {PROCESSES}")
    parser.add_argument("--kept", action="store_true", help="list the floors kept, and run nothing")
    DB.add(parser)
    JSON.add(parser)


def _calibrate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.calibrate import Calibrate, Done
    from tpulab.engine.store import Store, default_path
    from tpulab.machine.detect import detect

    store = Store(args.db or default_path())
    console = Console(stderr=args.json, highlight=False)
    if args.kept:
        return _kept(store, console, args.json)
    job = Calibrate(detect(), args.backend, args.device, args.processes)
    spec = job.specs[0]
    console.print(safe.text(f"tpulab calibrate: {args.processes} fresh processes of the calibration workload on "
                            f"{spec.backend} ({spec.device.upper()}), two alike configurations interleaved; "
                            "Ctrl+C stops (no floor is kept from part of one)"))

    def done(d: Done) -> None:
        r = d.record
        s = r.summary.step_seconds
        ci = f" ±{s.half_width():.0%}" if s is not None and s.half_width() is not None else ""
        busy = next((f.message for f in r.summary.flags if f.code == "disturbed"), "")
        moved = (f"; disturbed ({busy.split(' while')[0]}): {'again' if d.again else 'kept'}") if busy else ""
        console.print(safe.text(f"  process {d.index} of {d.total} (seed {r.params.get('seed')}): median "
                                f"{fmt.seconds(r.median)}{ci}{moved}"))

    def on_sigint(signum: int, frame: Any) -> None:
        console.print("[yellow]stopping after this process: no floor is kept[/]")
        job.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        found = job.run(done)
    finally:
        signal.signal(signal.SIGINT, previous)
    store.save_calibration(found)
    if args.json:
        print(json.dumps(found.to_json(), indent=1))
        return EXIT_OK
    floor = found.floor()
    meds = found.medians
    if found.disturbed:
        console.print(safe.text(f"{found.disturbed} process(es) ran beside other work however often they ran again: "
                                "the floor holds that load; calibrate on a quieter machine (`tpulab top`)"),
                      style="yellow")
    console.print(safe.text(
        f"noise floor: alike single runs here differ up to ±{floor.spread:.1%} (95% of the "
        f"{len(meds) * (len(meds) - 1) // 2} pairs of {len(meds)} fresh processes, each timed for "
        f"{fmt.seconds(found.span_s)}; medians {fmt.seconds(min(meds))} to {fmt.seconds(max(meds))}), kept for "
        f"{found.backend} on {found.device.upper()} in {store.path}"))
    console.print(safe.text(
        f"a comparison of single runs made here now takes ±{floor.threshold(1, 1):.1%}; runs of --repeat 3 a side tell "
        f"a change past about ±{floor.resolves(3):.1%}, of --repeat 5 ±{floor.resolves(5):.1%}, of --repeat 10 "
        f"±{floor.resolves(10):.1%} (a run timed for under half of {fmt.seconds(found.span_s)} takes the default)"))
    return EXIT_OK


def _kept(store: Any, console: Any, as_json: bool) -> int:
    kept = store.calibrations()
    if as_json:
        print(json.dumps([c.to_json() for c in kept], indent=1))
        return EXIT_OK
    if not kept:
        console.print(f"no noise floor kept in {store.path}: `tpulab calibrate` measures this machine's")
    for c in kept:
        console.print(safe.text(f"±{c.spread:.1%}  {c.backend} on {c.device.upper()}, {c.made_at}, "
                                f"{len(c.medians)} processes (machine {c.machine})"))
    return EXIT_OK


COMMAND = Command("calibrate", "measure how far alike runs differ here between fresh processes (the noise floor "
                  "a comparison takes), and keep it", _calibrate, _arguments)
