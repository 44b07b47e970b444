"""Machine cards side by side: entries as rows, machines as columns, each speedup against the first card, and why.

Noise is not a finding: each speedup comes with its interval, drawn from both cards' kept steps (each entry's
repeats, `tpulab.base.noise`), and ends in one word: faster, slower or no difference detected, beyond a stated
noise threshold. A card measures how far the machine drifted while it ran; a difference the larger drift of the
two cards explains is no difference, and says so. A card that keeps no steps (a published card, or one from before
cards kept them) gives a ratio and says it has no interval. A side timed while other work used the machine says so.

A speedup alone is a division. Each card holds its own ceilings, so the ratio of the two machines' relevant
ceiling (the matmul's FLOP/s for a compute-bound entry, the copy's bandwidth for a memory-bound one) is set beside the ratio
achieved: within `EXPLAINED` of each other the ceiling explains it; below, the slower side was held by something
else (its bound, its top op); above, the first card's entry sat further below its own ceiling. Where a ceiling is
missing (refused on a busy machine, never published), the line says it cannot explain the entry, and why.
Cards of different suites, versions or variants compare only on the entries they share, and say what differs. An
entry of other work (another batch or size) shows both figures and no ratio: where no entry is left with a speedup
(a quick card beside the article), the comparison says so first, and which card would compare.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from tpulab.base import fmt
from tpulab.base.errors import UsageError
from tpulab.base.noise import NOISE, SAME, Change, change
from tpulab.base.timing import median
from tpulab.engine.article_cards import ARTICLE, cards
from tpulab.engine.card import Card, CardEntry
from tpulab.engine.store import Store
from tpulab.workloads import registry

EXPLAINED = 1.25  # a speedup within this factor of the ceilings' ratio is explained by them
WORDS = {"compute": "compute ceiling (float32 matmul)", "memory": "memory bandwidth"}
SHORT = {"compute": "compute", "memory": "bandwidth"}
REFUSED = "why: below"  # a refused ceiling's reason is said once per card, after the rows
PUBLISHED = "published figure, no interval"
QUICK_AND_FULL = ("quick and full cards side by side: the quick suite runs smaller sizes; compared on shared entries "
                  "only, not as equals")
OTHER_WORK = "other work"  # two entries whose batch or sizes differ: their figures shown, no ratio, verdict nor mean


def alike(ratio: float) -> bool:
    """Within the noise threshold of 1x: not a difference to explain."""
    return 1 / (1 + NOISE) <= ratio <= 1 + NOISE


@dataclass
class Cell:
    entry: CardEntry | None  # None: this card has no usable figure for the row
    speedup: float | None = None  # against the first card's
    why: str | None = None
    change: Change | None = None  # the speedup's interval and its word, from both cards' kept steps
    no_interval: str | None = None  # why the speedup has no interval ('published figure, no interval')
    disturbed: list[str] = field(default_factory=list)  # either side timed under other work's load: which, how much


@dataclass
class Row:
    name: str
    unit: str
    cells: list[Cell]
    notes: list[str] = field(default_factory=list)  # what differs between the cards' runs of this entry
    work: list[str] = field(default_factory=list)  # ... of that, what sets the work of a step: the batch, the sizes


@dataclass
class CardComparison:
    cards: list[Card]
    rows: list[Row]
    geomeans: list[tuple[float | None, list[str]]]  # per card: the geometric mean over the entries it shares with the first
    differs: list[str]  # suite, version, variant, published vs measured
    lead: str | None = None  # why nothing is compared, where no cell has a speedup: said before the figures


def named(ids: list[str], store: Store) -> list[Card]:
    """The cards these names mean: an id or its first characters, `this` (the newest measured here), `article`
    (the article's three) or one of them by its id (`article-k80`)."""
    article = {c.id: c for c in cards()}
    out: list[Card] = []
    for wanted in ids:
        if wanted == ARTICLE:
            out += article.values()
        elif wanted in article:
            out.append(article[wanted])
        elif wanted == "this":
            kept = [c for c in store.cards() if not c.published]
            if not kept:
                raise UsageError("no card measured here yet: `tpulab bench --quick` makes one")
            out.append(kept[0])
        else:
            out.append(store.get_card(wanted))
    return out


def usable(card: Card, name: str) -> CardEntry | None:
    """A card's figure for an entry: its first that finished with one (a card of several backends: the first's)."""
    return next((e for e in card.entries if e.name == name and e.status == "ok" and e.median), None)


def compare(cards: list[Card]) -> CardComparison:
    first = cards[0]
    names = list(dict.fromkeys(e.name for c in cards for e in c.entries))
    rows = []
    for name in names:
        entries = [usable(c, name) for c in cards]
        if sum(e is not None for e in entries) < 2 and len(cards) > 1:
            continue  # held by one card only: nothing to set it beside
        base = entries[0]
        cells = [Cell(entries[0], disturbed=[f"{first.which()}: {base.disturbed}"] if base and base.disturbed else [])]
        for card, e in zip(cards[1:], entries[1:]):
            s = e.median / base.median if e and base and e.median and base.median else None
            if e and base and (e.artifact or base.artifact):
                s = None  # an artifact is no speed: said, never divided (nor in the geometric mean)
            cell = Cell(e, s)
            if base and e and s is not None and notes([base, e], work_keys([base])):  # other work: no speedup,
                cell.speedup, cell.no_interval = None, OTHER_WORK  # no verdict, no why: the row's line says it
            elif base and e:
                cell.disturbed = [f"{c.which()}: {x.disturbed}" for c, x in ((first, base), (card, e)) if x.disturbed]
                found = verdict(first, base, card, e) if s is not None else None
                cell.change, cell.no_interval = (found, None) if isinstance(found, Change) else (None, found)
                cell.why = why(name, first, base, card, e, cell)
            cells.append(cell)
        unit = next((e.unit for e in entries if e is not None and e.unit), "")
        rows.append(Row(name, unit or "", cells, notes(entries), notes(entries, work_keys(entries))))
    rows.sort(key=lambda r: bool(r.work))  # the entries whose work is alike lead; a stable sort keeps the suite's order
    geomeans: list[tuple[float | None, list[str]]] = [(None, []), *(geomean(rows, i) for i in range(1, len(cards)))]
    said = lead(cards, rows)
    differs = [d for d in differences(cards) if not (said and d == QUICK_AND_FULL)]  # (the lead says it)
    return CardComparison(cards, rows, geomeans, differs, said)


def lead(cards: list[Card], rows: list[Row]) -> str | None:
    """Where no cell has a speedup, why the cards are shown side by side and not compared (None where one has): a
    quick card set beside the article or a full card runs other sizes, and says which card compares with them."""
    if any(cell.speedup for r in rows for cell in r.cells[1:]):
        return None
    full = [c for c in cards if c.published or not c.suite.quick]
    if any(r.work for r in rows) and full and any(c.suite.quick and not c.published for c in cards):
        which = "the article" if all(c.published for c in full) else "a full card"
        return f"a quick card runs other sizes than {which}: `tpulab bench` (full) compares with it"
    return "nothing compared: no entry of alike work has a speed on the first card and another"


def geomean(rows: list[Row], i: int) -> tuple[float | None, list[str]]:
    """The geometric mean of card `i`'s speedups over the entries whose work is alike on it and the first (an entry of
    other work, another batch or size, has no speedup)."""
    pairs = [(r.name, r.cells[i].speedup) for r in rows if r.cells[i].speedup]
    if not pairs:
        return None, []
    return math.exp(sum(math.log(s) for _, s in pairs if s) / len(pairs)), [n for n, _ in pairs]


def faster(s: float) -> str:
    """'3.1x faster', '1.5x slower'; within the noise threshold the ratio alone ('1.02x'), which calls nothing."""
    return f"{s:.2f}x" if alike(s) else f"{s:.1f}x faster" if s >= 1 else f"{1 / s:.1f}x slower"


def verdict(a: Card, ea: CardEntry, b: Card, eb: CardEntry) -> Change | str:
    """`eb` against `ea` from both entries' kept steps (their repeats drawn as such): the speedup's interval and its
    word, the noise threshold widened by the cards' larger drift where that alone makes a difference none; or
    why there is no interval."""
    if a.published or b.published:
        return PUBLISHED
    bare = [c.label() for c, e in ((a, ea), (b, eb)) if not e.samples]
    if bare or not ea.median or not eb.median:
        return f"no interval: {' and '.join(bare)} kept no steps, made before cards kept them"
    mid_a, mid_b = (median([x for r in e.samples for x in r]) or 0.0 for e in (ea, eb))
    scale = eb.median * mid_b / (ea.median * mid_a)  # the ratio of their work per step: the speedup is of rates
    found = change([], [], scale, base_repeats=ea.samples, other_repeats=eb.samples)
    if found is None:
        return "no interval: no steps timed"
    # A card's drift is the machine's own moving, read where nothing else ran: beside other work it reads that
    # work's coming and going (a card beside a busy core drifted 57% here), and a disturbed side's difference is
    # what that load did, said beside the verdict, never widened away.
    quiet = not (ea.disturbed or eb.disturbed)
    drift = max((d for d in (a.drifted(), b.drifted()) if d is not None), default=0.0) if quiet else 0.0
    if found.word != SAME and drift > 0:  # the threshold, a factor either way, times the drift's
        wider = change([], [], scale, (1 + NOISE) * (1 + drift) - 1, base_repeats=ea.samples, other_repeats=eb.samples)
        if wider is not None and wider.word == SAME:
            return replace(wider, why=f"{wider.why}; within the cards' drift (±{drift:.1%})")
    return found


def against(card: Card, framework: CardEntry, line: CardEntry) -> Change | str:
    """A reference line (llama.cpp's) against the framework's entry it stands beside on one card, from both entries'
    kept steps: the speedup with its interval and its word; or why no comparison is a finding, said instead of a
    ratio (either run timed under other work's load, or no interval)."""
    if framework.disturbed or line.disturbed:
        return "not compared (disturbed)"
    if not (framework.samples and line.samples):
        return "not compared (no steps kept)"
    found = verdict(card, framework, card, line)
    return f"not compared ({found if isinstance(found, str) else found.why})" \
        if isinstance(found, str) or found.low is None else found


def why(name: str, a: Card, ea: CardEntry, b: Card, eb: CardEntry, cell: Cell) -> str:
    """'decode-b1: 0.97x [0.93x, 1.01x] no difference detected (noise threshold ±10%; ...)', or a difference and
    what explains it ('...; memory bandwidth 3.3x: explained by bandwidth'), or why it cannot be explained."""
    s = cell.speedup
    if s is None:
        return f"{name}: no speedup: {(b if eb.artifact else a).label()}'s figure is an artifact, not a speed"
    said = f"{name}: {cell.change.words()}" if cell.change else f"{name} {faster(s)} ({cell.no_interval})"
    if cell.disturbed:
        said += "; disturbed: " + "; ".join(cell.disturbed)
    same = cell.change.word == SAME if cell.change else alike(s)
    if same:
        return said  # nothing to explain
    return f"{said}; {explained(a, ea, b, eb, s)}"


def explained(a: Card, ea: CardEntry, b: Card, eb: CardEntry, s: float) -> str:
    """'memory bandwidth 3.3x: explained by bandwidth': the machines' ratio of the entry's ceiling beside its
    speedup; a ratio within noise explains nothing."""
    kind = eb.ceiling_kind
    ca, cb = a.ceiling(kind), b.ceiling(kind)
    if ca is None or cb is None:
        missing = b if cb is None else a
        refused = "memory" if kind == "memory" else "float32"
        because = f": refused ({REFUSED})" if any(k.split(" (")[0] == refused for k in missing.refused) else \
            " (published cards give none)" if missing.published else ""
        return f"cannot explain it: no {WORDS[kind]} on {missing.label()}{because}"
    r = cb.value / ca.value
    spec = "" if ca.measured and cb.measured else ", spec figures"
    head = f"{WORDS[kind]} {r:.1f}x{spec}"
    if not alike(r) and 1 / EXPLAINED <= s / r <= EXPLAINED:
        return f"{head}: explained by {SHORT[kind]}"
    if s < r:
        held = f"{eb.bound}-bound" if eb.bound else f"at {fmt.percent(eb.ceiling_fraction)} of its ceiling" \
            if eb.ceiling_fraction is not None else "held below its ceiling"
        ops = f", see its top ops ({eb.top_ops[0].name[:40]})" if eb.top_ops else ""
        return f"{head}: {held} on {b.label()}{ops}"
    frac_a = fmt.percent(ea.ceiling_fraction) if ea.ceiling_fraction is not None else "an unknown share"
    return f"{head}: beyond it: {a.label()} reached {frac_a} of its ceiling"


def work_keys(entries: list[CardEntry | None]) -> tuple[str, ...]:
    """The parameters that set the work of one step of these entries' workload: its batch and its declared sizes."""
    w = next((registry().get(e.workload) for e in entries if e is not None), None)
    return ("batch_size", *(w.sizes if w else ()))


def notes(entries: list[CardEntry | None], only: tuple[str, ...] | None = None) -> list[str]:
    """The parameters the cards' runs of one entry differ in ('batch_size 32 / 128'), of `only` where given; a
    parameter one side does not name is not a difference."""
    present = [e for e in entries if e is not None]
    keys = dict.fromkeys(k for e in present for k in e.params if only is None or k in only)
    out = []
    for k in keys:
        if any(k not in e.params for e in present):
            continue
        values = [e.params.get(k) for e in present]
        if any(v != values[0] for v in values):
            out.append(f"{k} " + " / ".join("-" if v is None else str(v) for v in values))
    return out[:4]


def differences(cards: list[Card]) -> list[str]:
    """What sets the cards apart beyond the machine: said, so that no two are read as equals when they are not."""
    out = []
    suites = {(c.suite.name, c.suite.version) for c in cards}
    if len(suites) > 1:
        out.append("suites differ (" + ", ".join(f"{c.short_id}: {c.suite.name} v{c.suite.version}" for c in cards)
                   + "): only the entries they share are compared")
    if len({c.suite.quick for c in cards}) > 1:
        out.append(QUICK_AND_FULL)
    published = [c.label() for c in cards if c.published]
    if published and len(published) < len(cards):
        out.append(f"{', '.join(published)}: published figures, not measured here")
    for c in cards:  # each reason once, naming every ceiling it refused
        for why in dict.fromkeys(c.refused.values()):
            out.append(f"{c.label()}: no {', '.join(k for k, v in c.refused.items() if v == why)} ceiling: {why}")
    lines = {e.backend for c in cards for e in c.entries if e.reference}  # reference engines some card ran
    out += [f"{c.label()}: no reference line: {why}" for c in cards for name, why in c.references.items()
            if name in lines]
    out += [f"{c.label()} is {c.status}" for c in cards if c.status == "partial"]
    out += [f"{c.label()} is noisy: {c.noisy}" for c in cards if c.noisy]
    out += [f"{c.which()} drifted from its start to its end: {c.drift_words()}" for c in cards if c.drift]
    return out
