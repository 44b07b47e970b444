"""A fleet read whole: each entry against the fleet's median, node by node, its stragglers named with why.

Nodes are grouped by hardware (the CPU's model and the accelerators, from each card's machine), so that a fleet
of two kinds of machine is two populations, each with its own median. Noise is not a finding: a node is a
straggler for an entry only where it is detectably slower than the other nodes of its group, as a card is slower
than another (`card_compare.verdict`): its kept steps against the pooled kept steps of the others, an interval for
the ratio, and "slower" only beyond the noise threshold (`tpulab.base.noise`). Its why comes from its own card:
its ceiling against its group's median (a compute entry's matmul, a memory entry's bandwidth), its bound, the load
beside it, and the CPUs it ran on.

A fleet leaves the machine as one JSON object (`shared`): the fleet, its nodes' cards, and what its view found; an
import (`from_file`) reads the fleet and its cards back, and works the view out again.

Two fleets compare as two cards do: each group's median card (each entry's median over the group's nodes, with all
their steps) set beside the other's by `card_compare.compare`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from tpulab.base.noise import NOISE, SAME, SLOWER, Change, change
from tpulab.base.timing import median
from tpulab.engine.card import Card, CardCeiling, CardEntry, Fleet, FleetNode, fleet_from_json, from_json, kept, scrubbed
from tpulab.engine.card_compare import WORDS, usable


@dataclass
class NodeCell:
    node: FleetNode
    entry: CardEntry | None  # None: no usable figure on this node
    ratio: float | None = None  # its median over the group's median
    change: Change | None = None  # against the other nodes of its group, pooled
    straggler: bool = False
    why: str | None = None  # a straggler's why, from its own card


@dataclass
class FleetRow:
    name: str
    unit: str
    median: float | None  # the group's median of its nodes' medians
    cells: list[NodeCell]


@dataclass
class Group:
    hardware: str  # 'Intel Xeon @ 2.20GHz' or 'AMD EPYC 7B13 + 8x NVIDIA H100'
    nodes: list[FleetNode]
    cards: list[Card]
    rows: list[FleetRow] = field(default_factory=list)


@dataclass
class FleetView:
    fleet: Fleet
    groups: list[Group]
    without: list[FleetNode]  # the nodes with no card: failed, cancelled, skipped, each with its reason

    def stragglers(self) -> list[tuple[str, NodeCell]]:
        """Every straggler, as (entry, cell)."""
        return [(r.name, c) for g in self.groups for r in g.rows for c in r.cells if c.straggler]


def hardware(card: Card) -> str:
    """What groups a node: its CPU's model and its accelerators ('+ 8x NVIDIA H100'), not its CPU count (a node with
    fewer CPUs of the same machine is that machine, slower: a straggler to explain)."""
    m = card.machine
    cpu = m.get("cpu")
    model = str(cpu.get("model") if isinstance(cpu, dict) and cpu.get("model") else m.get("label") or "unknown CPU")
    accelerators = [str(a.get("name")) for a in m.get("accelerators") or [] if isinstance(a, dict) and a.get("name")]
    kinds = {a: accelerators.count(a) for a in dict.fromkeys(accelerators)}
    return model + "".join(f" + {k}x {a}" for a, k in kinds.items())


def work(e: CardEntry) -> float | None:
    """An entry's work per step: its rate times its median step (the same on every node that ran the same entry)."""
    steps = [x for r in e.samples for x in r]
    mid = median(steps) if steps else None
    return e.median * mid if e.median and mid else None


