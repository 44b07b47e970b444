"""The machine card and card comparisons, in every form a user shares: the terminal (one 80x24 screen of headline
figures, more with `full`), Markdown, CSV and a self-contained HTML page with inline SVG charts.

A card may come from anyone's file: every field from it goes through `tpulab.base.safe` for its medium (Rich
text built with `safe.text`, HTML through `views.html.table`/`safe.html`, Markdown with its pipes escaped).

A figure stands with its interval ('1,234 ±2.1%'), a comparison's cell with its ratio's interval and its word
('0.97x [0.93x, 1.01x] no difference detected'): words wrap at a narrow terminal, a figure is never cut.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tpulab.base import fmt, safe
from tpulab.base.noise import FASTER, NOISE, SAME, SLOWER, Change
from tpulab.base.timing import Stats
from tpulab.engine.card import Card, CardEntry
from tpulab.engine.card_compare import OTHER_WORK, CardComparison, Cell, against
from tpulab.views import html

CSV_FIELDS = ("card", "workload", "entry", "backend", "status", "median", "low", "high", "p10", "p90", "n", "repeats",
              "cv", "unit", "ceiling_fraction", "spec_fraction", "bound", "host_gap_share", "stopped", "disturbed",
              "run_id", "command", "reason")


def figure(x: float | None) -> str:
    """A figure in 3-4 significant digits: 171.9, 4,372, 0.05."""
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def plus_minus(e: CardEntry) -> str:
    """'±2.1%': the larger half of the median's 95% interval ('' without one: a published or an older card), as
    a run's figure says it (only the median and its interval are read)."""
    m = e.median
    return "" if m is None else fmt.plus_minus(Stats(e.n or 0, m, m, m, m, m, m, e.low, e.high))


def median_ci(e: CardEntry) -> str:
    """'1,234 ±2.1%': the median and its interval, for a cell."""
    return f"{figure(e.median)} {plus_minus(e)}".strip()


def spread(e: CardEntry) -> str:
    return f"{figure(e.p10)}-{figure(e.p90)}" if e.p10 is not None and e.p90 is not None else "-"


def title(card: Card) -> str:
    variant = "published" if card.published else ("quick" if card.suite.quick else "full") + f" · {card.status}"
    took = f" · {fmt.duration(card.wall_s)}" if card.wall_s else ""
    return f"card {card.short_id} · {card.label()} · {', '.join(card.backends)} · {variant}{took}"


REASON_CHARS = 110  # a refused ceiling's reason on the terminal's one screen (whole with --full)


def ceilings_line(card: Card, whole: bool = True) -> str:
    said = [f"{c.dtype} {fmt.rate(c.value, c.unit)}" + ("" if c.measured else " (spec)") +
            (" (reused)" if c.reused else "") for c in card.ceilings]
    reasons = list(dict.fromkeys(card.refused.values()))
    refused = [", ".join(k for k, v in card.refused.items() if v == why) + ": " +
               (why if whole or len(why) <= REASON_CHARS else why[:REASON_CHARS - 1] + "…") for why in reasons]
    out = "ceilings: " + (", ".join(said) if said else "none measured")
    return out + (f"; refused: {'; '.join(refused)}" if refused else "")


def stability_lines(card: Card) -> list[str]:
    """How far the machine moved while the card ran, and which entries were timed under other work's load."""
    out = [f"drift from start to end: {card.drift_words()}"] if card.drift else []
    hit = [e.name for e in card.entries if e.disturbed]
    if hit:
        out.append(f"disturbed (other work used the machine while timed): {', '.join(hit)}: their figures are this "
                   "machine under that load")
    return out


def engine(e: CardEntry) -> str:
    """A reference line's engine, as its name says it ('decode-b1 llama.cpp q4_0': llama.cpp), else its backend."""
    middle = e.name.removeprefix(f"{e.reference} ").removesuffix(f" {e.variant}")
    return middle if e.reference and middle != e.name else e.backend


