"""`tpulab bench`: run the fixed suite into this machine's card (kept beside the runs; `tpulab cards` shows it)."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from tpulab.base import fmt, safe
from tpulab.cli.cards import FORMATS, rendered, write
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
    parser.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the card (host, user and home left out)")
    parser.add_argument("--format", choices=FORMATS, help="of the file (default: its suffix, else json)")
    parser.add_argument("--full", action="store_true", help="on the terminal: the machine, and each entry's details")
    DB.add(parser)


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.bench_run import Bench, Progress
    from tpulab.engine.store import default_path
    from tpulab.machine.detect import detect
    from tpulab.views import card as view

    out, err = Console(), Console(stderr=True, highlight=False)
    form = args.format or (args.output.suffix.lstrip(".") if args.output and args.output.suffix.lstrip(".")
                           in FORMATS else "json")

    def progress(p: Progress) -> None:
        e = p.finished or p.repeated
        if e is not None:
            runs = f", {e.repeats} runs" if e.repeats and e.repeats > 1 else ""
            said = f"{view.median_ci(e)} {e.unit or ''} (p10-p90 {view.spread(e)}, n {e.n or '-'}{runs})" \
                if e.status == "ok" else f"{e.status}: {e.reason or ''}"
            err.print(safe.text(f"  {e.name} [{e.backend}]: {said}; {e.stopped or ''}"))
        else:
            err.print(safe.text(f"[{p.done}/{p.total - 1} {p.backend}] {p.what} · {fmt.duration(p.elapsed)} in, "
                                f"about {fmt.duration(p.eta)} left"), style="cyan")

    bench = Bench(detect(), args.db or default_path(), args.backend, args.quick, on_progress=progress,
                  devices=args.devices, reference=args.reference)
    lines = f", then the reference lines of {', '.join(bench.references)}" if bench.references else ""
    err.print(safe.text(f"tpulab bench{' --quick' if args.quick else ''}: {', '.join(bench.backends)}{lines}, "
                        f"budget {fmt.duration(bench.budget)} per backend; Ctrl+C keeps a partial card"))

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


COMMAND = Command("bench", "run the fixed suite and write this machine's card (how fast, and why)", cmd_bench,
                  _arguments, description=f"Runs the suite {suite.NAME} v{suite.VERSION}: the ceilings (a roofline), "
                  "the article's convolution and CNN, ResNet-50 training and inference, the transformer and LLM decode "
                  "at batch 1 and 8. Each entry is a run kept in the results. --quick takes at most "
                  f"{suite.QUICK_BUDGET_S / 60:.0f} minutes per backend, the default {suite.FULL_BUDGET_S / 60:.0f}. "
                  "Ctrl+C keeps a partial card (exit 130); a failed entry exits 1.")
