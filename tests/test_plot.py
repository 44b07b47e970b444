"""tpulab.views.plot, the chart layer the command line's views and the lab's charts share: plotext's one figure,
handed to one drawing at a time, with axes that fit the data. Real plotext, drawn as text."""

from __future__ import annotations

import threading

from rich.text import Text

from tpulab.views import plot


def shown(chart: plot.Chart) -> list[str]:
    return Text.from_ansi(chart.text()).plain.splitlines()


def braille(rows: list[str]) -> bool:
    return any("\u2801" <= c <= "\u28ff" for row in rows for c in row)


def test_a_second_drawing_waits_for_the_first():
    """A lab chart builds in its thread while a pane draws a roofline: one figure, so the second waits (had it
    cleared the figure, the first would have lost its data)."""
    entered = threading.Event()

    def other() -> None:
        with plot.chart(30, 6) as chart:
            entered.set()
            chart.series([0, 1], [0, 1], "red")

    with plot.chart(30, 6) as chart:
        chart.series([0, 10], [1, 2], "blue")
        second = threading.Thread(target=other)
        second.start()
        assert not entered.wait(0.3)
        rows = shown(chart)
    second.join(10)
    assert entered.is_set() and braille(rows)


def test_ticks_on_a_log_x_axis_keep_the_data_and_space_each_doubling_alike():
    """plotext 6.1 given ticks on its own log axis draws no data at all: the sweep's chart was empty."""
    with plot.chart(40, 6, xlog=True) as chart:
        chart.series([32, 64, 128, 256], [100, 80, 60, 40], "blue")
        chart.lim("x", 32, 256)
        chart.ticks("x", [(32, "32"), (64, "64"), (128, "128"), (256, "256")])
        rows = shown(chart)
    assert rows[-1].split() == ["32", "64", "128", "256"] and braille(rows[:-2])
    marks = [i for i, c in enumerate(rows[-2]) if c == "┬"]
    gaps = [b - a for a, b in zip(marks, marks[1:])]
    assert len(marks) == 4 and max(gaps) - min(gaps) <= 1


def test_a_range_of_one_value_is_left_to_plotext_which_widens_it(capsys):
    """A chart's first point: plotext warns on stderr (into the lab's screen) when an axis is set to one value."""
    with plot.chart(30, 6) as chart:
        chart.series([3], [5], "blue")
        chart.lim("x", 3, 3)
        chart.lim("y", 5, 5)
        rows = shown(chart)
    assert capsys.readouterr().err == "" and braille(rows)
