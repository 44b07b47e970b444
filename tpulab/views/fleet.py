"""A fleet (`tpulab bench --ray`): per hardware group, entries as rows and nodes as columns, each node's figure
with its ratio to the group's median, its stragglers named with why, and the nodes that gave no card with theirs;
for the terminal, Markdown and a self-contained HTML page. Every string from a card goes through `tpulab.base.safe`.
"""

from __future__ import annotations

from rich import box
from rich.console import Group as Stack
from rich.console import RenderableType
from rich.table import Table

from tpulab.base import fmt, safe
from tpulab.base.noise import NOISE
from tpulab.engine.card import Fleet
from tpulab.engine.fleet_view import FleetView, Group, NodeCell
from tpulab.views import html
from tpulab.views.card import figure, median_ci


def title(view: FleetView) -> str:
    f = view.fleet
    kept = sum(n.card is not None for n in f.nodes)
    took = f" · {fmt.duration(f.wall_s)}" if f.wall_s else ""
    quick = "quick" if f.suite.quick else "full"
    return f"fleet {f.short_id} · {kept} of {len(f.nodes)} nodes' cards · {f.backend} · {quick} · {f.status}{took}"


def cell_text(c: NodeCell) -> str:
    """'1,234 ±2.1% (0.52x) straggler', '-' where the node has no figure."""
    if c.entry is None:
        return "-"
    ratio = f" ({c.ratio:.2f}x)" if c.ratio is not None else ""
    return f"{median_ci(c.entry)}{ratio}" + (" straggler" if c.straggler else "")


def rows(g: Group) -> list[list[str]]:
    return [[f"{r.name} [{r.unit}]", figure(r.median), *(cell_text(c) for c in r.cells)] for r in g.rows]


def header(g: Group) -> list[str]:
    return ["entry", "median", *(n.label for n in g.nodes)]


def lines(view: FleetView) -> list[str]:
    """The stragglers with their why, each node's card, the nodes without one with their reason, how it ran."""
    out = [f"{c.node.label} is a straggler on {name}: {c.change.cell() if c.change else ''}; {c.why}"
           for name, c in view.stragglers()]
    if not view.stragglers() and view.groups:
        out.append(f"no straggler: no node detectably slower than the others of its group on any entry (noise "
                   f"threshold ±{NOISE:.0%})")
    out += [f"{n.label}: card {(n.card or '')[:8]}" + (f" ({n.reason})" if n.reason else "")
            for g in view.groups for n in g.nodes]
    out += [f"{n.label}: {n.status}: {n.reason or ''}" for n in view.without]
    out += [f"{len(view.groups)} hardware groups, each its own population: "
            + "; ".join(f"{g.hardware}: {', '.join(n.label for n in g.nodes)}" for g in view.groups)] \
        if len(view.groups) > 1 else []
    return out + view.fleet.schedule


def terminal(view: FleetView) -> RenderableType:
    parts: list[RenderableType] = [safe.text(title(view), "bold")]
    for g in view.groups:
        parts.append(safe.text(f"{g.hardware}: each entry against the median of its {len(g.nodes)} nodes", "cyan"))
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        for i, name in enumerate(header(g)):
            t.add_column(safe.text(name), overflow="fold", justify="left" if i == 0 else "right")
        for row, r in zip(rows(g), g.rows):
            t.add_row(*(safe.text(x, "yellow" if i > 1 and r.cells[i - 2].straggler else "") for i, x in enumerate(row)))
        parts.append(t)
    for line in lines(view):
        parts.append(safe.text(line, "yellow" if "straggler on" in line else ""))
    return Stack(*parts)


def _md(text: object) -> str:
    return safe.visible(text).replace("|", "\\|").replace("\n", " ")


def markdown(view: FleetView) -> str:
    out = [f"### tpulab {_md(title(view))}", ""]
    for g in view.groups:
        out += [f"**{_md(g.hardware)}**", "", "| " + " | ".join(_md(h) for h in header(g)) + " |",
                "|" + "---|" * len(header(g))]
        out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows(g)]
        out.append("")
    out += [x for line in lines(view) for x in (_md(line), "")]
    return "\n".join(out)


def body(view: FleetView) -> str:
    parts = [html.lines([title(view)])]
    for g in view.groups:
        parts.append(html.table(rows(g), header(g), f"{g.hardware}: each entry against the median of its nodes"))
    stragglers = [line for line in lines(view) if "straggler on" in line]
    return "".join(parts) + html.lines(stragglers, "warn") + html.lines([x for x in lines(view) if x not in stragglers])


def page(view: FleetView) -> str:
    return html.page(f"tpulab fleet {view.fleet.short_id}", [body(view)])


def listing(fleets: list[Fleet]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("fleet", "created", "cluster", "suite", "status", "cards"):
        t.add_column(name, overflow="fold")
    for f in fleets:
        t.add_row(*(safe.text(x) for x in (f.short_id, f.created_at[:16], f.cluster,
                                           f"v{f.suite.version}" + (" quick" if f.suite.quick else ""), f.status,
                                           f"{sum(n.card is not None for n in f.nodes)}/{len(f.nodes)}")))
    return t
