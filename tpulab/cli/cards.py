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

from tpulab.base import fmt, safe
from tpulab.base.errors import EXIT_OK, UsageError
from tpulab.cli.command import DB, JSON, Command, add_fail_on, on_store
from tpulab.cli.usage import Parser

if TYPE_CHECKING:
    from rich.console import Console

    from tpulab.engine.card import Card
    from tpulab.engine.fleet_view import FleetView
    from tpulab.engine.store import Store

FORMATS = ("md", "csv", "json", "html")
FLEET_FORMATS = ("json", "md", "html")


def rendered(card: Card, form: str) -> str:
    """The card as a file of this form; what leaves the machine is scrubbed of host, user and home."""
    from tpulab.engine.card import scrubbed
    from tpulab.views import card as view

    shared = scrubbed(card)
    if form == "json":
        return json.dumps(shared.to_json(), indent=1) + "\n"
    return {"md": view.markdown, "csv": view.csv_text, "html": view.card_html}[form](shared)


def fleet_rendered(view: FleetView, form: str) -> str:
    """A fleet as a file of this form: JSON (the fleet, its cards and its view: what `cards import` reads back),
    Markdown or HTML."""
    from tpulab.engine.fleet_view import shared
    from tpulab.views import fleet as fleet_view

    if form == "json":
        return json.dumps(shared(view), indent=1) + "\n"
    return fleet_view.markdown(view) if form == "md" else fleet_view.page(view)


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
    """A card by its id; a fleet's id: the fleet with its cards."""
    from tpulab.engine.card_compare import named
    from tpulab.engine.store import NotKept

    try:
        card = named([args.id], store)[0]
    except NotKept:
        try:
            view = fleet_view(store, args.id)
        except NotKept:
            raise NotKept(f"no card or fleet {args.id!r} in {store.path}: `tpulab cards list` and `tpulab cards fleet` "
                          "list them") from None
        write(args.output, fleet_rendered(view, "json"))
        console.print(safe.text(f"fleet {view.fleet.short_id} written to {args.output}, with its "
                                f"{sum(len(g.cards) for g in view.groups)} cards"))
        return EXIT_OK
    write(args.output, rendered(card, "json"))
    console.print(safe.text(f"card {card.short_id} written to {args.output}"))
    return EXIT_OK


def _import_arguments(parser: Parser) -> None:
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE.json")
    DB.add(parser)


def _import(args: argparse.Namespace, store: Store, console: Console) -> int:
    """Each file (a card, or a fleet with its cards) checked whole before anything is kept: a bad one is refused in
    one line naming it (exit 2)."""
    from tpulab.engine.card import FLEET_FORMAT, Fleet, parsed, read
    from tpulab.engine.fleet_view import MAX_FLEET_BYTES, from_file
    from tpulab.engine.store import BadImport

    found: list[Card | tuple[Fleet, list[Card]]] = []
    for path in args.files:
        fleet = False
        try:
            data = parsed(path, MAX_FLEET_BYTES, "a fleet's")
            fleet = isinstance(data, dict) and data.get("format") == FLEET_FORMAT
            found.append(from_file(data) if fleet else read(path))  # (a card, again within a card's size)
        except OSError as e:
            raise BadImport(f"cannot read {path}: {e.strerror}; nothing was imported") from None
        except (ValueError, TypeError) as e:
            what = "fleet" if fleet else "card"
            raise BadImport(f"{path} is not a {what} tpulab can import ({e}); nothing was imported") from None
    for got in found:
        if isinstance(got, tuple):
            imported, cards = got
            for card in cards:
                store.save_card(card)
            store.save_fleet(imported)
            console.print(safe.text(f"imported fleet {imported.short_id} of {fmt.counted(len(imported.nodes), 'node')}, "
                                    f"with its {fmt.counted(len(cards), 'card')}"))
            continue
        store.save_card(got)
        console.print(safe.text(f"imported card {got.short_id}: {got.label()} ({len(got.entries)} entries)"))
    return EXIT_OK


def _fleet_arguments(parser: Parser) -> None:
    parser.add_argument("id", nargs="?", help="a fleet's id (or its first characters); none: list the kept fleets")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    parser.add_argument("--format", choices=FLEET_FORMATS,
                        help="print it in this form (json: the fleet, its cards and what its view found)")
    DB.add(parser)


