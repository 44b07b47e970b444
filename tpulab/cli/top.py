"""`tpulab top`: the telemetry sampler without a run, for every device kind detection found.

Without --json it starts the lab's `top` app (per-core bars, a chart per device, the processes
holding each accelerator). It never holds a device: no framework is imported (a TPU is read through
libtpu's monitoring SDK, which reads the runtime's metrics; JAX's memory statistics belong to the
process holding the chip).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tpulab.base import safe
from tpulab.base.errors import EXIT_OK, UsageError
from tpulab.cli.command import JSON, Command
from tpulab.cli.usage import Parser


def _arguments(parser: Parser) -> None:
    JSON.add(parser, "a JSON line per sample on stdout")
    parser.add_argument("--count", type=int, metavar="N",
                        help="take N samples, then exit (default: until q, or Ctrl+C with --json)")
    parser.add_argument("--interval", type=float, metavar="S", default=1.0, help="seconds between samples; default 1")


def cmd_top(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.telemetry import Sampler, probes_for
    from tpulab.machine.detect import detect

    if args.count is not None and args.count < 1:
        raise UsageError(f"--count must be a positive integer (got {args.count})")
    if not 0.25 <= args.interval <= 60:
        raise UsageError(f"--interval must be from 0.25 to 60 seconds (got {args.interval:g})")
    report = detect()
    kinds = (["gpu"] if report.gpus else []) + (["tpu"] if report.tpu else [])
    if not args.json:
        from tpulab.lab.top import TopApp

        from tpulab.cli.apps import ended

        app = TopApp(kinds, args.interval, args.count)
        app.run()
        return ended(app.failure.line() if app.failure else None)
    sampler = Sampler(probes_for(kinds), lambda s: None, args.interval)
    notices = Console(stderr=True)
    taken = 0
    try:
        while args.count is None or taken < args.count:
            time.sleep(args.interval)  # the CPU figures cover the time since the previous sample
            s = sampler.sample()
            taken += 1
            for what, why in s.unavailable.items():
                notices.print(safe.text(f"tpulab top: {what} unavailable: {why}"))
            print(json.dumps(s.to_json()), flush=True)
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    return EXIT_OK


COMMAND = Command("top", "live CPU, memory and device utilisation of every device detected, and the processes "
                  "holding each accelerator, without a run", cmd_top, _arguments,
                  description="Never holds a device a run may need: no framework is imported. q quits, ? shows the keys.")