def limit(e: CardEntry) -> str:
    """' of 87.3': the entry's figure at its whole ceiling, from its own work (a q4_0 line's from its own weight
    bytes), ' (over it)' beside a figure past it (`OVER` says how it can be); '' without a measured ceiling."""
    if not e.ceiling_fraction or not e.median:
        return ""
    return f" of {figure(e.median / e.ceiling_fraction)}" + (" (over it)" if e.ceiling_fraction > 1 else "")


OVER = "the weights partly stayed in a cache, or the ceiling was measured low"  # how a figure past its limit can be


def reference_lines(card: Card) -> list[str]:
    """Each entry beside its reference engines' lines, every figure with its interval and of its own limit at the
    card's ceiling, then each line against the framework's with its interval and word, or why it is not compared:
    'decode-b1 tokens/s, each of its limit at this bandwidth for its own weight bytes: torch 28.5 ±2.0% of 30.1;
    llama.cpp f32 35.1 ±3.0% of 30.1 (over it), q4_0 90.0 ±67% of 160; against torch (noise threshold ±10%): f32
    1.23x [1.18x, 1.29x] faster, q4_0 not compared (disturbed); f32 over its limit: ...'; and each engine not
    installed, with what its line would add."""
    out = []
    for e in card.entries:
        lines = [r for r in card.entries if r.reference == e.name and r.status == "ok" and r.median]
        if e.reference or not lines or e.status != "ok" or not e.median:
            continue
        ceiling = "bandwidth" if e.ceiling_kind == "memory" else "compute ceiling"
        head = f"each of its limit at this {ceiling} for its own weight bytes" \
            if any(x.ceiling_fraction for x in (e, *lines)) else f"no measured {ceiling}, no limit"
        said = [f"{e.name} {e.unit or ''}, {head}: {e.backend} {median_ci(e)}{limit(e)}"]
        said += [f"{name} " + ", ".join(f"{x.variant} {median_ci(x)}{limit(x)}" for x in lines if engine(x) == name)
                 for name in dict.fromkeys(engine(r) for r in lines)]
        found = [(x, against(card, e, x)) for x in lines]
        reasons = {c for _, c in found if not isinstance(c, Change)}
        if len(reasons) == 1 and not any(isinstance(c, Change) for _, c in found):
            said.append(f"against {e.backend}: {reasons.pop()}")  # one reason for all, said once
        else:
            said.append(f"against {e.backend} (noise threshold ±{NOISE:.0%}): " + ", ".join(
                f"{engine(x) if len({engine(r) for r in lines}) > 1 else ''} {x.variant} "
                f"{c.cell() if isinstance(c, Change) else c}".strip() for x, c in found))
        over = [x.variant or x.backend for x in (e, *lines) if x.ceiling_fraction and x.ceiling_fraction > 1]
        said += [f"{', '.join(over)} over {'its' if len(over) == 1 else 'their'} limit: {OVER}"] if over else []
        out.append("; ".join(said))
    return out + list(card.references.values())


def entry_row(e: CardEntry) -> list[str]:
    """A row of the entries' table (`HEADER`); an entry that gave no figure shows its status (its reason is said
    below the table, whole)."""
    if e.status != "ok":
        return [e.name, e.backend, "-", e.status, "", "", "", "", ""]
    return [e.name, e.backend, median_ci(e), e.unit or "", spread(e), str(e.n or "-"),
            fmt.percent(e.ceiling_fraction) if e.ceiling_fraction is not None else "-", e.bound or "-",
            (e.run_id or "")[:8]]


HEADER = ("entry", "backend", "median", "unit", "p10-p90", "n", "ceiling", "bound", "run")
# A terminal's table, at 80 columns: the backends are in the title (or head their entries), and --full says each
# entry's backend, device and run below the table
SCREEN = ("entry", "median", "unit", "p10-p90", "n", "ceiling", "bound")
FIGURES = ("median", "n", "ceiling", "p10-p90")


