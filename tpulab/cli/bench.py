"""`tpulab bench`: run the fixed suite into this machine's card (kept beside the runs; `tpulab cards` shows it)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from tpulab.base import fmt, safe
from tpulab.base.errors import UsageError
from tpulab.cli.cards import FLEET_FORMATS, FORMATS, fleet_rendered, rendered, write
from tpulab.cli.command import DB, Command
from tpulab.cli.usage import Parser
from tpulab.engine import bench as suite


def _arguments(parser: Parser) -> None:
    parser.add_argument("--quick", action="store_true", help="smaller sizes; reuses ceilings kept with the same versions")
    parser.add_argument("--backend", default="auto", metavar="NAME", help="a backend, `all` (each installed one) or auto")
    parser.add_argument("--devices", choices=("one", "all"), default="one",
                        help="one: every entry on one device; all: also the article's convolution across every device, "
                             "with its speedup over one (a scaling entry)")
    parser.add_argument("--no-reference", dest="reference", action="store_false",
                        help="leave out the reference engines' lines (llama.cpp's decode, after the backends)")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write the card (host, user and home left out); with --ray, the fleet with its cards (JSON)")
    parser.add_argument("--format", choices=FORMATS, help="of the file (default: its suffix, else json)")
    parser.add_argument("--full", action="store_true", help="on the terminal: the machine, and each entry's details")
    parser.add_argument("--budget", type=float, metavar="SECONDS",
                        help="each backend's budget (default: the suite's, smaller with --quick), and half of it more "
                             "for the reference lines; with --ray, each node's")
    parser.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                        help="a card on every alive node of a Ray cluster, kept as one fleet (`tpulab cards fleet ID`); "
                             "ADDRESS as ray.init takes it (default: auto, the cluster this machine is in)")
    parser.add_argument("--nodes", metavar="SPEC",
                        help="with --ray: the nodes that have this resource (GPU), this label (key=value) or this "
                             "address; several, comma-separated: any of them")
    parser.add_argument("--start-timeout", type=float, default=300.0, metavar="SECONDS",
                        help="with --ray: a node whose card has not started this long after it was asked for is "
                             "named failed (its resources held, its runtime environment not set up)")
    parser.add_argument("--runtime-env", metavar="JSON",
                        help="with --ray: the Ray runtime environment that puts tpulab on the nodes, as JSON: "
                             "'{\"pip\": [\"tpulab[jax]\"]}' (default: none, tpulab is in the nodes' image)")
    DB.add(parser)


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.bench_run import Bench, Progress
    from tpulab.engine.store import default_path
    from tpulab.machine.detect import detect
    from tpulab.views import card as view

    if args.budget is not None and not args.budget > 0:
        raise UsageError(f"--budget must be more than 0 seconds, not {args.budget:g}")
    if args.ray is not None:
        return _fleet(args)
    out, err = Console(), Console(stderr=True, highlight=False)
    form = args.format or (args.output.suffix.lstrip(".") if args.output and args.output.suffix.lstrip(".")
                           in FORMATS else "json")

    def progress(p: Progress) -> None:
        e = p.finished or p.repeated
        if e is not None:
            runs = f", {e.repeats} runs" if e.repeats and e.repeats > 1 else ""
            said = f"{view.median_ci(e)} {e.unit or ''} (p10-p90 {view.spread(e)}, n {e.n or '-'}{runs})" \
                if e.status == "ok" else f"{e.status}: {e.reason or ''}"
            err.print(safe.text(f"  {e.name} [{e.backend}]: " + "; ".join(x for x in (said, e.stopped) if x)))
        else:
            err.print(safe.text(f"{p.count()} {p.what} · {fmt.duration(p.elapsed)} in, at most "
                                f"{fmt.duration(p.eta)} left"), style="cyan")

    bench = Bench(detect(), args.db or default_path(), args.backend, args.quick, on_progress=progress,
                  devices=args.devices, reference=args.reference, budget_s=args.budget)
    lines = f", then the reference lines of {', '.join(bench.references)}" if bench.references else ""
    err.print(safe.text(f"tpulab bench{' --quick' if args.quick else ''}: {', '.join(bench.backends)}{lines}, "
                        f"{bench.plan()}; Ctrl+C keeps a partial card"))

    def on_sigint(signum: int, frame: Any) -> None:
        err.print("[yellow]stopping: the card is kept as partial (Ctrl+C again kills the run)[/]")
        bench.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        card = bench.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    out.print(view.terminal(card, args.full))
    if args.output:
        write(args.output, rendered(card, form))
        err.print(safe.text(f"card {card.short_id} written to {args.output} ({form}) and kept in {bench.store.path}"))
    return card.exit_code


def _fleet(args: argparse.Namespace) -> int:
    """`--ray`: a card on every node, each node's progress on its own line, the fleet's view at the end."""
    import json

    from rich.console import Console

    from tpulab.base.errors import EXIT_CANCELLED
    from tpulab.engine.fleet import FleetBench, FleetProgress
    from tpulab.engine.fleet_view import analyse
    from tpulab.engine.store import default_path
    from tpulab.views import card as view
    from tpulab.views import fleet as fleet_view

    out, err = Console(), Console(stderr=True, highlight=False)
    try:
        runtime_env = json.loads(args.runtime_env) if args.runtime_env else None
    except ValueError as e:
        raise UsageError(f"--runtime-env is not JSON: {e}") from None
    if runtime_env is not None and not isinstance(runtime_env, dict):
        raise UsageError("--runtime-env must be a JSON object: '{\"pip\": [\"tpulab[jax]\"]}'")
    suffix = args.output.suffix.lstrip(".") if args.output else ""
    form = args.format or (suffix if suffix in FLEET_FORMATS else "json")
    if form not in FLEET_FORMATS:
        raise UsageError(f"--format {form}: with --ray, -o writes the fleet as one of {', '.join(FLEET_FORMATS)}")

    def progress(p: FleetProgress) -> None:
        left = f" · the fleet: at most {fmt.duration(p.eta)} left" if p.eta is not None and p.kind == "progress" else ""
        e = p.progress.finished or p.progress.repeated if p.progress is not None else None
        if e is not None:
            said = f"{view.median_ci(e)} {e.unit or ''}" if e.status == "ok" else f"{e.status}: {e.reason or ''}"
            err.print(safe.text(f"[node {p.node}]   {e.name} [{e.backend}]: {said}"))
        elif p.progress is not None:
            err.print(safe.text(f"[node {p.node}] {p.progress.what} · {fmt.duration(p.progress.elapsed)} in{left}"),
                      style="cyan")
        else:
            err.print(safe.text(f"[node {p.node}] {p.line}"), style="red" if p.kind == "failed" else "cyan")

    runner = FleetBench(args.db or default_path(), args.ray, args.backend, args.quick, budget_s=args.budget,
                        nodes=args.nodes, on_progress=progress, start_timeout_s=args.start_timeout,
                        runtime_env=runtime_env, devices=args.devices, reference=args.reference)
    err.print(safe.text(f"tpulab bench --ray {args.ray}{' --quick' if args.quick else ''}: a card on every node"
                        f"{' matching ' + args.nodes if args.nodes else ''}; Ctrl+C keeps what came back"))

    def on_sigint(signum: int, frame: Any) -> None:
        if runner.fleet is None:  # still connecting to the cluster (ray.init retries for a minute): no card yet
            raise KeyboardInterrupt
        err.print("[yellow]stopping every node's card: what came back is kept[/]")
        runner.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        fleet, cards = runner.run()
    except KeyboardInterrupt:
        err.print("[yellow]stopped before any node's card started: nothing kept[/]")
        return EXIT_CANCELLED
    finally:
        signal.signal(signal.SIGINT, previous)
    found = analyse(fleet, cards)
    out.print(fleet_view.terminal(found))
    if args.output:
        write(args.output, fleet_rendered(found, form))
        err.print(safe.text(f"fleet {fleet.short_id} written to {args.output} ({form}, with its {fmt.counted(len(cards), 'card')}) "
                            f"and kept in {runner.db}"))
    return fleet.exit_code


COMMAND = Command("bench", "run the fixed suite and write this machine's card (how fast, and why)", cmd_bench,
                  _arguments, description=f"Runs the suite {suite.NAME} v{suite.VERSION}: the ceilings (a roofline), "
                  "the article's convolution and CNN, ResNet-50 training and inference, the transformer and LLM decode "
                  "at batch 1 and 8. Each entry is a run kept in the results. --quick takes at most "
                  f"{suite.QUICK_BUDGET_S / 60:.0f} minutes per backend, the default {suite.FULL_BUDGET_S / 60:.0f}, and "
                  f"{suite.REFERENCE_SHARE:.0%} of that more for the reference lines (--no-reference leaves them out): "
                  "the card says its whole budget before it starts. "
                  "Ctrl+C keeps a partial card (exit 130); a failed entry exits 1. --ray makes a card on every node of a Ray "
                  "cluster, kept as one fleet.")