def fleet_view(store: Store, fleet_id: str) -> FleetView:
    """A kept fleet with its nodes' kept cards, read whole."""
    from tpulab.engine.fleet_view import analyse
    from tpulab.engine.store import NotKept

    fleet = store.get_fleet(fleet_id)
    cards = []
    for n in fleet.nodes:
        if n.card:
            try:
                cards.append(store.get_card(n.card))
            except NotKept:
                pass  # (a card pruned since): the node then shows no card
    return analyse(fleet, cards)


def _fleet(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.views import fleet as view

    if args.id is None:
        fleets = store.fleets()
        console.print(view.listing(fleets) if fleets else "no fleet kept yet: `tpulab bench --ray` makes one, a card on "
                      "every node of a Ray cluster", highlight=False)
        return EXIT_OK
    found = fleet_view(store, args.id)
    if args.format:
        sys.stdout.write(fleet_rendered(found, args.format))
    else:
        console.print(view.terminal(found))
    if args.html:
        write(args.html, view.page(found))
        console.print(safe.text(f"written to {args.html}"))
    return EXIT_OK


def named_or_fleets(ids: list[str], store: Store) -> list[Card]:
    """The cards these names mean (`card_compare.named`); a name that is no card but a fleet's id stands for the
    fleet's median card of each of its hardware groups."""
    from tpulab.engine.card_compare import named
    from tpulab.engine.fleet_view import median_cards
    from tpulab.engine.store import NotKept

    out: list[Card] = []
    for wanted in ids:
        try:
            out += named([wanted], store)
        except NotKept:
            try:
                view = fleet_view(store, wanted)
            except NotKept:
                raise NotKept(f"no card or fleet {wanted!r} in {store.path}: `tpulab cards list` and "
                              "`tpulab cards fleet` list them") from None
            out += median_cards(view)
    return out


def _compare_arguments(parser: Parser) -> None:
    parser.add_argument("ids", nargs="+", metavar="ID", help="card ids, `this` (the newest here) or `article`; a "
                        "fleet's id stands for its median card per hardware group")
    parser.add_argument("--html", type=Path, metavar="FILE", help="write it as a self-contained HTML page")
    add_fail_on(parser)
    JSON.add(parser, "print each entry's verdict against the first card as JSON (and the gate's, with --fail-on)")
    DB.add(parser)


def _compare(args: argparse.Namespace, store: Store, console: Console) -> int:
    from tpulab.engine.card_compare import compare
    from tpulab.engine.gate import enforce, gate_json, of_cards, passed
    from tpulab.views import card as view

    found = named_or_fleets(args.ids, store)
    if len(found) < 2:
        raise UsageError("cards compare needs at least two cards (`article` alone names three)")
    result = compare(found)
    verdicts, fail_on = of_cards(result), getattr(args, "fail_on", None)
    if args.json:
        print(json.dumps({"cards": [c.id for c in found], "lead": result.lead, "differs": result.differs,
                          "verdicts": [v.to_json() for v in verdicts],
                          "gate": gate_json(verdicts, fail_on) if fail_on else None}, indent=1))
    else:
        console.print(view.comparison_terminal(result))
    if args.html:
        write(args.html, view.comparison_html(result))
        print(safe.visible(f"written to {args.html}"), file=sys.stderr if args.json else sys.stdout)
    enforce(verdicts, fail_on)
    if fail_on and not args.json:
        console.print(safe.text(passed(verdicts, fail_on)))
    return EXIT_OK


COMMAND = Command("cards", "list, show, export, import and compare machine cards", None, DB.add, actions=(
    Command("list", "kept cards, newest first, and the article's", on_store(_list), DB.add),
    Command("show", "one card", on_store(_show), _show_arguments),
    Command("export", "a card, or a fleet with its cards, to a JSON file (host, user and home left out)",
            on_store(_export), _export_arguments),
    Command("import", "cards and fleets from JSON files (another machine's)", on_store(_import), _import_arguments),
    Command("compare", "cards side by side: speedups against the first, and why", on_store(_compare),
            _compare_arguments),
    Command("fleet", "a fleet (`tpulab bench --ray`): each node against the fleet's median, its stragglers and why",
            on_store(_fleet), _fleet_arguments)))
