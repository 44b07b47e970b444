"""The machine card in a notebook: `tpulab.bench()` runs the suite and shows its card; `tpulab.cards.compare(...)`
sets cards side by side. Each result draws itself as HTML in a cell (inline SVG, nothing loaded from outside) and
as the terminal's table in a REPL.

    import tpulab
    card = tpulab.bench(quick=True)
    tpulab.cards.compare(card, "article")
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from tpulab.engine.card import Card, Fleet
from tpulab.engine.card_compare import CardComparison
from tpulab.engine.card_compare import compare as compared
from tpulab.engine.card_compare import named
from tpulab.engine.store import Store, default_path
from tpulab.notebook.results import text
from tpulab.views import card as view
from tpulab.views import html


class CardResult:
    """A machine card: `.card` the typed card, `to_dict()` its JSON."""

    def __init__(self, card: Card) -> None:
        self.card = card

    @property
    def id(self) -> str:
        return self.card.id

    def to_dict(self) -> dict[str, Any]:
        return self.card.to_json()

    def _repr_html_(self) -> str:
        return html.block(view.card_body(self.card))

    def __repr__(self) -> str:
        return text(view.terminal(self.card))


class CardComparisonResult:
    """Cards side by side: `.comparison` its rows, speedups and why."""

    def __init__(self, comparison: CardComparison) -> None:
        self.comparison = comparison

    def _repr_html_(self) -> str:
        return html.block(view.comparison_body(self.comparison))

    def __repr__(self) -> str:
        return text(view.comparison_terminal(self.comparison))


class FleetResult:
    """A fleet (`tpulab bench --ray`): `.fleet` its nodes, `.cards` their cards, `.view` each entry against the
    fleet's median with its stragglers; `to_dict()` the fleet's JSON."""

    def __init__(self, fleet: Fleet, cards: list[Card]) -> None:
        from tpulab.engine.fleet_view import analyse

        self.fleet, self.cards = fleet, cards
        self.view = analyse(fleet, cards)

    @property
    def id(self) -> str:
        return self.fleet.id

    def to_dict(self) -> dict[str, Any]:
        return self.fleet.to_json()

    def _repr_html_(self) -> str:
        from tpulab.views import fleet as fleet_view

        return html.block(fleet_view.body(self.view))

    def __repr__(self) -> str:
        from tpulab.views import fleet as fleet_view

        return text(fleet_view.terminal(self.view))


def bench(quick: bool = False, backend: str = "auto", db: str | Path | None = None, devices: str = "one",
          reference: bool = True, cluster: str | None = None, nodes: str | None = None,
          runtime_env: dict[str, Any] | None = None, budget_s: float | None = None) -> Any:
    """Run the suite (`tpulab bench`) and return its card (a `CardResult`), kept in the results; its progress is
    printed as it goes. `devices="all"` adds the scaling entry (`--devices all`); `reference=False` leaves out
    llama.cpp's lines; `budget_s` each backend's budget. Interrupting the cell stops the run in flight and returns
    the card so far, marked partial.

    `cluster="auto"` (or a Ray address) makes a card on every alive node of a Ray cluster instead (`tpulab bench
    --ray`) and returns a `FleetResult`: `nodes` picks them (`"GPU"`, `"key=value"`), `runtime_env` puts tpulab on
    them (`{"pip": ["tpulab[jax]"]}`); interrupting the cell cancels every node's card and keeps what came back."""
    from tpulab.engine.bench_run import Bench, Progress
    from tpulab.machine.detect import detect

    if cluster is not None:
        return _fleet(cluster, quick, backend, db, devices, reference, nodes, runtime_env, budget_s)

    def progress(p: Progress) -> None:
        e = p.finished or p.repeated
        said = (f"  {e.name}: {view.median_ci(e)} {e.unit or ''} ({e.stopped or e.reason or e.status})" if e else
                f"{p.count()} {p.what}, at most {p.eta:.0f} s left")
        print(said, file=sys.stderr, flush=True)

    runner = Bench(detect(), Path(db) if db else default_path(), backend, quick, on_progress=progress,
                   devices=devices, reference=reference, budget_s=budget_s)
    made: list[Card] = []
    done = threading.Event()  # not Thread.join: a join that Ctrl+C interrupts marks the thread ended while it runs

    def make() -> None:
        try:
            made.append(runner.run())
        finally:
            done.set()

    threading.Thread(target=make, name="tpulab-bench", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        runner.cancel()
        done.wait()
    return CardResult(made[0] if made else runner.card)


def _fleet(cluster: str, quick: bool, backend: str, db: str | Path | None, devices: str, reference: bool,
           nodes: str | None, runtime_env: dict[str, Any] | None, budget_s: float | None) -> FleetResult:
    from tpulab.engine.fleet import FleetBench, FleetProgress

    def progress(p: FleetProgress) -> None:
        e = p.progress.finished if p.progress is not None else None
        said = f"  {e.name}: {view.median_ci(e)} {e.unit or ''}" if e is not None else p.line
        print(f"[node {p.node}] {said}", file=sys.stderr, flush=True)

    runner = FleetBench(Path(db) if db else default_path(), cluster, backend, quick, budget_s=budget_s, nodes=nodes,
                        on_progress=progress, runtime_env=runtime_env, devices=devices, reference=reference)
    made: list[tuple[Fleet, list[Card]]] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def make() -> None:
        try:
            made.append(runner.run())
        except BaseException as e:  # noqa: BLE001 (raised in the cell, below)
            failed.append(e)
        finally:
            done.set()

    threading.Thread(target=make, name="tpulab-fleet", daemon=True).start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        runner.cancel()
        done.wait()
    if failed:
        raise failed[0]
    return FleetResult(*made[0])


def compare(*cards: CardResult | FleetResult | Card | str, db: str | Path | None = None) -> CardComparisonResult:
    """Cards side by side, speedups against the first: results, cards, or names (an id, `this`, `article`)."""
    store = Store(Path(db) if db else default_path())
    found: list[Card] = []
    for c in cards:
        if isinstance(c, FleetResult):  # a fleet: its median card per hardware group
            from tpulab.engine.fleet_view import median_cards

            found += median_cards(c.view)
            continue
        found += [c.card] if isinstance(c, CardResult) else [c] if isinstance(c, Card) else named([c], store)
    if len(found) < 2:
        raise ValueError("compare needs at least two cards (`article` alone names three)")
    return CardComparisonResult(compared(found))