def against(e: CardEntry, others: list[CardEntry], drift: float = 0.0) -> Change | None:
    """`e` against the pooled steps of `others` (each of their repeats a repeat), as `card_compare.verdict` sets one
    card's entry against another's; the threshold widened by the cards' drift where only it would call a
    difference (and no side was timed under load). None where either side kept no steps."""
    pooled = [r for o in others for r in o.samples]
    works = [w for w in (work(o) for o in others) if w]
    mine = work(e)
    if not e.samples or not pooled or not works or not mine:
        return None
    scale = mine / statistics.median(works)
    found = change([], [], scale, base_repeats=pooled, other_repeats=e.samples)
    quiet = not (e.disturbed or any(o.disturbed for o in others))
    if found is not None and found.word != SAME and drift > 0 and quiet:
        wider = change([], [], scale, (1 + NOISE) * (1 + drift) - 1, base_repeats=pooled, other_repeats=e.samples)
        if wider is not None and wider.word == SAME:
            return replace(wider, why=f"{wider.why}; within the cards' drift (±{drift:.1%})")
    return found


def cpus(card: Card) -> int | None:
    n = card.machine.get("cpus")
    if isinstance(n, int):
        return n
    cpu = card.machine.get("cpu")
    threads = cpu.get("threads") if isinstance(cpu, dict) else None
    return threads if isinstance(threads, int) else None


def why(card: Card, e: CardEntry, group: Group) -> str:
    """A straggler's why, from its own card: its ceiling against the group's median, its bound, the load beside it,
    its CPUs."""
    said = []
    kind = e.ceiling_kind
    mine = card.ceiling(kind)
    theirs = [c.value for c in (o.ceiling(kind) for o in group.cards if o is not card) if c is not None]
    if mine is not None and theirs:
        said.append(f"{WORDS[kind]} {mine.value / statistics.median(theirs):.2f}x the fleet's median")
    elif mine is not None:
        said.append(f"no {WORDS[kind]} on the others' cards to set its own against")
    else:
        refused = next((v for k, v in card.refused.items() if k.split(" (")[0] == ("memory" if kind == "memory"
                                                                                   else "float32")), None)
        said.append(f"no {WORDS[kind]} on its card" + (f" ({refused[:120]})" if refused else ""))
    if e.bound:
        said.append(f"{e.bound}-bound")
    elif e.ceiling_fraction is not None:
        said.append(f"at {e.ceiling_fraction:.0%} of its ceiling")
    load = e.disturbed or card.noisy
    said.append(f"load beside it: {load}" if load else "no other load recorded beside it")
    n, others = cpus(card), [c for c in (cpus(o) for o in group.cards if o is not card) if c is not None]
    if n is not None:
        affinity = card.machine.get("affinity")
        fleet = f" (the others' median {statistics.median(others):g})" if others else ""
        said.append(f"{n} CPU{'s' if n != 1 else ''}{fleet}" + (f": {affinity}" if affinity else ""))
    return "; ".join(said)


def analyse(fleet: Fleet, cards: list[Card]) -> FleetView:
    """The fleet's groups, each entry's row of nodes against the group's median, and its stragglers."""
    by_id = {c.id: c for c in cards}
    groups: dict[str, Group] = {}
    for node in fleet.nodes:
        card = by_id.get(node.card or "")
        if card is None:
            continue
        g = groups.setdefault(hardware(card), Group(hardware(card), [], []))
        g.nodes.append(node)
        g.cards.append(card)
    for g in groups.values():
        names = list(dict.fromkeys(e.name for c in g.cards for e in c.entries))
        for name in names:
            entries = [usable(c, name) for c in g.cards]
            values = [e.median for e in entries if e is not None and e.median]
            if not values:
                continue
            mid = statistics.median(values)
            cells = []
            for node, card, e in zip(g.nodes, g.cards, entries):
                cell = NodeCell(node, e, e.median / mid if e is not None and e.median else None)
                others = [o for o in entries if o is not None and o is not e]
                if e is not None and others:
                    drifts = [d for d in (c.drifted() for c in g.cards) if d is not None]
                    cell.change = against(e, others, max(drifts, default=0.0))
                    cell.straggler = cell.change is not None and cell.change.word == SLOWER
                    cell.why = why(card, e, g) if cell.straggler else None
                cells.append(cell)
            unit = next((e.unit for e in entries if e is not None and e.unit), "")
            g.rows.append(FleetRow(name, unit or "", mid, cells))
    return FleetView(fleet, list(groups.values()), [n for n in fleet.nodes if n.card is None or n.card not in by_id])


