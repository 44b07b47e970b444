"""`tpulab sweep WORKLOAD`: the grid checked, an estimate, a line per finished point, then the findings."""

from __future__ import annotations

import argparse
import json
import signal
from types import FrameType

from rich.console import Console


from tpulab.core.errors import EXIT_CANCELLED, EXIT_FAILED, UsageError
from tpulab.core.spec import spec_of
from tpulab.runtime.detect import detect
from tpulab.core.events import RunRecord
from tpulab.core.ceilings import kept_at
from tpulab.core.store import Store, StoreError, default_path
from tpulab.core.sweep import DEFAULT_STEPS, PointFinished, PointStarted, Sweep, build_grid
from tpulab.views.sweep import (article_note, findings_lines, impossible_lines, label, live_header, live_line,
                                point_count, point_json, summary_json, sweep_table, telemetry_table, text_chart)
from tpulab.workloads import get_workload
from tpulab.workloads.base import Limits


def cmd_sweep(args: argparse.Namespace) -> int:
    report = detect()
    limits = Limits.of(report)
    w = get_workload(args.workload)
    console = Console(stderr=args.json)
    if args.steps is not None and not 1 <= args.steps <= 100000:
        raise UsageError(f"--steps must be an integer from 1 to 100000 (got {args.steps})")
    if not 1 <= args.repeat <= 100:
        raise UsageError(f"--repeat must be an integer from 1 to 100 (got {args.repeat})")
    grid, impossible = build_grid(w, {s.name: getattr(args, s.name) for s in w.params}, limits, args.preset,
                                  args.steps or DEFAULT_STEPS)
    for combo in grid.combinations():  # every backend the grid names can run here, or the sweep says why now
        spec_of(w, grid.params(combo), report)
    axes = list(grid.axes)
    for line in impossible_lines(impossible):
        console.print(f"[yellow]{line}[/]", highlight=False)
    store = None if args.no_save else Store(getattr(args, "db", None) or default_path())
    sweep = Sweep(grid, report, limits, args.repeat, args.max_minutes)
    sweep.ceilings = kept_at(getattr(args, "db", None) or default_path())
    try:
        guess = sweep.estimate(store.candidates if store is not None else lambda wanted: [])
    except StoreError as e:
        console.print(f"[red]tpulab: {e}[/]", highlight=False)
        store = None
        guess = sweep.estimate(lambda wanted: [])
    console.print(f"sweep {sweep.id[:8]} of {w.name}: {point_count(sweep.points)} x {args.repeat} run(s), "
                  f"{grid.steps} timed {w.unit}s each\nestimate {guess}", highlight=False)
    if (note := article_note(grid)) is not None:
        console.print(f"[dim]{note}[/]", highlight=False)
    if not axes:
        console.print("[yellow]no parameter holds a list: this is a single point[/]")

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if sweep.stopping is None:
            console.print("[yellow]stopping after the current point (Ctrl+C again: stop the point after its "
                          "current step)[/]")
            sweep.stop()
        else:
            console.print("[yellow]stopping the current point[/]")
            sweep.cancel_point()

    previous = signal.signal(signal.SIGINT, on_sigint)
    if not args.json:
        console.print(live_header(grid.axes), style="bold", highlight=False)
    try:
        for event in sweep.events():
            if isinstance(event, PointStarted) and not args.json:
                console.print(f"[dim]point {event.index}/{event.of}: {label(event.point, axes)}[/]", highlight=False)
            elif isinstance(event, PointFinished):
                _keep(store, event.record, console)
                if args.json:
                    print(json.dumps({"event": "point", **point_json(event.point)}), flush=True)
                else:
                    console.print(live_line(event.point, grid.axes), highlight=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    found = sweep.findings()
    if store is not None:
        try:
            store.save_sweep(sweep.record())
        except StoreError as e:
            console.print(f"[red]tpulab: {e}[/]", highlight=False)
    if args.json:
        print(json.dumps(summary_json(sweep.points, found, sweep.id, sweep.status)), flush=True)
    else:
        title = f"sweep {sweep.id[:8]}: {sweep.status}, sorted by throughput"
        console.print(sweep_table(sweep.points, axes, found, title))
        if (tele := telemetry_table(sweep.points, axes, found)) is not None:
            console.print(tele)
        for line in findings_lines(found, axes):
            console.print(line, highlight=False)
        if axes and found.best is not None:
            console.print(text_chart(sweep.points, axes, found, console.width))
    if sweep.stopping:
        console.print(f"[yellow]stopped early: {sweep.stopping}; the {sum(p.status == 'finished' for p in sweep.points)}"
                      " finished point(s) are kept[/]", highlight=False)
    if store is not None:
        console.print(f"kept as sweep {sweep.id[:8]} in {store.path} (`tpulab results sweep {sweep.id[:8]}`)",
                      highlight=False)
    if found.best is None:
        return EXIT_FAILED
    return EXIT_CANCELLED if sweep.stopping == "stopped by the user" else 0


def _keep(store: Store | None, record: RunRecord, console: Console) -> None:
    if store is None:
        return
    try:
        store.save(record)
    except StoreError as e:
        console.print(f"[red]tpulab: {e}[/]", highlight=False)
    if record.status == "failed":
        console.print(f"[red]point failed: {record.error}[/]", highlight=False)


