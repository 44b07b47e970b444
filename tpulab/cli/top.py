"""`tpulab top`: the telemetry sampler without a run, for every device kind detection found.

It never holds a device: no framework is imported (a TPU is read through libtpu's monitoring SDK,
which reads the runtime's metrics; JAX's memory statistics belong to the process holding the chip).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rich.console import Console
from rich.table import Table

from tpulab.core import fmt
from tpulab.core.events import Sample
from tpulab.core.telemetry import Sampler, probes_for


def top_table(s: Sample, where: str) -> Table:
    t = Table(title=f"tpulab top: {where} (Ctrl+C to quit)", show_header=True)
    for name in ("device", "busy", "memory", "power", "clock", "temp"):
        t.add_column(name, no_wrap=True)
    busiest = max(s.cores) if s.cores else None
    t.add_row(f"CPU x{len(s.cores) or '?'}", f"{fmt.pct(s.cpu)} (busiest core {fmt.pct(busiest)})",
              f"{fmt.bytes_(s.mem_used)}/{fmt.bytes_(s.mem_total)}", "-", "-", "-")
    for d in s.devices:
        busy = fmt.pct(d.util) + (f", duty {fmt.pct(d.duty_cycle)}" if d.duty_cycle is not None else "")
        t.add_row(f"{d.kind.upper()} {d.index}", busy, f"{fmt.bytes_(d.mem_used)}/{fmt.bytes_(d.mem_total)}",
                  f"{d.power_w:.0f} W" if d.power_w is not None else "-",
                  f"{d.clock_mhz:.0f} MHz" if d.clock_mhz is not None else "-",
                  f"{d.temp_c:.0f} C" if d.temp_c is not None else "-")
    return t


def cmd_top(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tpulab.runtime.detect import detect

    if args.count is not None and args.count < 1:
        parser.error(f"--count must be a positive integer (got {args.count})")
    if not 0.25 <= args.interval <= 60:
        parser.error(f"--interval must be from 0.25 to 60 seconds (got {args.interval:g})")
    report = detect()
    kinds = (["gpu"] if report.gpus else []) + (["tpu"] if report.tpu else [])
    where = ", ".join(["CPU", *(k.upper() for k in kinds)])
    sampler = Sampler(probes_for(kinds), lambda s: None, args.interval)
    notices = Console(stderr=True)
    taken = 0
    live = None
    if not args.json:
        from rich.live import Live

        live = Live(console=Console(), auto_refresh=False)
        live.start()
    try:
        while args.count is None or taken < args.count:
            time.sleep(args.interval)  # the CPU figures cover the time since the previous sample
            s = sampler.sample()
            taken += 1
            for what, why in s.unavailable.items():
                notices.print(f"tpulab top: {what} unavailable: {why}", highlight=False, markup=False)
            if live is not None:
                live.update(top_table(s, where), refresh=True)
            else:
                print(json.dumps(s.to_json()), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    sys.stdout.flush()
    return 0
