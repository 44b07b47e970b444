"""A sweep for people: its live lines, its table sorted by throughput, its findings and its chart.

Shared by `tpulab sweep`, `tpulab results sweep` and the lab, so a sweep reads the same everywhere.
"""

from __future__ import annotations

import itertools
import textwrap
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from tpulab.base import fmt, safe
from tpulab.base.charts import ticks
from tpulab.base.capacity import FAILED, UNMEASURED, Found, Judged, Verdict
from tpulab.base.ceilings import CEILING_LOW
from tpulab.base.events import RunRecord, SweepRecord
from tpulab.base.noise import LEVEL, MIN_SAMPLES, NOISE, Change
from tpulab.base.figures import Figure, is_number
from tpulab.engine.sweep import (
    Findings,
    Grid,
    Point,
    baseline_of,
    findings,
    kept_points,
    series_key,
    unlike_article,
)
from tpulab.views import plot
from tpulab.views.console import telemetry_columns
from tpulab.workloads import registry
from tpulab.workloads.base import BATCH_SIZE

FIGURES = ("median", "throughput", "GFLOP/s", "peak", "ceiling", "flags")
WIDTHS = {"median": 8, "throughput": 16, "GFLOP/s": 7, "peak": 6, "ceiling": 7}


def value_text(value: Any) -> str:
    """A swept value as every view shows it (visible text: a kept sweep may be anyone's file)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else safe.visible(value)


def axis_text(name: str) -> str:
    """A swept parameter's name as a column or a label shows it."""
    return safe.visible(name.replace("_", " "))


