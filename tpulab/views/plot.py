"""Terminal charts through plotext (6), for the command line's views and the lab's live charts alike.

plotext draws on one figure per process (`plotext.figure`): two drawings at once (a lab chart building in its
thread while a pane draws a roofline on the event loop) would mix their data. `chart()` hands it out to one
caller at a time, cleared, sized and colourless, so that the terminal's or the widget's own colours show through.
plotext is imported at the first chart: its import takes about 0.4 s.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

Colour = str | tuple[int, int, int]  # a plotext colour name ("blue", "red+") or an RGB triple

_LOCK = threading.Lock()


class Chart:
    """plotext's figure (`fig`: its title, axes and rulers) with series, levels and ticks in data units. A log x axis
    is drawn as log10 of x on a linear one: plotext 6.1 given ticks on a log axis draws no data."""

    def __init__(self, fig: Any, xlog: bool) -> None:
        self.fig = fig
        self.xlog = xlog

    def _x(self, xs: Sequence[float]) -> list[float]:
        return [math.log10(x) for x in xs] if self.xlog else list(xs)

    def series(self, xs: Sequence[float], ys: Sequence[float], colour: Colour, marker: str = "braille",
               joined: bool = True, yside: str = "left") -> None:
        """Points in `colour`, joined by lines unless `joined` is False (a scatter)."""
        import plotext as plt

        signal = self.fig.signal(self._x(xs), list(ys), marker=plt.marker(marker, pixel=colour), yside=yside)
        if joined:
            signal.lines()
        self.fig.draw(signal)

    def level(self, y: float, xs: tuple[float, float], colour: Colour) -> None:
        """A horizontal line at `y` across `xs`, in line characters (plotext's own `line` paints a white background
        behind itself whatever the theme)."""
        import plotext as plt

        self.fig.draw(self.fig.segment(self._x(xs), (y, y), marker=plt.marker("─", pixel=colour)))

    def lim(self, axis: str, lo: float, hi: float, side: str | None = None) -> None:
        """The axis from `lo` to `hi`, set wherever ticks are given: plotext 6.1 fits an axis to its ticks and the
        other axis to the data within them (y ticks above a series' lowest point put the x axis left of the data).
        A range of one value is left to plotext, which widens it (it warns, on stderr, at a range set so)."""
        if lo < hi:
            self.fig.ruler(axis, side).lim(*(self._x([lo, hi]) if axis == "x" else [lo, hi]))

    def ticks(self, axis: str, at: Sequence[tuple[float, str]], side: str | None = None) -> None:
        """Ticks at the given places, each with its label."""
        places = [x for x, _ in at]
        self.fig.ruler(axis, side).ticks(self._x(places) if axis == "x" else places, [label for _, label in at])

    def text(self) -> str:
        """The chart drawn, as text with ANSI colours."""
        return str(self.fig.build().string())


@contextmanager
def chart(width: int, height: int, xlog: bool = False) -> Iterator[Chart]:
    """plotext's figure, for the caller alone until the block ends: cleared, `width` x `height` cells, colourless."""
    import plotext as plt

    with _LOCK:
        plt.terminal.limit(False, False)  # the size asked for, whatever the terminal's (a pipe has none)
        fig = plt.figure
        fig.clear()
        fig.plot_size(width, height)
        fig.theme("colorless")
        fig.ruler("both", "both").alignment(lim="edge")  # the data reach the axes' ends (as plotext 5 drew them)
        yield Chart(fig, xlog)