def median_card(view: FleetView, group: Group) -> Card:
    """A group's median card: each entry's median over its nodes, with all their kept steps (each node's repeats as
    repeats), and each ceiling's median: what two fleets compare by."""
    first = group.cards[0]
    entries = []
    for row in group.rows:
        found = [c.entry for c in row.cells if c.entry is not None]
        if not found or row.median is None:
            continue
        e = found[0]
        entries.append(replace(e, median=row.median, samples=kept([r for x in found for r in x.samples]),
                               low=None, high=None, p10=None, p90=None, n=sum(x.n or 0 for x in found),
                               disturbed="; ".join(x.disturbed for x in found if x.disturbed) or None,
                               run_id=None, runs=[r for x in found for r in x.runs]))
    ceilings = []
    for key in dict.fromkeys((c.kind, c.dtype) for card in group.cards for c in card.ceilings):
        values = [c.value for card in group.cards for c in card.ceilings if (c.kind, c.dtype) == key]
        model = next(c for card in group.cards for c in card.ceilings if (c.kind, c.dtype) == key)
        ceilings.append(CardCeiling(device=model.device, kind=model.kind, dtype=model.dtype,
                                    value=statistics.median(values), unit=model.unit,
                                    source=f"the median of {len(values)} nodes' rooflines"))
    label = f"fleet {view.fleet.short_id}: {group.hardware} ({len(group.cards)} nodes, median)"
    return Card(id=f"{view.fleet.id[:8]}-{view.groups.index(group) + 1}", created_at=view.fleet.created_at,
                suite=first.suite, machine={**first.machine, "label": label}, backends=first.backends,
                ceilings=ceilings, status=view.fleet.status if view.fleet.status != "running" else "partial",
                entries=entries)


def median_cards(view: FleetView) -> list[Card]:
    """A fleet as cards: one median card per hardware group."""
    return [median_card(view, g) for g in view.groups if g.rows]


MAX_FLEET_BYTES = 64 * 2**20  # a fleet's file: its nodes' cards of a few KiB each


def shared(view: FleetView) -> dict[str, Any]:
    """The fleet as one JSON object: the fleet's own fields, its nodes' cards (host, user and home left out, as a
    card's export is), and what its view found per hardware group (each entry's median, each node's figure, ratio
    and straggler's why): for scripts; an import works it out again from the cards."""
    return {**view.fleet.to_json(), "cards": [scrubbed(c).to_json() for g in view.groups for c in g.cards],
            "groups": [{"hardware": g.hardware, "nodes": [n.label for n in g.nodes], "rows": [
                {"name": r.name, "unit": r.unit, "median": r.median, "cells": [
                    {"node": c.node.label, "median": c.entry.median if c.entry else None, "ratio": c.ratio,
                     "change": c.change.cell() if c.change else None, "straggler": c.straggler, "why": c.why}
                    for c in r.cells]} for r in g.rows]} for g in view.groups]}


def from_file(data: Any) -> tuple[Fleet, list[Card]]:
    """A fleet and its cards from `shared`'s object; a `ValueError` in one line names what is wrong (a card that is
    none of its nodes' is refused: a fleet's file carries its own cards only)."""
    if not isinstance(data, dict):
        raise ValueError("not a tpulab fleet (not a JSON object)")
    cards = data.get("cards", [])
    if not isinstance(cards, list):
        raise ValueError("'cards' should be a list of cards")
    fleet = fleet_from_json({k: v for k, v in data.items() if k not in ("cards", "groups")})
    found = []
    for i, c in enumerate(cards, 1):
        try:
            found.append(from_json(c))
        except (ValueError, TypeError) as e:
            raise ValueError(f"card {i}: {e}") from None
    ids = {n.card for n in fleet.nodes if n.card}
    stray = next((c.id for c in found if c.id not in ids), None)
    if stray is not None:
        raise ValueError(f"card {stray[:8]} is none of the fleet's nodes' cards")
    return fleet, found
