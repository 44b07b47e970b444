"""Results as HTML: a run, a sweep, a comparison, the runtime, a listing; charts as inline SVG.

The notebook's representations, its live cell and `tpulab results report` all come from here,
and their tables read the same rows as the terminal's (console.py, sweep.py). Nothing here refers to anything
by URL: a page written by `page()` opens without a network. Matplotlib is imported only to draw,
through its object API (never pyplot), so the notebook's own plotting state is left alone.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any, Sequence

from tpulab.base.figures import is_number
from tpulab.base import fmt, safe
from tpulab.base.charts import STEP_TIME, THROUGHPUT, ChartContext, Point
from tpulab.base.events import OTHER_OPS
from tpulab.base.version import __version__
from tpulab.engine.runindex import RunRow
from tpulab.engine.sweep import kept_points
from tpulab.views import listing
from tpulab.views import profile as profile_view
from tpulab.views.console import comparison_columns, runtime_rows, summary_rows, summary_title
from tpulab.views.sweep import (
    FIGURES,
    axis_text,
    chart_series,
    chart_title,
    figures,
    findings_lines,
    kept_findings,
    marks,
    marks_legend,
    point_count,
    ranked,
    rate_prefix,
    value_text,
    x_values,
)
from tpulab.workloads import registry
from tpulab.workloads.notebook_fit import NOTEBOOK_FIT

if TYPE_CHECKING:
    from tpulab.base.events import Profile, RunRecord, SweepRecord
    from tpulab.engine.doctor import Verdict
    from tpulab.engine.store import Comparison
    from tpulab.machine.detect import RuntimeReport

CSS = """
.tpulab { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px; color: #222; }
.tpulab table { border-collapse: collapse; margin: 4px 0 8px 0; }
.tpulab caption { text-align: left; font-weight: 600; padding: 2px 0 4px 0; }
.tpulab th, .tpulab td { border-bottom: 1px solid #ddd; padding: 2px 10px 2px 2px; text-align: left;
  vertical-align: top; }
.tpulab th { font-weight: 600; }
.tpulab td.num { font-variant-numeric: tabular-nums; }
.tpulab tr.best td { font-weight: 600; }
.tpulab .warn { color: #a15c00; }
.tpulab .error { color: #b00020; }
.tpulab .note { color: #555; }
.tpulab .charts svg { max-width: 100%; height: auto; }
"""
STYLE_CLASS = {"yellow": "warn", "bold red": "error", "red": "error", "green": "", "cyan": "note"}
COLORS = ("#1f6fb2", "#d9730d", "#2e9e44", "#b83280", "#6b4fbb", "#8a8a8a")
NO_MATPLOTLIB = "charts unavailable: matplotlib is not installed (pip install 'tpulab[notebook]')"


# --- pieces --------------------------------------------------------------------------------------
def block(*parts: str) -> str:
    """Parts in one styled container (the style travels with each output: a notebook keeps no head)."""
    return f'<div class="tpulab"><style>{CSS}</style>{"".join(parts)}</div>'


def table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None, caption: str = "",
          classes: Sequence[str] | None = None, row_header: bool = False) -> str:
    """A table of text cells (made safe here: `safe.html`); `classes`: one CSS class per row, `row_header`: first
    cell is a th."""
    out = ["<table>"]
    if caption:
        out.append(f"<caption>{safe.html(caption)}</caption>")
    if header:
        out.append("<thead><tr>" + "".join(f"<th>{safe.html(h)}</th>" for h in header) + "</tr></thead>")
    out.append("<tbody>")
    for i, row in enumerate(rows):
        cls = classes[i] if classes else ""
        cells = [f"<th>{safe.html(c)}</th>" if row_header and j == 0 else f"<td>{safe.html(c)}</td>"
                 for j, c in enumerate(row)]
        out.append(f'<tr class="{cls}">' if cls else "<tr>")
        out.append("".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def lines(texts: Sequence[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return "".join(f"<div{attr}>{safe.html(t)}</div>" for t in texts)


def plain(markup: str) -> str:
    """Rich markup as plain text."""
    from rich.text import Text

    return Text.from_markup(markup).plain


# --- charts --------------------------------------------------------------------------------------
def chart_text(text: object) -> str:
    """Text for a chart's label: visible, and a '$' a dollar sign (matplotlib reads $...$ as maths, and fails on
    a bad formula)."""
    return safe.visible(text).replace("$", r"\$")


def svg(fig: Any) -> str:
    """A matplotlib Figure as an inline <svg> element: no XML prolog, no doctype URL, no metadata."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None, "Format": None,
                                                                  "Type": None})
    text = buf.getvalue()
    return re.sub(r"<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


def figure(n: int, width: float = 4.2, height: float = 2.5) -> tuple[Any, list[Any]]:
    """`n` charts, two to a row, so each keeps a readable size in a cell."""
    from matplotlib.figure import Figure

    cols, rows = min(n, 2), -(-n // 2)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.remove()
    axes = axes[:n]
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, list(axes)


def drawn(draw: Any, *args: Any) -> str:
    """A chart's SVG, or a line that says why there is none."""
    try:
        import matplotlib
    except ImportError:
        return f'<div class="note">{NO_MATPLOTLIB}</div>'
    with matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "tpulab"}):
        out = draw(*args)
    return f'<div class="charts">{out}</div>' if out else ""


def run_series(record: RunRecord) -> dict[str, tuple[list[float], list[float], str]]:
    """The run's charts as (x, y, label): what its workload declares (`tpulab.base.charts`), drawn from the
    kept steps as the lab draws them live; each point a measured step."""
    w = registry().get(record.workload) or NOTEBOOK_FIT
    s = record.summary
    ctx = ChartContext(w, s.flops_per_step, s.peak_flops)
    steps = [step for step in record.steps if not step.warmup]
    per_epoch = len(steps) // len(record.epochs) if record.epochs else 0
    out: dict[str, tuple[list[float], list[float], str]] = {}
    for chart in w.charts or (STEP_TIME, THROUGHPUT):
        points: list[Point] = [pt for step in steps for pt in chart.points(step, ctx)]
        for i, epoch in enumerate(record.epochs):
            ctx.last_step = steps[min(len(steps), (i + 1) * per_epoch) - 1].step if steps else 0
            points += chart.points(epoch, ctx)
        names = list(dict.fromkeys(name for name, _, _ in points))
        for name in names:
            xs = [float(x) for n, x, _ in points if n == name]
            ys = [float(y) for n, _, y in points if n == name]
            out[f"{chart.title}: {name}"] = (xs, ys, chart.title if len(names) == 1 else name)
    return {k: v for k, v in out.items() if v[0]}


def run_chart(record: RunRecord) -> str:
    from matplotlib.ticker import MaxNLocator

    series = run_series(record)
    if not series:
        return ""
    fig, axes = figure(len(series))
    for ax, (_, (xs, ys, label)) in zip(axes, series.items()):
        ax.plot(xs, ys, color=COLORS[0], marker="o" if len(xs) < 30 else None, markersize=3, linewidth=1.2)
        ax.set_title(chart_text(label))
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
    return svg(fig)


def sweep_chart(points: list[Any], axes_names: list[str], found: Any) -> str:
    series = chart_series(points, axes_names, by=found.by)
    if not series:
        return ""
    fig, (ax,) = figure(1, 6.0, 3.2)
    for i, (name, pts) in enumerate(series.items()):
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=COLORS[i % len(COLORS)],
                label=chart_text(name) if len(series) > 1 else None)
    best = found.best
    if best is not None and best.rate(found.by):
        [(x, y)] = next(iter(chart_series([best], axes_names, x_values(points, axes_names[0]), found.by).values()))
        ax.plot([x], [y], marker="*", markersize=14, color="#b00020", linestyle="none", label="best")
    values = x_values(points, axes_names[0])
    if values and all(is_number(v) for v in values) and min(values) > 0 and max(values) / min(values) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks([float(v) if is_number(v) else float(i) for i, v in enumerate(values)],
                  [chart_text(value_text(v)) for v in values])
    ax.set_title(chart_text(chart_title(axes_names, found.by)))
    ax.set_xlabel(chart_text(axis_text(axes_names[0])))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return svg(fig)


