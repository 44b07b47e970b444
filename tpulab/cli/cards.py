"""`tpulab bench` (run the suite into a machine card) and `tpulab cards` (list, show, export, import, compare).

A card's id may be given by its first characters; `this` is the newest card measured here; `article` the 2018
article's three published cards (`article-cpu`, `article-k80`, `article-tpu-v2` one by one).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from tpulab.base import fmt, safe
from tpulab.base.errors import EXIT_OK, UsageError
from tpulab.engine.card import Card

FORMATS = ("md", "csv", "json", "html")


def add_parsers(sub: Any) -> None:
    """The `bench` and `cards` commands on the command line's subparsers."""
    from tpulab.engine import bench

    b = sub.add_parser("bench", help="run the fixed suite and write this machine's card (how fast, and why)",
                       description=f"Runs the suite {bench.NAME} v{bench.VERSION}: the ceilings (a roofline), the "
                       "article's convolution and CNN, ResNet-50 training and inference, the transformer and LLM "
                       "decode at batch 1 and 8. Each entry is a run kept in the results. --quick takes at most "
                       f"{bench.QUICK_BUDGET_S / 60:.0f} minutes per backend, the default "
                       f"{bench.FULL_BUDGET_S / 60:.0f}. Ctrl+C keeps a partial card (exit 130); a failed entry "
                       "exits 1.")
    b.add_argument("--quick", action="store_true", help="smaller sizes; reuses ceilings kept with the same versions")
    b.add_argument("--backend", default="auto", metavar="NAME", help="a backend, `all` (each installed one) or auto")
    b.add_argument("--devices", choices=("one", "all"), default="one",
                   help="one: every entry on one device; all: also the article's convolution across every device, "
                        "with its speedup over one (a scaling entry)")
    b.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the card (host, user and home left out)")
    b.add_argument("--format", choices=FORMATS, help="of the file (default: its suffix, else json)")
    b.add_argument("--full", action="store_true", help="on the terminal: the machine, and each entry's details")
    b.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
    c = sub.add_parser("cards", help="list, show, export, import and compare machine cards")
    c.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
    cs = c.add_subparsers(dest="action", metavar="ACTION")
    cs.add_parser("list", help="kept cards, newest first, and the article's")
    show = cs.add_parser("show", help="one card")
    show.add_argument("id")
    show.add_argument("--full", action="store_true")
    show.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    show.add_argument("--format", choices=FORMATS, help="print it in this form")
    ex = cs.add_parser("export", help="a card to a JSON file (host, user and home left out)")
    ex.add_argument("id")
    ex.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.json")
    im = cs.add_parser("import", help="cards from JSON files (another machine's)")
    im.add_argument("files", type=Path, nargs="+", metavar="FILE.json")
    cmp = cs.add_parser("compare", help="cards side by side: speedups against the first, and why")
    cmp.add_argument("ids", nargs="+", metavar="ID", help="card ids, `this` (the newest here) or `article`")
    cmp.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    for each in cs.choices.values():
        each.add_argument("--db", type=Path, dest="db", default=argparse.SUPPRESS)
    c.set_defaults(action="list")


def _store(args: argparse.Namespace) -> Any:
    from tpulab.engine.store import Store, default_path

    return Store(getattr(args, "db", None) or default_path())


def rendered(card: Card, form: str) -> str:
    """The card as a file of this form; what leaves the machine is scrubbed of host, user and home."""
    from tpulab.engine.card import scrubbed
    from tpulab.views import card as view

    shared = scrubbed(card)
    if form == "json":
        return json.dumps(shared.to_json(), indent=1) + "\n"
    return {"md": view.markdown, "csv": view.csv_text, "html": view.card_html}[form](shared)


def write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.bench_run import Bench, Progress
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

    from tpulab.engine.store import default_path

    bench = Bench(detect(), getattr(args, "db", None) or default_path(), args.backend, args.quick, on_progress=progress,
                  devices=args.devices)
    err.print(safe.text(f"tpulab bench{' --quick' if args.quick else ''}: {', '.join(bench.backends)}, "
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


def cmd_cards(args: argparse.Namespace) -> int:
    from rich.console import Console

    from tpulab.engine.card_compare import compare, named
    from tpulab.views import card as view

    console, store = Console(), _store(args)
    if args.action == "list":
        from tpulab.engine.article_cards import cards

        console.print(view.listing([*store.cards(), *cards()]))
        return EXIT_OK
    if args.action == "import":
        return cmd_import(args.files, store, console)
    if args.action == "compare":
        found = named(args.ids, store)
        if len(found) < 2:
            raise UsageError("cards compare needs at least two cards (`article` alone names three)")
        result = compare(found)
        console.print(view.comparison_terminal(result))
        if args.html:
            write(args.html, view.comparison_html(result))
            console.print(safe.text(f"written to {args.html}"))
        return EXIT_OK
    card = named([args.id], store)[0]
    if args.action == "export":
        write(args.output, rendered(card, "json"))
        console.print(safe.text(f"card {card.short_id} written to {args.output}"))
        return EXIT_OK
    if args.format:
        sys.stdout.write(rendered(card, args.format))
    else:
        console.print(view.terminal(card, args.full))
    if args.html:
        write(args.html, rendered(card, "html"))
        console.print(safe.text(f"written to {args.html}"))
    return EXIT_OK


def cmd_import(files: list[Path], store: Any, console: Any) -> int:
    """Each file checked whole before anything is kept: a bad one is refused in one line naming it (exit 2)."""
    from tpulab.engine.card import read
    from tpulab.engine.store import BadImport

    found = []
    for path in files:
        try:
            found.append(read(path))
        except OSError as e:
            raise BadImport(f"cannot read {path}: {e.strerror}; nothing was imported") from None
        except (ValueError, TypeError) as e:
            raise BadImport(f"{path} is not a card tpulab can import ({e}); nothing was imported") from None
    for card in found:
        store.save_card(card)
        console.print(safe.text(f"imported card {card.short_id}: {card.label()} ({len(card.entries)} entries)"))
    return EXIT_OK

