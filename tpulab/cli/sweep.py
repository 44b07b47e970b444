"""`tpulab sweep WORKLOAD`: the grid checked, an estimate, a line per finished point, then the findings."""

from __future__ import annotations

import argparse
import json
import signal
from types import FrameType

from tpulab.base import safe
from tpulab.base.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK
from tpulab.cli.command import DB, JSON, NO_SAVE, NO_UI, PRESET, TELEMETRY, Command, flag_values
from tpulab.cli.usage import Parser
from tpulab.workloads.base import ParamError


def _arguments(parser: Parser) -> None:
    """Its own flags; `main` adds the named workload's, each taking a list."""
    from tpulab.workloads import registry

    parser.add_argument("workload", choices=list(registry()), help=f"one of {', '.join(registry())}")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per point (training: one epoch of this "
                        "many steps, no validation); the first call is extra and excluded; default 12")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point, to show the spread; default 1")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop after the point running at this budget")
    parser.add_argument("--max-itl", type=float, default=None, metavar="MS", help="a decode sweep names, per prompt "
                        "length, the largest batch whose inter-token latency (p50) stays within this many ms")
    PRESET.add(parser)
    JSON.add(parser, "print a JSON line per finished point, then the sweep's summary")
    DB.add(parser)
    NO_SAVE.add(parser, "do not keep the sweep or its runs")
    NO_UI.add(parser, "accepted for symmetry: a sweep from the command line always runs headless (the lab's Sweep "
              "tab is the other way)")
    TELEMETRY.add(parser)


def cmd_sweep(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.store import Store, StoreError, default_path
    from tpulab.engine.sweep import PointFinished, PointStarted, Unkept, plan
    from tpulab.machine.detect import detect
    from tpulab.views.sweep import (
        article_note,
        findings_lines,
        impossible_lines,
        label,
        live_header,
        live_line,
        point_count,
        point_json,
        summary_json,
        sweep_table,
        telemetry_table,
        text_chart,
    )
    from tpulab.workloads import get_workload

    w = get_workload(args.workload)
    if args.max_itl is not None and not args.max_itl > 0:
        raise ParamError("max_itl", f"--max-itl must be a positive number of ms (got {args.max_itl:g})")
    console = Console(stderr=args.json)
    db = args.db or default_path()
    sweep, impossible = plan(w, flag_values(args), detect(), args.preset,
                             args.steps, args.repeat, args.max_minutes, db)
    grid = sweep.grid
    axes = list(grid.axes)
    for line in impossible_lines(impossible):
        console.print(safe.text(line, "yellow"))
    store = None if args.no_save else Store(db)
    try:
        guess = sweep.estimate(store.candidates if store is not None else lambda wanted: [])
    except StoreError as e:
        console.print(f"[red]tpulab: {safe.markup(e)}[/]", highlight=False)
        store = None
        guess = sweep.estimate(lambda wanted: [])
    console.print(safe.text(f"sweep {sweep.id[:8]} of {w.name}: {point_count(sweep.points)} x {args.repeat} run(s), "
                            f"{grid.length()}\nestimate {guess}"))
    if (note := article_note(grid)) is not None:
        console.print(safe.text(note, "dim"))
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
        console.print(safe.text(live_header(grid.axes), "bold"))
    try:
        for event in sweep.drive(store):
            if isinstance(event, Unkept):
                console.print(safe.text(f"tpulab: {event.error}", "red"))
            elif isinstance(event, PointStarted) and not args.json:
                console.print(safe.text(f"point {event.index}/{event.of}: {label(event.point, axes)}", "dim"))
            elif isinstance(event, PointFinished):
                if event.record.status == "failed" and store is not None:
                    console.print(safe.text(f"point failed: {event.record.error}", "red"))
                if args.json:
                    print(json.dumps({"event": "point", **point_json(event.point)}), flush=True)
                else:
                    console.print(safe.text(live_line(event.point, grid.axes, console.width)))
    finally:
        signal.signal(signal.SIGINT, previous)
    found = sweep.findings(args.max_itl / 1e3 if args.max_itl is not None else None)
    if args.json:
        print(json.dumps(summary_json(sweep.points, found, sweep.id, sweep.status)), flush=True)
    else:
        order = f"by {found.capacity[0].capacity.load}" if found.capacity else "sorted by throughput"
        title = f"sweep {sweep.id[:8]}: {sweep.status}, {order}"
        console.print(sweep_table(sweep.points, axes, found, title))
        if (tele := telemetry_table(sweep.points, axes, found)) is not None:
            console.print(tele)
        for line in findings_lines(found, axes):
            console.print(safe.text(line))
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
    return EXIT_CANCELLED if sweep.stopping is not None and sweep.stopping.by_user else EXIT_OK


COMMAND = Command("sweep", "run a grid of a workload's parameters and find the fastest configuration", cmd_sweep,
                  _arguments, description="Every parameter flag takes a comma list (--batch-size 32,64,128) or, for "
                  "numbers, a doubling range from its first value (--batch-size 16..1024, --rate 0.5..8). Each point "
                  "is a run, kept in the results with the sweep's id; the article's configuration is run too when the "
                  "grid lacks it and holds the article's other values. A serve sweep over --rate names the highest "
                  "rate meeting the SLO, and the knee.")