def comparison_chart(cmp: Comparison) -> str:
    values = [(chart_text(f"{r.short_id} {r.device_label(short=True)}"), x)
              for r, x in zip(cmp.records, cmp.speedups) if x]
    if not values:
        return ""
    fig, (ax,) = figure(1, 6.0, 0.5 + 0.4 * len(values))
    ax.barh([name for name, _ in values][::-1], [x for _, x in values][::-1], color=COLORS[0])
    ax.axvline(1.0, color="#888", linewidth=0.8)
    ax.set_xlim(0, max(x for _, x in values) * 1.15)
    for i, (_, x) in enumerate(values[::-1]):
        ax.annotate(f"{x:.2f}x", (x, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_title(f"speedup against {cmp.records[0].short_id} (by {cmp.by})")
    return svg(fig)


# --- whole results -------------------------------------------------------------------------------
def run_body(record: RunRecord, chart: bool = True) -> str:
    rows = summary_rows(record)
    classes = [STYLE_CLASS.get(style or "", "") for _, _, style in rows]
    params = "parameters: " + ", ".join(f"{k}={v}" for k, v in record.params.items())
    profile = record.summary.profile
    return (table([(n, v) for n, v, _ in rows], caption=summary_title(record), classes=classes, row_header=True)
            + lines([params], "note") + (ops_body(profile) if profile else "")
            + (drawn(run_chart, record) if chart else ""))


def moves_body(a: RunRecord, b: RunRecord) -> str:
    """Where the time moved from A's ops to B's, as the terminal's `tpulab results compare A B --profile`."""
    moves = profile_view.op_moves(profile_view.profile_of(a), profile_view.profile_of(b))
    header = profile_view.moves_header(a, b)
    return table([profile_view.move_cells(m) for m in moves], profile_view.MOVE_COLUMNS, header[0]) + lines(header[1:], "note")


def ops_body(profile: Profile) -> str:
    """The op table, as the terminal's (`tpulab results show ID --profile`): its ops, then the time no op explains,
    and what it rests on."""
    unexplained = profile_view.unattributed_cells(profile)
    rows = [*profile_view.table_cells(profile), *([unexplained] if unexplained else [])]
    marks = ["note" if o.name == OTHER_OPS else "" for o in profile.ops] + ["note"] * bool(unexplained)
    return (table(rows, profile_view.op_columns(profile), "where a step's time went: its ops", marks)
            + lines(profile_view.notes(profile), "note"))


def run_html(record: RunRecord) -> str:
    return block(run_body(record))


def sweep_body(sweep: SweepRecord, runs: dict[str, RunRecord]) -> str:
    points = kept_points(sweep, runs)
    axes = list(sweep.axes)
    found = kept_findings(sweep, points)
    title = (f"sweep {sweep.short_id} of {sweep.workload}: {sweep.status}, {point_count(points)}, "
             f"{sweep.steps} steps each, sorted by {found.by}")
    order = ranked(points, found.by)
    prefix = rate_prefix(points)
    rows = [(marks(p, found), *(value_text(p.values[n]) for n in axes), *figures(p, prefix).values()) for p in order]
    header = ["", *(n.replace("_", " ") for n in axes), *FIGURES]
    out = table(rows, header, title, ["best" if p is found.best else "" for p in order])
    out += lines([marks_legend(found)], "note")
    out += lines(findings_lines(found, axes))
    if sweep.stopped:
        out += lines([f"stopped early: {sweep.stopped}"], "warn")
    if axes and found.best is not None:
        out += drawn(sweep_chart, points, axes, found)
    return out


def sweep_html(sweep: SweepRecord, runs: dict[str, RunRecord]) -> str:
    return block(sweep_body(sweep, runs))


def comparison_body(cmp: Comparison) -> str:
    cols = comparison_columns(cmp)
    rows = [[cells[i] for _, cells in cols] for i in range(len(cmp.records))]
    return (table(rows, [name for name, _ in cols], cmp.header)
            + lines([f"warning: {w}" for w in cmp.warnings], "warn") + drawn(comparison_chart, cmp))


def comparison_html(cmp: Comparison) -> str:
    return block(comparison_body(cmp))


def runtime_html(report: RuntimeReport, verdicts: list[Verdict]) -> str:
    return block(table([(plain(n), plain(v)) for n, v in runtime_rows(report, verdicts)], caption="tpulab runtime",
                       row_header=True))


def list_html(records: list[RunRecord], caption: str) -> str:
    if not records:
        return block(lines([caption + ": no runs"], "note"))
    return block(table([listing.list_row(RunRow.of(r)) for r in records], fmt.LIST_COLUMNS, caption))


def page(title: str, bodies: list[str]) -> str:
    """A whole HTML document, self-contained: its style inline, its charts inline SVG."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{safe.html(title)}</title><style>{CSS}</style></head>"
            f'<body class="tpulab"><h1>{safe.html(title)}</h1>{"<hr>".join(bodies)}'
            f'<p class="note">written by tpulab {safe.html(__version__)}</p></body></html>\n')
