"""A run or sweep while it goes: progress and a chart in the cell, updated in place, throttled.

In a notebook kernel the output is one IPython display handle, redrawn at most every `interval`
seconds (and at the start, at each sweep point and at the end), so a fast run does not flood the
notebook. Elsewhere (a terminal REPL, a script) the terminal's own printer speaks instead.
IPython is never imported here: when it is not loaded already, this is not a notebook.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from tpulab.base import fmt, safe
from tpulab.base.events import Event, RunRecord, Started, Step
from tpulab.base.timing import median
from tpulab.engine.record import RunRecorder
from tpulab.views import html

INTERVAL_S = 1.0


def in_notebook() -> bool:
    """True in a Jupyter (or Colab) kernel: IPython is loaded and its shell has a kernel."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def new_handle() -> Any:
    """An empty display in the cell, to update in place."""
    from IPython.display import HTML, display

    return display(HTML(""), display_id=True)


class Throttled:
    """Redraws `render()` into a display handle, at most every `interval` seconds unless forced."""

    def __init__(self, handle: Any, render: Callable[[], str], interval: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.handle = handle
        self.render = render
        self.interval = interval
        self.clock = clock
        self.last = -float("inf")
        self.pending = False
        self.updates = 0

    def __call__(self, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.last < self.interval:
            self.pending = True
            return
        from IPython.display import HTML

        self.handle.update(HTML(self.render()))
        self.last, self.pending = now, False
        self.updates += 1


def progress_line(rec: RunRecorder) -> str:
    """'conv: 7 of 13 iterations, median 2.1 ms, about 3s left' from what was measured so far."""
    total = rec.steps_total
    unit = rec.workload.unit
    done = f"{rec.steps_done()} of {total} {unit}s" if total else f"{rec.steps_done()} {unit}s"
    mid = median(rec.steady_seconds())
    middle = f", median {fmt.seconds(mid)}" if mid is not None else ""
    eta = rec.eta_seconds()
    left = f", about {fmt.duration(eta)} left" if eta is not None and rec.status == "running" else ""
    state = "" if rec.status == "running" else f" ({rec.status})"
    return f"{rec.workload.name}: {done}{middle}{left}{state}"


def run_view(rec: RunRecorder, with_chart: bool = True) -> str:
    """The live cell of a run: a progress line, then its chart so far (the full summary at the end)."""
    record = rec.record()
    chart = html.drawn(html.run_chart, record) if with_chart and record.steps else ""
    return html.block(f"<div><b>{safe.html(progress_line(rec))}</b></div>", chart)


class LiveRun:
    """Feeds a run's events to the cell (notebook) or the terminal printer (elsewhere)."""

    def __init__(self, rec: RunRecorder, interval: float = INTERVAL_S) -> None:
        self.rec = rec
        self.notebook = in_notebook()
        self.view: Throttled | None = None
        self.printer: Any = None
        if self.notebook:
            self.view = Throttled(new_handle(), lambda: run_view(rec), interval)
        else:
            from rich.console import Console

            from tpulab.views.console import RunPrinter

            self.printer = RunPrinter(rec, Console())

    def __call__(self, event: Event) -> None:
        if self.view is not None:
            self.view(force=isinstance(event, Started))
        elif self.printer is not None:
            self.printer(event)

    def close(self, record: RunRecord) -> None:
        """The cell ends as the run's result: its summary table and charts, in place of the progress."""
        if self.view is not None:
            self.view.render = lambda: html.run_html(record)
            self.view(force=True)
        elif self.printer is not None:
            self.printer.close()


class LiveSweep:
    """A sweep's cell: the point running and its progress, and the table of the points so far."""

    def __init__(self, interval: float = INTERVAL_S) -> None:
        self.notebook = in_notebook()
        self.view: Throttled | None = None
        self.head = ""
        self.table = ""
        self.run: RunRecorder | None = None
        if self.notebook:
            self.view = Throttled(new_handle(), self.render, interval)

    def render(self) -> str:
        now = f"<div>{safe.html(progress_line(self.run))}</div>" if self.run is not None else ""
        return html.block(f"<div><b>{safe.html(self.head)}</b></div>", now, self.table)

    def point(self, head: str, run: RunRecorder | None) -> None:
        self.head, self.run = head, run
        if self.view is not None:
            self.view(force=True)
        else:
            print(safe.visible(head), flush=True)

    def finished(self, table_html: str, line: str) -> None:
        self.table, self.run = table_html, None
        if self.view is not None:
            self.view(force=True)
        else:
            print(safe.visible(line), flush=True)

    def step(self, event: Event) -> None:
        if self.view is not None and isinstance(event, Step):
            self.view()
