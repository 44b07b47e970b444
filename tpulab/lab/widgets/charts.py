"""Live charts: plotext plots fed point by point, built off the event loop.

A plotext build takes ~20 ms for a modest chart; done in `render()` it stalls the UI for that long
at every redraw. `SeriesPlot` snapshots its points on the event loop, builds the plot in a thread (the
GIL is handed back every few ms, so the UI keeps its pace) and renders the finished text. The plot has
no colours of its own but its series': it shows on the widget's background, in its foreground, whatever
the app's theme.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import RenderResult
from textual.widget import Widget

from tpulab.base.charts import ticks
from tpulab.views import plot

MAX_POINTS = 5000
PLOT_POINTS = 300  # a series is thinned to this many points when drawn: plotext's cost grows with points
PALETTE = ((80, 160, 255), (255, 165, 0), (90, 200, 110), (220, 110, 220), (0, 200, 200), (230, 220, 90))
LINE_COLOUR = (230, 60, 60)  # a reference line (a peak) and its name in the header
LEAST_PLOT = 4  # a header that needs the rows takes them, down to two rows of data: no title or legend is cut
IN_RANGE = 2.0  # a reference line is drawn when at most this many times the data's top: the data keeps half the height
NARROW = 0.05  # a y range under this share of its values' size is named: fitted to the height, a wobble looks a cliff


@dataclass
class View:
    """What one drawing shows, snapshotted on the event loop: the thread reads nothing else."""

    title: str
    series: dict[str, list[tuple[float, float]]]
    lines: dict[str, float]
    right: tuple[str, ...]
    ylim: tuple[float, float] | None = None
    xticks: list[tuple[float, str]] | None = None  # where the x values are few and named (a sweep's swept values)
    xlog: bool = False


class SeriesPlot(Widget):
    """Named line series in bounded deques, plus labelled horizontal reference lines (a device's peak).

    The header line names the series in their colours (plotext's own legend would cover the data); the y
    axes fit the data (or `ylim`: a percentage from 0 to 100), a reference line far above it is named as
    off scale; a step axis has integer ticks; series named in `right` get a y axis of their own; until a
    point arrives it says so, with no axes.
    """

    DEFAULT_CSS = """
    SeriesPlot {
        width: 1fr;
        height: 1fr;
        min-height: 6;  /* the header, three rows of data, the x axis and its ticks */
    }
    """

    def __init__(self, title: str = "", ylim: tuple[float, float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.ylim = ylim  # a fixed y range (percentages: 0 to 100); None: fitted to the data
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.lines: dict[str, float] = {}
        self.right: tuple[str, ...] = ()
        self.xticks: list[tuple[float, str]] | None = None  # None: integer ticks where every x is whole (a step)
        self.xlog = False
        self.dirty = False
        self._built: Text | None = None
        self._asked = 0  # pictures asked for: one built for an earlier ask (an older size, fewer points) is dropped

    def configure(self, title: str, right: tuple[str, ...] = ()) -> None:
        """Start afresh; the title names the quantity and its unit (axes get no labels: rows are scarce)."""
        self.title = title
        self.right = right
        self.xticks, self.xlog = None, False
        self.series.clear()
        self.lines.clear()
        self.replot()

    def add(self, name: str, x: float, y: float) -> None:
        self.series.setdefault(name, deque(maxlen=MAX_POINTS)).append((x, y))
        self.dirty = True

    def points(self, name: str) -> list[tuple[float, float]]:
        return list(self.series.get(name, ()))

    def replot(self) -> None:
        """Snapshot the data here, on the event loop; build the picture in a thread."""
        series = {}
        for name, pts in self.series.items():
            if pts:
                step = -(-len(pts) // PLOT_POINTS)
                series[name] = list(pts)[::step]
        self.dirty = False
        self._asked += 1
        if not series:  # no axes around nothing
            self._show(Text(f"{self.title}: nothing measured yet" if self.title else "nothing measured yet",
                            style="dim"), self._asked)
            return
        self._build(View(self.title, series, dict(self.lines), self.right, self.ylim, self.xticks, self.xlog),
                    self.size.width, self.size.height, self._asked)

    @work(thread=True, group="chart", exit_on_error=False)
    def _build(self, view: View, width: int, height: int, asked: int) -> None:
        top = max(y for pts in view.series.values() for _, y in pts)
        shown = {k: v for k, v in view.lines.items() if v <= IN_RANGE * top}
        xs = [x for pts in view.series.values() for x, _ in pts]
        ranges: dict[str, tuple[float, float]] = {}  # each y axis's, from the data and the lines drawn
        for side in ("left", "right"):
            on_side = [y for name, pts in view.series.items() if (name in view.right) == (side == "right")
                       for _, y in pts] + (list(shown.values()) if side == "left" else [])
            if on_side:
                ranges[side] = view.ylim or (min(on_side), max(on_side))
        notes = [] if view.ylim else [note for side, (lo, hi) in ranges.items()
                                      if (note := narrow_note(lo, hi, "axis" if side == "left" else "right axis"))]
        head = header(view, shown, width, max(1, height - LEAST_PLOT), notes)
        with plot.chart(width, height - len(head), xlog=view.xlog) as chart:
            for value in shown.values():  # under the data, which it must not hide
                chart.level(value, (min(xs), max(xs)), LINE_COLOUR)
            for (name, pts), colour in zip(view.series.items(), _colours()):
                chart.series([x for x, _ in pts], [y for _, y in pts], colour, yside="right" if name in view.right else "left")
            chart.fig.axes(False)  # no frame: the x axis below and the y axes the data use
            chart.fig.axes(True, axis="x", side="lower")
            chart.fig.axes(True, axis="y", side=list(ranges))
            chart.lim("x", min(xs), max(xs))
            most = max(3, width // 8)  # x values not whole (seconds): round ones, as the y axis has, never plotext's
            along = view.xticks or [(float(t), str(t)) for t in integer_ticks(xs, most)] or ticks(min(xs), max(xs), most)
            if along:
                chart.ticks("x", along)
            for side, (lo, hi) in ranges.items():  # labels at the digits the data carry, as many as the rows allow
                chart.lim("y", lo, hi, side)
                chart.ticks("y", ticks(lo, hi, max(2, (height - len(head) - 2) // 2)), side)
            body = Text.from_ansi(chart.text())
        self.app.call_from_thread(self._show, Text("\n").join([*head, body]), asked)

    def _show(self, built: Text, asked: int) -> None:
        """The picture, unless a later one was asked for since: builds run in threads side by side, and one for a
        size the chart no longer has (taller, before a header above grew) may finish last, its axis then cut off."""
        if asked != self._asked:
            return
        self._built = built
        self.refresh()

    def render(self) -> RenderResult:
        return self._built if self._built is not None else Text(self.title)

    def on_resize(self) -> None:
        self.replot()


def _colours():
    while True:
        yield from PALETTE


def narrow_note(lo: float, hi: float, axis: str = "axis") -> str | None:
    """What a y axis fitted to data that barely move says: where it starts, and how far the data swing. A 0.7%
    wobble drawn over the chart's height looks like a cliff; an axis from zero would flatten it, and with it the
    step-to-step detail (warm-up, a stall) the live charts are for: the axis stays fitted, and says so."""
    size = max(abs(lo), abs(hi))
    if not 0 < hi - lo < NARROW * size:
        return None
    digits = max(0, -math.floor(math.log10(hi - lo)))  # as many as the range needs: 1,430 or 10.5
    swing = (hi - lo) / 2 / abs((hi + lo) / 2) * 100
    return f"({axis} from {lo:,.{digits}f}: ±{swing:.2g}% swings)"


def header(view: View, shown: dict[str, float], width: int, most: int, notes: list[str] | None = None) -> list[Text]:
    """The title (with `notes` on its axes), then each series in its colour (those on the right axis say so), then
    the reference lines: drawn ones in their colour, the others said to be off scale; on as many lines as needed,
    at most `most`."""
    said = [word for note in notes or () for word in note.split(" ")]
    title = view.title.split(" ") + said  # a long title wraps between its words, the notes' too
    pieces = [Text(word, style="yellow" if i >= len(title) - len(said) else "bold") for i, word in enumerate(title)]
    for name, colour in zip(view.series, _colours()):
        pieces.append(Text.assemble(("━ ", Style(color=Color.from_rgb(*colour))),
                                    name + (" (right)" if name in view.right else "")))
    for name, value in view.lines.items():
        pieces.append(Text(f"── {name} {value:,.1f}", style=Style(color=Color.from_rgb(*LINE_COLOUR))) if name in shown
                      else Text(f"{name} {value:,.1f} off scale", style="dim"))
    lines = [Text()]
    for i, piece in enumerate(pieces):
        gap = " " if 0 < i < len(title) else "  "
        if lines[-1].cell_len and lines[-1].cell_len + len(gap) + piece.cell_len > width:
            lines.append(Text())
        lines[-1].append_text(Text(gap) + piece if lines[-1].cell_len else piece)
    cut = len(lines) > most
    lines = lines[:most]
    if cut:
        lines[-1].append("…")
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return lines


def integer_ticks(xs: list[float], most: int) -> list[int]:
    """Whole-number ticks at a round spacing (1, 2, 5, 10, ...) when every x is whole (a step); else none."""
    if not xs or any(x != int(x) for x in xs):
        return []
    lo, hi = int(min(xs)), int(max(xs))
    raw = max(1.0, (hi - lo) / max(1, most - 1))
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = list(range(-(-lo // step) * step, hi + 1, step))
    return ticks if len(ticks) >= 2 else sorted({lo, hi})


class BarPlot(Widget):
    """One bar per run, across, for comparing runs: each bar's label on its own row, so however narrow the chart
    every bar says which run it is; the title wraps between its words, and each bar ends in its value."""

    DEFAULT_CSS = """
    BarPlot {
        height: auto;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = ""
        self.bars: list[tuple[str, float]] = []

    def show_bars(self, title: str, labels: list[str], values: list[float]) -> None:
        self.title, self.bars = title, list(zip(labels, values))
        self.refresh(layout=True)

    def render(self) -> RenderResult:
        width = max(1, self.size.width)
        out = Text(no_wrap=True)
        out.append_text(Text("\n").join(Text(line, style="bold") for line in wrap_words(self.title, width)))
        name_w = max((len(name) for name, _ in self.bars), default=0)
        values = [f"{v:.2f}x" for _, v in self.bars]
        room = max(1, width - name_w - 2 - max(map(len, values), default=0))
        top = max((v for _, v in self.bars), default=0) or 1
        for (name, value), shown, colour in zip(self.bars, values, _colours()):
            out.append(f"\n{name:<{name_w}} ")
            out.append("█" * max(1, round(room * value / top)) if value > 0 else "", Style(color=Color.from_rgb(*colour)))
            out.append(f" {shown}")
        return out


def wrap_words(text: str, width: int) -> list[str]:
    """`text` on lines of at most `width` columns, broken between words (a word longer than a line keeps its own)."""
    lines = [""]
    for word in text.split():
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append("")
        lines[-1] += (" " if lines[-1] else "") + word
    return lines
