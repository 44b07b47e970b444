"""`tpulab cards`: list, show, export, import and compare machine cards (`tpulab bench` measures this machine's).

A card's id may be given by its first characters; `this` is the newest card measured here; `article` the 2018
article's three published cards (`article-cpu`, `article-k80`, `article-tpu-v2` one by one).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tpulab.base import safe
from tpulab.base.errors import EXIT_OK, UsageError
from tpulab.cli.command import DB, Command, on_store
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from rich.console import Console

    from tpulab.engine.card import Card
    from tpulab.engine.store import Store

FORMATS = ("md", "csv", "json", "html")


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


def _list(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.article_cards import cards
    from tpulab.views import card as view

    console.print(view.listing([*store.cards(), *cards()]))
    return EXIT_OK


def _show_arguments(parser: Parser) -> None:
    parser.add_argument("id")
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    parser.add_argument("--format", choices=FORMATS, help="print it in this form")
    DB.add(parser)


def _show(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.card_compare import named
    from tpulab.views import card as view

    card = named([args.id], store)[0]
    if args.format:
        sys.stdout.write(rendered(card, args.format))
    else:
        console.print(view.terminal(card, args.full))
    if args.html:
        write(args.html, rendered(card, "html"))
        console.print(safe.text(f"written to {args.html}"))
    return EXIT_OK


def _export_arguments(parser: Parser) -> None:
    parser.add_argument("id")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.json")
    DB.add(parser)


def _export(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.card_compare import named

    card = named([args.id], store)[0]
    write(args.output, rendered(card, "json"))
    console.print(safe.text(f"card {card.short_id} written to {args.output}"))
    return EXIT_OK


def _import_arguments(parser: Parser) -> None:
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE.json")
    DB.add(parser)


def _import(args: argparse.Namespace, store: Store, console: Console) -> int:
    """Each file checked whole before anything is kept: a bad one is refused in one line naming it (exit 2)."""
    from tpulab.engine.card import read
    from tpulab.engine.store import BadImport

    found = []
    for path in args.files:
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


def _compare_arguments(parser: Parser) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="card ids, `this` (the newest here) or `article`")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    DB.add(parser)


def _compare(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.card_compare import compare, named
    from tpulab.views import card as view

    found = named(args.ids, store)
    if len(found) < 2:
        raise UsageError("cards compare needs at least two cards (`article` alone names three)")
    result = compare(found)
    console.print(view.comparison_terminal(result))
    if args.html:
        write(args.html, view.comparison_html(result))
        console.print(safe.text(f"written to {args.html}"))
    return EXIT_OK


COMMAND = Command("cards", "list, show, export, import and compare machine cards", None, DB.add, actions=(
    Command("list", "kept cards, newest first, and the article's", on_store(_list), DB.add),
    Command("show", "one card", on_store(_show), _show_arguments),
    Command("export", "a card to a JSON file (host, user and home left out)", on_store(_export), _export_arguments),
    Command("import", "cards from JSON files (another machine's)", on_store(_import), _import_arguments),
    Command("compare", "cards side by side: speedups against the first, and why", on_store(_compare),
            _compare_arguments)))