def telemetry_table(points: list[Point], axes: list[str], found: Findings) -> Table | None:
    """The points' telemetry in a second table (the first has no room left at 80 columns); None without any."""
    order = ranked(points, found.by)
    last = [p.records[-1] if p.records else None for p in order]
    have = [(p, r) for p, r in zip(order, last) if r is not None]
    cols = telemetry_columns([r for _, r in have], leave=("CPU run", "others"))  # a disturbed point is flagged
    if not cols:
        return None
    t = Table(title="telemetry (steady state means; peak memory: the device's, else the worker's)",
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for name in axes:
        t.add_column(safe.text(axis_text(name)), no_wrap=True)
    for name, _ in cols:
        t.add_column(name, no_wrap=True)
    for i, (p, _) in enumerate(have):
        t.add_row(*(safe.text(value_text(p.values[n])) for n in axes), *(cells[i] for _, cells in cols),
                  style="bold" if p is found.best else None)
    return t


def rate_prefix(points: list[Point]) -> fmt.Prefix:
    """The throughput's one prefix in a table of these points: from the largest, not per cell."""
    return fmt.prefix_of(v for p in points for v in (p.throughput, *(p.throughput_range or ())))


def figures(p: Point, prefix: fmt.Prefix | None = None, interval: bool = True) -> dict[str, str]:
    """A point's figures as visible text: the throughput with its interval ('±2%', over the repeats where there are
    several; not with `interval` False, where there is no room), or its range over repeats where the steps give no
    interval; in a table, the throughput takes the table's `prefix` (see rate_prefix)."""
    spread, plus_minus = p.throughput_range, fmt.plus_minus(p.step_stats)
    rate = fmt.rate(p.throughput, "ex/s", prefix)
    if p.throughput and plus_minus:
        rate += f" {plus_minus}" if interval else ""
    elif spread and len(p.finished) > 1:  # the interval, where there is one, holds the spread between repeats
        rate += f" ({fmt.rate(spread[0], '', prefix)}-{fmt.rate(spread[1], '', prefix)})"
    flags = safe.visible(flags_text(p))
    return {"median": fmt.seconds(p.step_seconds), "throughput": rate,
            "GFLOP/s": f"{p.gflops:.1f}" if p.gflops else "-", "peak": fmt.percent(p.peak_fraction),
            "ceiling": "measured low" if CEILING_LOW in p.flags else fmt.percent(p.ceiling_fraction), "flags": flags}


def with_interval(figure: str, p: Point) -> str:
    """'674 ex/s ±1.2%': a point's rate and its 95% interval, as wide as its median step's (the rate is the work
    over that step); the figure alone where there are too few steps for one."""
    return f"{figure} {fmt.plus_minus(p.step_stats)}".strip() if figure != "-" else figure


def flags_text(p: Point) -> str:
    """A point's flags, or why it has no figures, whole: ', ' between flags, so a narrow column wraps between
    them, never inside one, and a reason is never cut (a point not run yet is 'pending', with no reason)."""
    if p.status == "finished":
        return ", ".join(p.flags)
    return f"{p.status}: {p.error}" if p.error else p.status


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def point_count(points: list[Point]) -> str:
    """'4 points + the article's configuration': the one count of a sweep's points, in every front end."""
    extra = sum(p.article for p in points)
    return plural(len(points) - extra, "point") + (" + the article's configuration" if extra else "")


def article_note(grid: Grid) -> str | None:
    """Why a sweep has no article's point, when the article ran this workload: the knobs it holds otherwise."""
    unlike = unlike_article(grid)
    if not grid.axes or not unlike:
        return None
    held = ", ".join(f"{axis_text(n)} {value_text(ours)} (the article's {value_text(theirs)})"
                     for n, (ours, theirs) in unlike.items())
    return f"no article's point: this sweep holds {held}"


MARKS = (("*", "best"), ("~", "not detectably slower than the best"), ("A", "the article's configuration"),
         ("K", "the knee (the smallest batch not detectably slower than the best)"))


def marks_legend(found: Findings) -> str:
    """The marks of a sweep's table in a line ('* best, K the knee ...'): those this sweep has."""
    has = {"*": found.best, "~": found.near or None, "A": found.article, "K": found.knee}
    return ", ".join(f"{mark} {what}" for mark, what in MARKS if has[mark] is not None)


def label(p: Point, axes: list[str]) -> str:
    return ", ".join(f"{safe.visible(name)} {value_text(p.values[name])}" for name in axes) + (
        " (article)" if p.article else "")


# --- streaming, a line per finished point --------------------------------------------------------
def axis_widths(axes: dict[str, list[Any]]) -> dict[str, int]:
    """Each swept parameter's column: as wide as its name or its longest value, whichever is wider."""
    return {name: max(len(safe.visible(name)), *(len(value_text(v)) for v in values)) for name, values in axes.items()}


def live_header(axes: dict[str, list[Any]]) -> str:
    cells = [f"{safe.visible(name):<{w}}" for name, w in axis_widths(axes).items()] + [f"{f:<{WIDTHS.get(f, 0)}}" for f in FIGURES]
    return " ".join(cells).rstrip()


def live_line(p: Point, axes: dict[str, list[Any]], width: int | None = None) -> str:
    """A finished point's line under `live_header`; at a `width`, what passes it wraps between words under the
    flags' column (never a flag alone at the start of a line)."""
    f = figures(p)
    if p.latency:  # a curve's point: its rate in its own unit, its workload's fractions (MBU) in the flags' column
        unit = safe.visible(p.finished[0].summary.throughput_unit).replace("tokens", "tok").replace("examples", "ex")
        f = {**f, "throughput": with_interval(fmt.rate(p.throughput, unit), p),
             "flags": ", ".join(f"{safe.visible(d.label)} {d.show(p.figure(d.name))}" for d in compared(p)
                                if d.unit == "%")}
    cells = [f"{value_text(p.values[name]):<{w}}" for name, w in axis_widths(axes).items()]
    cells += [f"{f[name]:<{WIDTHS.get(name, 0)}}" for name in FIGURES]
    line = " ".join(cells).rstrip() + (" (article)" if p.article else "")
    if width is None or len(line) <= width:
        return line
    longest = max(len(word) for word in line.split())  # the indent leaves room for it: no flag is broken
    indent = max(0, min(len(" ".join(cells[:-1])) + 1, width - longest))
    return textwrap.fill(line, width, subsequent_indent=" " * indent, break_long_words=False, break_on_hyphens=False)


def impossible_lines(impossible: list[tuple[dict[str, Any], str]]) -> list[str]:
    """Combinations that cannot run, one line per reason, naming the values they have in common."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for values, why in impossible:
        by_reason.setdefault(why, []).append(values)
    lines = []
    for why, combos in by_reason.items():
        common = {k: v for k, v in combos[0].items() if all(c.get(k) == v for c in combos)}
        what = ", ".join(f"{safe.visible(k)} {value_text(v)}" for k, v in common.items()) or "some combinations"
        lines.append(f"cannot run {what} ({len(combos)} combination(s)): {why}")
    return lines


# --- the table and the findings -------------------------------------------------------------------
def marks(p: Point, found: Findings) -> str:
    near = p if any(q is p for q in found.near) else None
    return "".join(m for m, q in (("*", found.best), ("~", near), ("A", found.article), ("K", found.knee)) if q is p)


def ranked(points: list[Point], by: str) -> list[Point]:
    return sorted(points, key=lambda p: -(p.rate(by) or -1))


class Fitted:
    """A table of points drawn with each rate's interval ('±2%') where the width allows it, else without: the
    interval gives way before any figure is cut. `build(interval)` gives the table and the least width it needs."""

    def __init__(self, build: Callable[[bool], tuple[Table, int]]) -> None:
        (self.wide, self.least), (self.narrow, _) = build(True), build(False)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.wide if self.least <= options.max_width else self.narrow


def least_width(header: list[str], rows: list[list[str]], pad: int) -> int:
    """The narrowest a light table of these cells is drawn in without cutting one: each column as wide as its widest
    cell, the flags as their longest word (they wrap between flags); `pad` spaces right of each column but the last,
    one between columns and one at each edge."""
    widths = [max(len(w) for cell in col for w in cell.split()) if col[0] == "flags" else max(map(len, col))
              for col in zip(header, *rows)]
    return sum(widths) + (pad + 1) * (len(widths) - 1) + 2


def sweep_table(points: list[Point], axes: list[str], found: Findings, title: str) -> Fitted:
    """Every point, fastest first; * marks the best, ~ the points not detectably slower, A the article's
    configuration, K the knee; a capacity's points by load instead (`capacity_table`)."""
    if found.capacity:
        return Fitted(lambda interval: capacity_table(found, axes, title))
    if found.latency:
        return Fitted(lambda interval: curve_table(points, axes, found, title, interval))
    return Fitted(lambda interval: _sweep_table(points, axes, found, title, interval))


def _sweep_table(points: list[Point], axes: list[str], found: Findings, title: str, interval: bool
                 ) -> tuple[Table, int]:
    prefix = rate_prefix(points)
    own = compared(next((p for p in points if p.finished), points[0])) if points else []
    names = [*FIGURES[:-1], *(f.label for f in own), FIGURES[-1]]  # the workload's own figures before the flags
    rows = [(marks(p, found), *(value_text(p.values[n]) for n in axes), *own_figures(figures(p, prefix, interval), p, own))
            for p in ranked(points, found.by)]
    # a column no point has a figure in is left out: its room goes to the flags, which wrap between flags
    shown = [f for i, f in enumerate(names) if any(r[1 + len(axes) + i] not in ("", "-") for r in rows)]
    # Light rules, one space between columns: four swept parameters and the figures fit 80 columns.
    t = Table(title=safe.markup(title), caption=marks_legend(found) or None, box=box.SIMPLE_HEAD, pad_edge=False,
              padding=0)
    t.add_column("", min_width=1, no_wrap=True)
    for name in axes:
        t.add_column(safe.text(axis_text(name)), no_wrap=True)
    for f in shown:
        t.add_column(safe.text(f), no_wrap=f != "flags", overflow="fold")  # a plugin's figure's label: text
    table = [list(row[:1 + len(axes)]) + [row[1 + len(axes) + names.index(f)] for f in shown] for row in rows]
    for p, cells in zip(ranked(points, found.by), table):
        t.add_row(*map(safe.text, cells), style="bold" if p is found.best else None)
    return t, least_width(["", *map(axis_text, axes), *shown], table, 0)


def own_figures(shown: dict[str, str], p: Point, own: list[Figure]) -> list[str]:
    """A point's cells: the sweep's figures, then its workload's own compared ones (`Figure.compare`), then its
    flags."""
    cells = list(shown.values())
    return [*cells[:-1], *(f.show(p.figure(f.name)) for f in own), cells[-1]]


def findings_lines(found: Findings, axes: list[str]) -> list[str]:
    """What the sweep found, as lines of plain text."""
    if found.best is None:
        return ["no point finished: nothing to compare"]
    if found.capacity:
        return capacity_lines(found)
    if found.latency:
        return curve_lines(found, axes)
    by = found.by
    best = found.best
    lines = [f"ranked by {by}" + (" (the work per example differs between points)" if by == "GFLOP/s" else ""),
             f"best: {label(best, axes)}: {with_interval(_rate(best, by), best)}"
             + (f", {fmt.percent(best.peak_fraction)} of peak" if best.peak_fraction else "")
             + (f", {fmt.percent(best.ceiling_fraction)} of the measured ceiling" if best.ceiling_fraction else "")
             + near_words(found, axes)]
    lines += untold_lines(found)
    if found.over_article is not None and found.article is not None and found.article is not best:
        lines.append(f"best against the article's configuration ({label(found.article, axes)}: "
                     f"{_rate(found.article, by)}): {speedup_words(found.article_change, found.over_article)}")
    if found.over_slowest is not None and found.slowest is not None and found.slowest is not best:
        lines.append(f"best against the slowest point ({label(found.slowest, axes)}): "
                     f"{speedup_words(found.slowest_change, found.over_slowest)}")
    lines += knee_lines(found, "throughput")
    lines += [f"scaling: {n} processes give {ratio:.2f}x the throughput of the fewest (ideal {ideal:g}x"
              + (": they share one machine's devices)" if ideal == 1 else ")") for n, ratio, ideal in found.scaling]
    return lines


def near_words(found: Findings, axes: list[str]) -> str:
    """'; not detectably slower: batch_size 64 (0.98x [0.95x, 1.02x]), ... (within the noise threshold ±10%)': the
    points a sweep names with its best, never ranked below it by noise ('' for a sweep of one point)."""
    if found.near:
        named = ", ".join(f"{label(p, axes)} ({c.cell() if (c := found.change(p)) else '-'})" for p in found.near)
        return f"; not detectably slower: {named} (within the noise threshold ±{NOISE:.0%})"
    if found.changes and not found.untold:
        return f"; every other point is detectably slower (noise threshold ±{NOISE:.0%})"
    return ""


def untold_lines(found: Findings) -> list[str]:
    """What the steps cannot tell: the points too few steps leave unjudged against the best."""
    n = len(found.untold)
    if not n:
        return []
    return [f"too few steps to tell whether {plural(n, 'other point')} {'is' if n == 1 else 'are'} slower than the "
            f"best: an interval needs {MIN_SAMPLES} timed steps a point"]


def speedup_words(c: Change | None, ratio: float) -> str:
    """'1.97x [1.90x, 2.05x] faster (noise threshold ±10%; ...)': a speedup with its interval and verdict where the
    steps gave one; else the ratio of the rates and why it has no verdict."""
    if c is None or c.low is None:
        return f"{ratio:.2f}x" + (f" (no verdict: {c.why})" if c is not None and c.why else "")
    return c.words()


def knee_lines(found: Findings, what: str, at: str = "") -> list[str]:
    """Where batch size stops paying (`what`: the rate's name; `at`: what it costs, on a curve): the
    smallest batch not detectably slower than the best, with its verdict."""
    knee, best = found.knee, found.best
    if knee is None or best is None:
        return []
    if knee is best:
        return [f"knee: batch {knee.values[BATCH_SIZE]}{at}, the best itself: no smaller batch is within the noise "
                f"threshold ±{NOISE:.0%} of it"]
    c = found.change(knee)
    if c is not None and c.low is not None:
        return [f"knee: batch {knee.values[BATCH_SIZE]}{at}, the smallest not detectably slower than the best "
                f"{what}: {c.words()}"]
    ratio = (knee.rate(found.by) or 0) / (best.rate(found.by) or 1)
    return [f"knee: batch {knee.values[BATCH_SIZE]}{at} is within the noise threshold ±{NOISE:.0%} of the best "
            f"{what}: {speedup_words(c, ratio)}"]


def _rate(p: Point, by: str) -> str:
    return fmt.rate(p.gflops * 1e9, "FLOP/s") if by == "GFLOP/s" and p.gflops else fmt.rate(p.throughput, "examples/s")


def x_values(points: list[Point], name: str) -> list[Any]:
    """The first swept parameter's values in order: numbers by size, words as given."""
    seen = list(dict.fromkeys(p.values[name] for p in points))
    return sorted(seen) if all(is_number(v) for v in seen) else seen


def chart_series(points: list[Point], axes: list[str], xs: list[Any] | None = None, by: str = "examples/s"
                 ) -> dict[str, list[tuple[float, float]]]:
    """The ranking rate against the first swept parameter, one series per combination of the others.

    Numbers are placed at their value; words (a precision, a backend) at their rank in `xs`.
    """
    if not axes:
        return {}
    x_name, others = axes[0], axes[1:]
    xs = xs if xs is not None else x_values(points, x_name)
    series: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        if p.rate(by) is None:
            continue
        name = ", ".join(value_text(p.values[n]) for n in others) or "throughput"
        v = p.values[x_name]
        x = float(v) if is_number(v) else float(xs.index(v))
        series.setdefault(name, []).append((x, p.rate(by) or 0.0))
    return {k: sorted(v) for k, v in series.items()}


def chart_title(axes: list[str], by: str) -> str:
    return f"{by} against {axis_text(axes[0])}" if axes else by


def text_chart(points: list[Point], axes: list[str], found: Findings, width: int, height: int = 14) -> Text:
    """The chart as text (plotext), for the terminal."""
    if found.capacity:
        return capacity_chart(points, found, width)
    if found.latency:
        return curve_chart(points, axes, found, width, height)
    series = chart_series(points, axes, by=found.by)
    colors = dict(zip(series, itertools.cycle(CURVE_COLORS)))
    best = found.best
    at, log = x_axis(points, axes[0]) if axes else ([], False)
    with plot.chart(max(40, min(width, 100)), height, xlog=log) as drawing:
        drawing.fig.title(chart_title(axes, found.by))
        for name, pts in series.items():
            drawing.series([x for x, _ in pts], [y for _, y in pts], colors[name])
        if best is not None and best.rate(found.by) and axes:
            [(x, y)] = next(iter(chart_series([best], axes, x_values(points, axes[0]), found.by).values()))
            drawing.series([x], [y], "red", marker="*", joined=False)
        if at:  # the swept values
            drawing.lim("x", at[0][0], at[-1][0])
            drawing.ticks("x", at)
        ys = [y for pts in series.values() for _, y in pts]
        if ys:
            drawing.lim("y", min(ys), max(ys))
            drawing.ticks("y", ticks(min(ys), max(ys), max(2, (height - 4) // 2)))
        chart = Text.from_ansi(drawing.text())
    # the key below the chart, never over its data
    for name, color in colors.items() if len(series) > 1 else ():
        chart.append(f"\n  -- {name}", style=color)
    if best is not None and best.rate(found.by) and axes:
        chart.append("\n  * best", style="red")
    return chart


def x_axis(points: list[Point], name: str) -> tuple[list[tuple[float, str]], bool]:
    """A swept parameter's ticks: at the swept values themselves (words at their rank), on a log scale when the
    values are numbers that span 8x or more (a batch swept in powers of two); the lab's chart and the CLI's agree."""
    values = x_values(points, name)
    if values and not is_number(values[0]):
        return [(float(i), value_text(v)) for i, v in enumerate(values)], False
    return [(float(v), value_text(v)) for v in values], bool(values) and min(values) > 0 and max(values) / min(values) >= 8


def sweep_report(sweep: SweepRecord, runs: dict[str, RunRecord], width: int) -> Group:
    points = kept_points(sweep, runs)
    axes = list(sweep.axes)
    found = kept_findings(sweep, points)
    title = (f"sweep {sweep.short_id} of {sweep.workload}: {sweep.status}, {point_count(points)}, "
             f"{sweep.steps} steps each" + (f", {sweep.repeat} repeats" if sweep.repeat > 1 else ""))
    parts: list[Any] = [sweep_table(points, axes, found, title)]
    if (tele := telemetry_table(points, axes, found)) is not None:
        parts.append(tele)
    parts += map(safe.text, findings_lines(found, axes))
    if sweep.stopped:
        parts.append(safe.text(f"stopped early: {sweep.stopped}", "yellow"))
    if axes and found.best is not None:
        parts.append(text_chart(points, axes, found, width))
    return Group(*parts)


def point_json(p: Point) -> dict[str, Any]:
    stats = p.step_stats
    return {"values": p.values, "article": p.article, "status": p.status, "runs": [r.id for r in p.records],
            "median_s": p.step_seconds,
            "median_s_interval": [stats.low, stats.high] if stats and stats.low is not None else None,
            "examples_per_s": p.throughput, "examples_per_s_range": p.throughput_range,
            "gflops_per_s": p.gflops, "peak_fraction": p.peak_fraction,
            "ceiling_fraction": p.ceiling_fraction, "flags": p.flags, "error": p.error,
            "telemetry": asdict(p.records[-1].summary.telemetry) if p.records and p.records[-1].summary.telemetry else None,
            "figures": p.finished[-1].summary.figures if p.finished else None,
            "loss": next((r.summary.final_metrics or {}).get("loss") for r in p.finished) if p.finished else None}


def summary_json(points: list[Point], found: Findings, sweep_id: str, status: str) -> dict[str, Any]:
    def where(p: Point | None) -> dict[str, Any] | None:
        return p.values if p is not None else None

    def verdict(c: Change | None) -> dict[str, Any] | None:
        return asdict(c) if c is not None else None

    return {"event": "sweep", "id": sweep_id, "status": status, "ranked_by": found.by,
            "points": [point_json(p) for p in ranked(points, found.by)],
            "best": where(found.best), "not_detectably_slower": [p.values for p in found.near],
            "untold": [p.values for p in found.untold], "article": where(found.article), "knee": where(found.knee),
            "knee_against_best": verdict(found.change(found.knee) if found.knee else None),
            "speedup_over_article": found.over_article, "over_article": verdict(found.article_change),
            "speedup_over_slowest": found.over_slowest, "over_slowest": verdict(found.slowest_change),
            "baseline": where(found.baseline), "speedup_over_baseline": found.over_baseline,
            "over_baseline": verdict(found.baseline_change),
            "within_max_itl": [p.values for p in found.within],
            "scaling": [{"processes": n, "ratio": r, "ideal": i} for n, r, i in found.scaling],
            "capacity": capacity_json(found)}


def kept_findings(sweep: SweepRecord, points: list[Point]) -> Findings:
    """A kept sweep's findings again, its speedups against its workload's baseline (where it is installed)."""
    w = registry().get(sweep.workload)
    return findings(points, sweep.article_values, baseline_of(w, sweep.axes) if w else None)


def sweep_summary_json(sweep: SweepRecord, runs: dict[str, RunRecord]) -> dict[str, Any]:
    points = kept_points(sweep, runs)
    return {**summary_json(points, kept_findings(sweep, points), sweep.id, sweep.status),
            "workload": sweep.workload, "axes": sweep.axes, "steps": sweep.steps}


# --- a curve: throughput against latency (a workload that declares one: a token's) -----------------------------
CURVE_COLORS = ("blue", "magenta", "cyan", "yellow")  # one per series (red and green mark K and W)


def compared(p: Point) -> list[Figure]:
    """Its workload's figures that comparisons show, its latency first (none where the workload is not here)."""
    w = p.workload
    shown = [f for f in (w.figures if w else ()) if f.compare]
    return sorted(shown, key=lambda f: f.name != p.latency)


def latency_figure(found: Findings) -> Figure:
    """The curve's latency figure as its workload declares it ('ITL p50', seconds)."""
    best = found.best
    assert best is not None and found.latency is not None
    return next((f for f in compared(best) if f.name == found.latency), Figure(name=found.latency, label=found.latency,
                                                                            unit="s"))


def curve_title(found: Findings, axes: list[str]) -> str:
    """'tokens/s against ITL p50 (ms), one line per prompt len' (per values of the axes but the batch)."""
    others = " and ".join(axis_text(a) for a in axes if a != BATCH_SIZE)
    said = f"{found.by} against {latency_figure(found).label} (ms)"  # a kept record's unit, a plugin's label
    return safe.visible(said) + (f", one line per {others}" if others else "")


def curve_figures(p: Point, speedup: float | None, interval: bool = True) -> dict[str, str]:
    """A point's figures on a curve: its rate (with its interval, but where there is no room), its workload's
    compared figures (ITL p50, TTFT, MBU...), and the speedup over its baseline (batch 1 at the same values)."""
    unit = p.finished[0].summary.throughput_unit if p.finished else ""
    rate = fmt.rate(p.throughput)
    return {unit: with_interval(rate, p) if interval else rate,
            **{f.label: f.show(p.figure(f.name)) for f in compared(p)}, "x b1": f"{speedup:.2f}x" if speedup else "-"}


def curve_table(points: list[Point], axes: list[str], found: Findings, title: str, interval: bool = True
                ) -> tuple[Table, int]:
    """A curve's points, fastest first: * the best, ~ not detectably slower, K the knee, W the largest batch
    within --max-itl; and the least width it needs (`least_width`)."""
    t = Table(title=safe.markup(title), caption=curve_legend(found), box=box.SIMPLE_HEAD, pad_edge=False,
              padding=(0, 1, 0, 0))
    t.add_column("", min_width=1, no_wrap=True)
    for name in axes:
        t.add_column(safe.text(axis_text(name)), no_wrap=True)
    names = list(curve_figures(points[0], None, False)) if points else []
    for name in names:
        t.add_column(safe.text(name), no_wrap=True, justify="right")  # a kept record's unit, a figure's label
    t.add_column("flags", overflow="fold")
    rows = []
    for p in ranked(points, found.by):
        mark = marks(p, found) + ("W" if p in found.within else "")
        rows.append([mark, *(value_text(p.values[n]) for n in axes),
                     *curve_figures(p, found.speedup(p), interval).values(), flags_text(p)])
        t.add_row(*map(safe.text, rows[-1]), style="bold" if p is found.best else None)
    return t, least_width(["", *map(axis_text, axes), *names, "flags"], rows, 1)


def curve_legend(found: Findings) -> str:
    words = [(found.best, "* best"), (found.near or None, "~ not detectably slower"), (found.knee, "K the knee"),
             (found.within or None, "W the largest batch within --max-itl"),
             (found.speedups or None, "x b1: over batch 1")]
    return ", ".join(w for has, w in words if has)


def curve_lines(found: Findings, axes: list[str]) -> list[str]:
    """What a curve found: its best, the speedup batching gives, the knee and the latency bound."""
    best = found.best
    assert best is not None
    lat = latency_figure(found)

    def at(p: Point) -> str:
        return f"{lat.label} {lat.show(p.figure(lat.name))}"

    lines = [f"ranked by {found.by} over the batch",
             f"best: {label(best, axes)}: {with_interval(fmt.rate(best.throughput, found.by), best)} at {at(best)}"
             + near_words(found, axes)]
    lines += untold_lines(found)
    if found.over_baseline is not None and found.baseline is not None and found.baseline is not best:
        lines.append(f"best against batch 1 at the same values ({label(found.baseline, axes)}): "
                     f"{speedup_words(found.baseline_change, found.over_baseline)}")
    if found.knee is not None:
        lines += knee_lines(found, found.by, f" ({at(found.knee)})")
    lines += [f"within the latency bound: batch {p.values[BATCH_SIZE]} ({series_label(p) or 'this series'}): "
              f"{fmt.rate(p.throughput, found.by)} at {at(p)}" for p in found.within]
    return lines


def series_label(p: Point) -> str:
    """'prompt len 128': a point's curve, named by its values but the batch."""
    return ", ".join(f"{axis_text(k)} {value_text(v)}" for k, v in series_key(p))


def curve_series(points: list[Point]) -> dict[str, list[tuple[float, float]]]:
    """Aggregate throughput against the latency figure (ms), one series per values but the batch (prompt length)."""
    series: dict[str, list[tuple[float, float]]] = {}
    for p in points:
        latency = p.figure(p.latency) if p.latency else None
        if latency is None or not p.throughput:
            continue
        name = series_label(p) or safe.visible(p.finished[0].summary.throughput_unit)
        series.setdefault(name, []).append((latency * 1e3, p.throughput))
    return {k: sorted(v) for k, v in series.items()}


def curve_chart(points: list[Point], axes: list[str], found: Findings, width: int, height: int = 14) -> Text:
    """The latency/throughput curve as text: each series, the points within --max-itl (W) and the knee (K,
    drawn over a W)."""
    series = curve_series(points)
    with plot.chart(max(40, min(width, 100)), height) as drawing:
        drawing.fig.title(curve_title(found, axes))
        for pts, color in zip(series.values(), itertools.cycle(CURVE_COLORS)):
            drawing.series([x for x, _ in pts], [y for _, y in pts], color)
        for mark, color, chosen in (("W", "green", found.within), ("K", "red", [found.knee] if found.knee else [])):
            at = [(x, y) for pts in curve_series(chosen).values() for x, y in pts]
            if at:
                drawing.series([x for x, _ in at], [y for _, y in at], color, marker=mark, joined=False)
        chart = Text.from_ansi(drawing.text())
    # the key below the chart: plotext's own sits in its top left corner, where a curve's knee usually is
    for (name, _), color in zip(series.items(), itertools.cycle(CURVE_COLORS)):
        chart.append(f"\n  -- {name}", style=color.removesuffix("+"))
    return chart



# --- a capacity: the highest load within an SLO, and the knee (a workload that declares one: serve over its rate) ---
SHOWN_AT_MOST = 3.0  # a capacity chart draws a bounded figure at most this many times its bound: the rates that fail
# the SLO by far would squash those near it (the table has every figure)
CAPACITY_MARKS = (("C", "the highest {load} meeting the SLO"), ("K", "the knee"),
                  ("?", "a verdict by the figures alone, not by their {level} intervals"))


def declared_figure(p: Point, name: str) -> Figure:
    """A figure as the point's workload declares it (by its name where the workload is not here)."""
    w = p.workload
    return next((f for f in (w.figures if w else ()) if f.name == name), Figure(name=name, label=name))


def figure_label(p: Point, name: str) -> str:
    """'TTFT p99': a figure's group and label."""
    f = declared_figure(p, name)
    return safe.visible(f"{f.group} {f.label}".strip())


def load_words(c: Found[Point]) -> tuple[str, str]:
    """(the load's name, its unit): ('rate', 'requests/s')."""
    w = c.judged[0].point.workload
    return axis_text(c.capacity.load), safe.visible(w.spec(c.capacity.load).unit if w else "")


def bound_text(p: Point, v: Verdict) -> str:
    """'TTFT p99 153 ms'; over its bound: 'TTFT p99 1.20 s, over 500 ms'."""
    shown = declared_figure(p, v.bound.figure).show
    return f"{figure_label(p, v.bound.figure)} {shown(v.value)}" + ("" if v.meets else f", over {shown(v.limit)}")


def judged_text(j: Judged[Point]) -> str:
    """A point's verdict in words: its bounded figures, its failed run or its voided load."""
    if FAILED in j.invalid:
        return f"its run failed: {safe.visible(j.point.error)}" if j.point.error else "its run failed"
    said = [bound_text(j.point, v) for v in j.verdicts if v.word != UNMEASURED]
    return "; ".join(said + [f"flagged {safe.visible(f)}: the load asked was not sent" for f in j.invalid])


def slo_cell(j: Judged[Point]) -> str:
    if FAILED in j.invalid:
        return "failed"
    return ("meets" if j.meets else "misses") + ("" if j.decided else "?")


def capacity_legend(found: Findings) -> str:
    """What a capacity table's marks mean: those it has."""
    if not found.capacity:
        return ""
    load, _ = load_words(found.capacity[0])
    has = {"C": any(c.highest for c in found.capacity), "K": any(c.knee for c in found.capacity),
           "?": any(not j.decided for c in found.capacity for j in c.judged)}
    return ", ".join(f"{m} {what.format(load=load, level=f'{LEVEL:.0%}')}" for m, what in CAPACITY_MARKS if has[m])


def capacity_rows(found: Findings, axes: list[str]) -> tuple[list[str], list[list[str]]]:
    """(the header, a row a point by load, each series apart): its marks, its values, the load offered and served
    (in the load's unit), each bounded figure, its verdict and its flags."""
    first = found.capacity[0]
    header = ["", *map(axis_text, axes), "offered", "served",
              *(figure_label(first.judged[0].point, b.figure) for b in first.capacity.bounds), "SLO", "flags"]
    rows = []
    for c in found.capacity:
        for j in c.judged:
            p, shown = j.point, {v.bound: v.value for v in j.verdicts}
            rows.append(["".join(m for m, q in (("C", c.highest), ("K", c.knee)) if q is j),
                         *(value_text(p.values[n]) for n in axes), fmt.rate(p.figure(c.capacity.offered)),
                         fmt.rate(p.figure(c.capacity.served)),
                         *(declared_figure(p, b.figure).show(shown.get(b)) for b in c.capacity.bounds), slo_cell(j),
                         flags_text(p)])
    return header, rows


def capacity_table(found: Findings, axes: list[str], title: str) -> tuple[Table, int]:
    """The points by load, each series apart; and the least width it needs (`least_width`)."""
    _, unit = load_words(found.capacity[0])
    header, rows = capacity_rows(found, axes)
    t = Table(title=safe.markup(f"{title}; offered and served in {unit}"), caption=capacity_legend(found) or None,
              box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for name in header:
        t.add_column(safe.text(name), no_wrap=name != "flags", overflow="fold")
    for cells in rows:
        t.add_row(*map(safe.text, cells), style="bold" if "C" in cells[0] else None)
    return t, least_width(header, rows, 1)


def series_words(c: Found[Point]) -> str:
    """'prompt tokens 64: ' before a series' findings ('' where the load is the only axis)."""
    return ", ".join(f"{axis_text(k)} {value_text(v)}" for k, v in c.series) + ": " if c.series else ""


def capacity_lines(found: Findings) -> list[str]:
    """What a capacity sweep found, per series: the SLO in words, the highest load meeting it and the first missing
    it (between which the capacity lies), whether their verdicts stand on their intervals, and the knee."""
    lines = []
    for c in found.capacity:
        load, unit = load_words(c)
        head = series_words(c)
        j0 = next((j for j in c.judged if j.verdicts), c.judged[0])  # a failed point has none
        limits = ", ".join(f"{figure_label(j0.point, v.bound.figure)} at most "
                           f"{declared_figure(j0.point, v.bound.figure).show(v.limit)}" for v in j0.verdicts if v.limit)
        lines.append(f"{head}the SLO: a {load} meets it where {c.capacity.rule}" + (f" ({limits})" if limits else ""))
        top, miss = c.highest, c.missed
        if top is None and miss is not None:
            lines.append(f"{head}no swept {load} meets the SLO: the lowest, {miss.load:g} {unit}, misses it "
                         f"({judged_text(miss)}): the capacity is below it")
        elif top is not None and miss is None:
            lines.append(f"{head}every swept {load} meets the SLO: the capacity is at least the highest, "
                         f"{top.load:g} {unit} ({judged_text(top)})")
        elif top is not None and miss is not None:
            lines.append(f"{head}highest {load} meeting the SLO: {top.load:g} {unit} ({judged_text(top)}); the next "
                         f"swept, {miss.load:g}, misses it ({judged_text(miss)}): the capacity lies between "
                         f"{top.load:g} and {miss.load:g} {unit}")
        untold = [j for j in (top, miss) if j is not None and not j.decided]
        if untold:
            which = " and ".join(f"{j.load:g}" for j in untold)
            lines.append(f"{head}  the verdict{'s' if len(untold) > 1 else ''} at {which} "
                         f"stand{'' if len(untold) > 1 else 's'} on the figures alone, not on their {LEVEL:.0%} "
                         f"intervals (too few {unit_of(j0.point)}s at each {load} for one, or it reaches across "
                         "the bound)")
        elif top is not None or miss is not None:
            lines.append(f"{head}  {'both verdicts stand' if top and miss else 'the verdict stands'} on the "
                         f"figures' {LEVEL:.0%} intervals")
        if c.again:
            lines.append(f"{head}  above the first miss, {', '.join(f'{j.load:g}' for j in c.again)} met the SLO "
                         "again: noise, or a server that recovers")
        lines.append(f"{head}{knee_words(c, load, unit, unit_of(j0.point))}")
    return lines


def unit_of(p: Point) -> str:
    """What one of its steps is called ('request')."""
    w = p.workload
    return safe.visible(w.unit) if w else "sample"


def knee_words(c: Found[Point], load: str, unit: str, each: str) -> str:
    """The knee: the highest load served within the noise threshold of the load offered."""
    def served(j: Judged[Point]) -> str:
        return (f"{fmt.rate(j.point.figure(c.capacity.served))} served of "
                f"{fmt.rate(j.point.figure(c.capacity.offered))} offered")

    knee, behind = c.knee, c.behind
    within = f"within {NOISE:.0%} (the noise threshold) of the {unit} offered"
    if knee is None and behind is None:
        return f"knee: not measured (the runs keep no {figure_label(c.judged[0].point, c.capacity.served)})"
    if behind is None:
        return f"knee: above the swept {load}s: every one was served {within}"
    if knee is None:
        return (f"knee: below the lowest {load}, {behind.load:g}: "
                + ("its run failed" if FAILED in behind.invalid else f"{served(behind)}"))
    return (f"knee: {knee.load:g} {unit}, the highest {load} served {within} ({served(knee)}); at {behind.load:g}, "
            + ("its run failed" if FAILED in behind.invalid else served(behind))
            + f": above the knee, {each}s queue and latency rises faster than throughput")


def capacity_series(found: Findings) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]]]:
    """(each bounded figure as a percentage of its bound, at most `SHOWN_AT_MOST` times it, and the load offered and
    served), against the load; a line per series and figure."""
    bounded: dict[str, list[tuple[float, float]]] = {}
    rates: dict[str, list[tuple[float, float]]] = {}
    for c in found.capacity:
        suffix = f", {series_words(c)[:-2]}" if c.series else ""
        for j in c.judged:
            for v in j.verdicts:
                if v.value is not None and v.limit:
                    bounded.setdefault(figure_label(j.point, v.bound.figure) + suffix, []).append(
                        (j.load, 100 * min(SHOWN_AT_MOST, v.value / v.limit)))
            for word, name in (("served", c.capacity.served), ("offered", c.capacity.offered)):
                if (y := j.point.figure(name)) is not None:
                    rates.setdefault(word + suffix, []).append((j.load, y))
    return bounded, rates


def bounded_labels(c: Found[Point]) -> str:
    """'TTFT p99 and TPOT p99': the figures the SLO bounds."""
    return " and ".join(figure_label(c.judged[0].point, b.figure) for b in c.capacity.bounds)


def capacity_titles(found: Findings) -> tuple[str, str]:
    """The two charts' titles: the bounded figures' and the rates'."""
    c = found.capacity[0]
    load, unit = load_words(c)
    return (f"{bounded_labels(c)} as % of their SLO bound (100%; at most {SHOWN_AT_MOST:.0%}) against {load}",
            f"{unit} offered and served against {load}")


def capacity_title(found: Findings) -> str:
    """One chart's title for both (the lab's, half of 80 columns): the bounded figures' shares of their bounds (its
    header names them), the rates on the right."""
    load, unit = load_words(found.capacity[0])
    return f"% of SLO bound, {unit} (right), by {load}"


def capacity_chart(points: list[Point], found: Findings, width: int, height: int = 12) -> Text:
    """The two charts as text: each bounded figure against the load as a share of its bound (the bound a line at
    100%), then the load served and offered against it; the key below each."""
    load = found.capacity[0].capacity.load
    at, log = x_axis(points, load)
    out = Text()
    for title, series, level in zip(capacity_titles(found), capacity_series(found), (100.0, None)):
        colors = dict(zip(series, itertools.cycle(CURVE_COLORS)))
        with plot.chart(max(40, min(width, 100)), height, xlog=log) as drawing:
            drawing.fig.title(title)
            if level is not None and at:
                drawing.level(level, (at[0][0], at[-1][0]), "red")
            for name, pts in series.items():
                drawing.series([x for x, _ in sorted(pts)], [y for _, y in sorted(pts)], colors[name])
            if at:
                drawing.lim("x", at[0][0], at[-1][0])
                drawing.ticks("x", at)
            out.append(Text.from_ansi(drawing.text()))
        for name, color in colors.items():
            out.append(f"\n  -- {name}", style=color)
        if level is not None:
            out.append("\n  -- the SLO's bound", style="red")
        out.append("\n")
    return out


def capacity_json(found: Findings) -> list[dict[str, Any]]:
    """Each series' capacity for --json: the highest load meeting the SLO, the first missing it, the knee, and every
    point's verdicts."""
    def where(j: Judged[Point] | None) -> float | None:
        return j.load if j is not None else None

    return [{"series": dict(c.series), "highest_meeting": where(c.highest), "first_missing": where(c.missed),
             "knee": where(c.knee), "first_behind": where(c.behind),
             "points": [{"load": j.load, "meets": j.meets, "decided": j.decided, "invalid": list(j.invalid),
                         "keeps_up": j.keeps_up, "verdicts": [asdict(v) for v in j.verdicts]} for j in c.judged]}
            for c in found.capacity]