def terminal(card: Card, full: bool = False) -> RenderableType:
    """The card for a terminal: its title, ceilings and one row per entry; `full` adds the machine and, per entry,
    how its measuring stopped, its top ops, verdicts and the command that runs it again."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False, collapse_padding=True)
    for name in SCREEN:  # where a terminal is narrower still, the names and words wrap; a figure is never cut
        t.add_column(name, overflow="fold", no_wrap=name in FIGURES,
                     justify="right" if name in ("median", "n", "ceiling") else "left")
    backend = None
    shown = [e for e in card.entries if full or not e.reference]  # one screen: the reference lines below the table
    for e in shown:
        if len({x.backend for x in shown}) > 1 and e.backend != backend:  # each backend's entries under its name
            backend = e.backend
            t.add_row(safe.text(backend + (" (reference)" if e.reference else ""), "bold"))
        row = dict(zip(HEADER, entry_row(e)))
        t.add_row(*(safe.text(row[name], "red" if e.status != "ok" else "") for name in SCREEN))
    parts: list[RenderableType] = [safe.text(title(card), "bold"), safe.text(ceilings_line(card, full), "cyan")]
    if card.published:
        parts.append(safe.text(card.published, "yellow"))
    if card.noisy:
        parts.append(safe.text(f"noisy: {card.noisy}", "yellow"))
    parts.append(t)
    parts += [safe.text(line, "green") for line in reference_lines(card)]
    parts += [safe.text(line, "yellow") for line in stability_lines(card)]
    parts += [safe.text(f"{e.name}: {e.status}: {e.reason or ''}", "red") for e in card.entries if e.status != "ok"]
    parts += [safe.text(f"{e.name}: {e.artifact}", "bold red") for e in card.entries if e.artifact]
    if not full:  # a scaling entry's speedup over one device (its first verdict), which no column holds
        parts += [safe.text(f"{e.name}: {e.verdicts[0]}") for e in card.entries if e.scaling is not None]
    if full:
        parts.append(machine_table(card))
        for e in card.entries:
            parts.append(safe.text(f"{e.name} ({e.backend}, {e.device or '-'})", "bold"))
            lines = [f"stopped: {e.stopped}" if e.stopped else None,
                     f"disturbed: {e.disturbed}" if e.disturbed else None,
                     f"cv {fmt.percent(e.cv)}" if e.cv is not None else None,
                     f"of spec {fmt.percent(e.spec_fraction)}" if e.spec_fraction is not None else None,
                     f"host gap {fmt.percent(e.host_gap_share)}" if e.host_gap_share is not None else None,
                     "top ops: " + ", ".join(f"{o.name} {fmt.percent(o.share)}" for o in e.top_ops) if e.top_ops else None,
                     *e.verdicts, f"run {e.run_id}" if e.run_id else None, e.command]
            parts += [safe.text(f"  {line}") for line in lines if line]
    return Group(*parts)


def machine_rows(card: Card) -> list[tuple[str, str]]:
    m = card.machine
    found = m.get("cpu")
    cpu: dict[str, Any] = found if isinstance(found, dict) else {}
    rows = [("machine", m.get("label")), ("CPU", cpu.get("model")),
            ("cores / threads", f"{cpu.get('cores', '-')} / {cpu.get('threads', '-')}" if cpu else None),
            ("memory", fmt.bytes_(cpu.get("memory_bytes")) if isinstance(cpu.get("memory_bytes"), int) else None),
            ("last-level cache", fmt.bytes_(cpu.get("llc_bytes")) if isinstance(cpu.get("llc_bytes"), int) else None),
            ("CPU quota", cpu.get("cpu_quota")), ("governor", cpu.get("governor")), ("throttling", cpu.get("throttling")),
            ("transparent huge pages", cpu.get("huge_pages"))]
    for a in m.get("accelerators") or []:
        if isinstance(a, dict):
            rows.append(("accelerator", ", ".join(f"{k} {v}" for k, v in a.items() if v is not None)))
    if card.node is not None:  # a fleet's card: the node it was made on, and the cores it was given
        n = card.node
        rows += [("fleet node", f"{n.label} of fleet {n.fleet[:8]} (Ray node {n.node_id[:12]})"),
                 ("node's CPUs", f"{m.get('cpus', '-')}" + (f" ({m['affinity']})" if m.get("affinity") else ""))]
    rows += [("OS", m.get("os")), ("Python", m.get("python")), ("tpulab", m.get("tpulab")),
             ("packages", ", ".join(f"{k} {v}" for k, v in (m.get("packages") or {}).items())
              if isinstance(m.get("packages"), dict) else None),
             ("speed variables", ", ".join(f"{k}={v}" for k, v in (m.get("env") or {}).items()) or "none set"
              if isinstance(m.get("env"), dict) else None),
             ("others' load", f"{card.load:.2f} cores at most" if card.load is not None else None)]
    return [(k, str(v)) for k, v in rows if v not in (None, "")]


def machine_table(card: Card) -> Table:
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    for k, v in machine_rows(card):
        t.add_row(k, safe.text(v))
    return t


# --- Markdown and CSV ---------------------------------------------------------------------------------
def _md(text: object) -> str:
    return safe.visible(text).replace("|", "\\|").replace("\n", " ")


def markdown(card: Card) -> str:
    out = [f"### tpulab {_md(title(card))}", "", _md(ceilings_line(card)), ""]
    if card.published:
        out += [f"*{_md(card.published)}*", ""]
    if card.noisy:
        out += [f"**noisy**: {_md(card.noisy)}", ""]
    out += [x for line in [*reference_lines(card), *stability_lines(card)] for x in (_md(line), "")]
    out += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    out += ["| " + " | ".join(_md(c) for c in entry_row(e)) + " |" for e in card.entries]
    out += ["", "| machine | |", "|---|---|"] + [f"| {_md(k)} | {_md(v)} |" for k, v in machine_rows(card)]
    return "\n".join(out) + "\n"


def csv_text(card: Card) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_FIELDS)
    w.writeheader()
    for e in card.entries:
        d: dict[str, Any] = {k: getattr(e, k, None) for k in CSV_FIELDS}
        d.update(card=card.id, entry=e.name)
        w.writerow({k: safe.visible(v) if isinstance(v, str) else v for k, v in d.items()})
    return buf.getvalue()


# --- HTML -------------------------------------------------------------------------------------------
def bars(rows: Sequence[tuple[str, float | None, str]], what: str, scale: float | None = None,
         mark: float | None = None) -> str:
    """A horizontal bar chart as inline SVG: one bar per (label, value, shown) row, none for an unknown value;
    `scale`: the value of a full bar (charts set side by side share it); `mark`: a reference line (1x)."""
    known = [v for _, v, _ in rows if v is not None]
    top = scale or max(known, default=1.0) or 1.0
    height, width, left = 18, 560, 170
    right = 20 + 6 * max((len(shown) for _, _, shown in rows), default=10)  # the figure beside a full bar, whole
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + left + right}" '
             f'height="{height * len(rows) + 26}" '
             f'role="img"><title>{safe.html(what)}</title>'
             f'<text x="0" y="12" font-size="12" font-weight="600">{safe.html(what)}</text>']
    for i, (label, value, shown) in enumerate(rows):
        y = 20 + i * height
        parts.append(f'<text x="0" y="{y + 12}" font-size="11">{safe.html(label[:28])}</text>')
        if value is not None:
            w = max(1.0, min(1.0, value / top) * width)
            parts.append(f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{height - 5}" fill="{html.COLORS[0]}"/>')
        parts.append(f'<text x="{left + (min(1.0, (value or 0) / top) * width if value else 0) + 4:.1f}" y="{y + 12}" '
                     f'font-size="11">{safe.html(shown)}</text>')
    if mark is not None:
        x = left + min(1.0, mark / top) * width
        parts.append(f'<line x1="{x:.1f}" y1="18" x2="{x:.1f}" y2="{height * len(rows) + 22}" stroke="#222" '
                     f'stroke-dasharray="3,2"/><text x="{x + 2:.1f}" y="{height * len(rows) + 24}" font-size="10">'
                     f'{mark:g}x</text>')
    return '<div class="charts">' + "".join(parts) + "</svg></div>"


def card_body(card: Card) -> str:
    ok = [e for e in card.entries if e.status == "ok"]
    fraction = bars([(e.name, e.ceiling_fraction, fmt.percent(e.ceiling_fraction) if e.ceiling_fraction is not None
                      else "no measured ceiling") for e in ok], "fraction of the measured ceiling", scale=1.0)
    extra = [[e.name, e.stopped or "", ", ".join(f"{o.name} {fmt.percent(o.share)}" for o in e.top_ops),
              "; ".join(e.verdicts), e.command or ""] for e in card.entries]
    notes = [card.published or "", f"noisy: {card.noisy}" if card.noisy else "", *stability_lines(card)]
    said = html.lines(reference_lines(card))
    notes += [f"{e.name}: {e.artifact}" for e in card.entries if e.artifact]
    return (html.lines([title(card), ceilings_line(card)]) + said + html.lines([n for n in notes if n], "warn")
            + html.table([entry_row(e) for e in card.entries], HEADER, "entries")
            + fraction + html.table(extra, ("entry", "stopped", "top ops", "verdicts", "command"), "how each was measured")
            + html.table(machine_rows(card), ("machine", ""), "the machine"))


def card_html(card: Card) -> str:
    return html.page(f"tpulab machine card {card.short_id}", [card_body(card)])


# --- comparisons ------------------------------------------------------------------------------------
def verdict(cell: Cell) -> str:
    """'0.97x [0.93x, 1.01x] no difference detected', '5.75x no interval', or '' without a speedup."""
    if cell.change is not None:
        return cell.change.cell()
    if cell.no_interval == OTHER_WORK:
        return ""  # its figure alone: a ratio of other work is no speedup (the row says so, and why)
    return f"{cell.speedup:.2f}x no interval" if cell.speedup else ""


def comparison_rows(cmp: CardComparison) -> list[list[str]]:
    out = []
    for row in cmp.rows:
        cells = []
        for cell in row.cells:
            if cell.entry is None:
                cells.append("-")
            else:
                said = [median_ci(cell.entry), verdict(cell), "artifact" if cell.entry.artifact else "",
                        "disturbed" if cell.disturbed else ""]
                cells.append(" ".join(x for x in said if x))
        out.append([f"{row.name} [{row.unit}]" + (" (other work)" if row.work else ""), *cells])
    if cmp.lead:  # nothing compared: no mean either
        return out
    gm = ["geometric mean, entries of alike work", "1.00x"] + [
        f"{g:.2f}x over {len(names)} entr{'y' if len(names) == 1 else 'ies'}" if g else "none alike"
        for g, names in cmp.geomeans[1:]]
    return out + [gm]


def tally(cmp: CardComparison, i: int) -> str | None:
    """'B [d1e2f3a4] against A [c0ffee00]: 0 faster, 1 slower, 6 no difference detected (noise threshold ±10%)';
    None where no entry had an interval (each line says why)."""
    cells = [r.cells[i] for r in cmp.rows if r.cells[i].speedup]
    changes = [c.change for c in cells if c.change]
    if not changes:
        return None
    words = [c.word for c in changes]
    said = ", ".join(f"{words.count(w)} {w}" for w in (FASTER, SLOWER, SAME))
    drift = sum(c.threshold > NOISE for c in changes)
    notes = [f"{drift} of them within the cards' drift" if drift else "",
             f"{len(cells) - len(changes)} without an interval" if len(cells) > len(changes) else ""]
    return (f"{cmp.cards[i].which()} against {cmp.cards[0].which()}: {said} (noise threshold ±{NOISE:.0%})"
            + "".join(f"; {n}" for n in notes if n))


def comparison_lines(cmp: CardComparison) -> list[str]:
    lines = [f"{card.which()}: {c.why}" for r in cmp.rows for card, c in zip(cmp.cards, r.cells) if c.why]
    lines += [t for t in (tally(cmp, i) for i in range(1, len(cmp.cards))) if t]
    lines += [f"{r.name}: other work ({'; '.join(r.work)}): a card whose sizes differ from the first's gets no "
              "speedup, and no mean holds it" for r in cmp.rows if r.work]
    lines += [f"{r.name}: parameters differ: {'; '.join(x for x in r.notes if x not in r.work)}" for r in cmp.rows
              if set(r.notes) - set(r.work)]
    lines += [f"geometric mean over {', '.join(names)} (the entries of alike work {c.which()} shares with the first)"
              for c, (g, names) in zip(cmp.cards[1:], cmp.geomeans[1:]) if g]
    return lines + cmp.differs


class ComparisonTables:
    """The comparison's table, its machines split over as many tables as the terminal's width needs (each with the
    entries' column): words wrap, a figure or a speedup is never cut."""

    def __init__(self, cmp: CardComparison) -> None:
        self.headers = [c.which() for c in cmp.cards]
        self.rows = comparison_rows(cmp)
        self.heading = heading(cmp)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        groups: list[list[int]] = []
        unbounded = options.update_width(10_000)  # (a table's measurement is clamped to the width it is given)
        for i in range(len(self.headers)):  # as many machines to a table as fit at their longest word
            if groups and Measurement.get(console, unbounded, self.table([*groups[-1], i])).minimum <= options.max_width:
                groups[-1].append(i)
            else:
                groups.append([i])
        for n, machines in enumerate(groups):
            if n:
                yield safe.text(f"{self.heading}, continued: {', '.join(self.headers[i] for i in machines)}",
                                "bold")  # (the labels are an imported card's text)
            yield self.table(machines)

    def table(self, machines: list[int]) -> Table:
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("entry", overflow="fold", min_width=14)
        for i in machines:
            t.add_column(safe.text(self.headers[i]), overflow="fold", justify="right")
        for row in self.rows:
            t.add_row(safe.text(row[0]), *(safe.text(row[i + 1]) for i in machines))
        return t


def heading(cmp: CardComparison) -> str:
    """What the table holds: speedups against the first card, or, where none is one, the cards' figures alone."""
    return "figures side by side, not compared" if cmp.lead else "speedups against the first card"


def comparison_terminal(cmp: CardComparison) -> RenderableType:
    lead = [Text(cmp.lead, style="bold yellow")] if cmp.lead else []
    return Group(*lead, Text(heading(cmp), style="bold"), ComparisonTables(cmp),
                 *(safe.text(line) for line in comparison_lines(cmp)))


def comparison_html(cmp: CardComparison) -> str:
    return html.page("tpulab machine cards compared", [comparison_body(cmp)])


def comparison_body(cmp: CardComparison) -> str:
    charts = []
    top = max([1.0, *(cell.speedup for r in cmp.rows for cell in r.cells if cell.speedup)])  # one scale for all
    for i, c in enumerate(cmp.cards[1:] if not cmp.lead else [], 1):  # (nothing compared: no chart of speedups)
        rows = [(r.name, r.cells[i].speedup, verdict(r.cells[i]) or "-") for r in cmp.rows]
        charts.append(bars(rows, f"{c.which()} against {cmp.cards[0].which()}", scale=top, mark=1.0))
    return (html.lines([cmp.lead] if cmp.lead else [])
            + html.table(comparison_rows(cmp), ["entry", *(c.which() for c in cmp.cards)], heading(cmp))
            + "".join(charts) + html.lines(comparison_lines(cmp)))


def listing(cards: list[Card]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("card", "created", "machine", "suite", "status", "entries"):
        t.add_column(name, overflow="fold", no_wrap=name != "machine")
    for c in cards:
        ok = sum(e.status == "ok" for e in c.entries)
        suite = "-" if c.published else f"v{c.suite.version}" + (" quick" if c.suite.quick else "")
        t.add_row(*(safe.text(x) for x in (c.short_id, c.created_at[:10], c.label(),
                                           suite, "published" if c.published else c.status,
                                           f"{ok}/{len(c.entries)}")))
    return t
