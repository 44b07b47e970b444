"""Live charts: plotext plots fed point by point, redrawn only when asked (at a bounded rate)."""

from __future__ import annotations

from collections import deque

from textual_plotext import PlotextPlot

MAX_POINTS = 5000
PLOT_POINTS = 300  # a series is thinned to this many points when drawn: plotext's cost grows with points


class SeriesPlot(PlotextPlot):
    """Named line series in bounded deques, plus labelled horizontal reference lines (a device's peak)."""

    def __init__(self, title: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self.title = title
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.lines: dict[str, float] = {}
        self.dirty = False

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
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        title = self.title
        if self.lines:
            title += "  " + ", ".join(f"{k} {v:,.1f}" for k, v in self.lines.items())
        plt.title(title)
        legend = len(self.series) > 1
        for name, pts in self.series.items():
            if pts:
                step = -(-len(pts) // PLOT_POINTS)
                xs, ys = zip(*list(pts)[::step])
                plt.plot(xs, ys, label=name if legend else None, marker="braille")
        for value in self.lines.values():
            plt.horizontal_line(value, color="red")
        self.dirty = False
        self.refresh()


class BarPlot(PlotextPlot):
    """One bar per label, for comparing runs."""

    def show_bars(self, title: str, labels: list[str], values: list[float]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        if labels:
            plt.bar(labels, values)
        self.refresh()
