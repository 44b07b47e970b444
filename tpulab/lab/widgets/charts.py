"""Live charts: plotext plots fed point by point, built off the event loop.

A plotext build takes ~20 ms of pure Python for a modest chart; done in `render()` it stalls
the UI for that long at every redraw. `SeriesPlot` snapshots its points on the event loop, builds
the plot in a thread (the GIL is handed back every few ms, so the UI keeps its pace) and renders
the finished text.
"""

from __future__ import annotations

import threading
from collections import deque

from rich.text import Text
from textual import work
from textual.app import RenderResult
from textual_plotext import PlotextPlot

MAX_POINTS = 5000
PLOT_POINTS = 300  # a series is thinned to this many points when drawn: plotext's cost grows with points


class SeriesPlot(PlotextPlot):
    """Named line series in bounded deques, plus labelled horizontal reference lines (a device's peak)."""

    def __init__(self, title: str = "", ylim: tuple[float, float] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.ylim = ylim  # a fixed y range (percentages: 0 to 100); None: fitted to the points
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.lines: dict[str, float] = {}
        self.dirty = False
        self._built: Text | None = None
        self._lock = threading.Lock()  # one build at a time touches the plotext figure

    def configure(self, title: str) -> None:
        """Start afresh; the title names the quantity and its unit (axes get no labels: rows are scarce)."""
        self.title = title
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
        title = self.title
        if self.lines:
            title += "  " + ", ".join(f"{k} {v:,.1f}" for k, v in self.lines.items())
        series = {}
        for name, pts in self.series.items():
            if pts:
                step = -(-len(pts) // PLOT_POINTS)
                series[name] = list(pts)[::step]
        self.dirty = False
        self._build(title, series, list(self.lines.values()), self.size.width, self.size.height,
                    self._get_plotext_theme_name(self.app.theme), self.ylim)

    @work(thread=True, group="chart", exit_on_error=False)
    def _build(self, title: str, series: dict[str, list[tuple[float, float]]], lines: list[float],
               width: int, height: int, theme: str, ylim: tuple[float, float] | None = None) -> None:
        with self._lock:
            plt = self.plt
            plt.clear_data()
            plt.clear_figure()
            plt.title(title)
            for name, pts in series.items():
                xs, ys = zip(*pts)
                plt.plot(xs, ys, label=name if len(series) > 1 else None, marker="braille")
            for value in lines:
                plt.horizontal_line(value, color="red")
            if ylim is not None:
                plt.ylim(*ylim)
            plt.plotsize(width, height)
            plt._set_size(width, height)  # as PlotextPlot.render does: plotsize alone does not stick
            plt.theme(theme)
            built = Text.from_ansi(plt.build())
        self.app.call_from_thread(self._show, built)

    def _show(self, built: Text) -> None:
        self._built = built
        self.refresh()

    def render(self) -> RenderResult:
        return self._built if self._built is not None else Text(self.title)

    def on_resize(self) -> None:
        self.replot()


class BarPlot(PlotextPlot):
    """One bar per label, for comparing runs (drawn once per comparison, so in `render` as usual)."""

    def show_bars(self, title: str, labels: list[str], values: list[float]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        if labels:
            plt.bar(labels, values)
        self.refresh()
