"""`tpulab top`: CPU busy per core, a history chart per device, and the processes holding each accelerator.

It never holds a device: no framework is imported; figures come from the telemetry sampler, the
processes from /proc and NVML (`tpulab.machine.holders`). Sampling runs on a thread of its own and
posts what it read, so a device call that takes seconds never freezes the screen.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from tpulab.base import fmt, safe
from tpulab.base.errors import one_line
from tpulab.base.events import Accel, Sample
from tpulab.engine.telemetry import CALL_TIMEOUT_S, GPU_EXTRA, Caller, Hung, Probe, Sampler, probes_for
from tpulab.lab.failure import FailsInOneLine
from tpulab.lab.panes.help import rows
from tpulab.lab.widgets.charts import SeriesPlot
from tpulab.lab.widgets.rows import RowTable
from tpulab.machine.holders import GpuHolders, Holder, Holders, tpu_holders

HISTORY_S = 120.0  # what a chart shows: the last two minutes
HOLDERS_EVERY_S = 1.0  # NVML's per-process queries take its driver lock: at most once a second
CORE_CELL = 20  # columns per core's bar at most; more cores share a row as the width allows
CORE_ROWS = 6  # rows of bars at most; more cores get a column each
BLOCKS = " ▏▎▍▌▋▊▉█"
COLUMNS = " ▁▂▃▄▅▆▇█"
HOLDER_COLUMNS = ("device", "pid", "memory", "tpulab run", "command")
SERIES = ("busy", "mem")  # each chart's lines, in percent; short: the header line names them in half of 80 columns
LEGEND = sum(len(f"  ━ {name}") for name in SERIES)  # what the chart's header line adds after its title

HELP = "\n".join([  # after the keys, which are read from the bindings
    "[b]CPU[/b]: each core's busy share since the previous sample; the host's memory in use.",
    "[b]Charts[/b]: each device's busy % and memory in use (% of its total), over the last two minutes "
    "(x: seconds since top started); the header: busy now, memory used/total, a GPU's power and temperature.",
    "[b]Processes[/b]: who holds each accelerator (a GPU's compute processes from NVML; on a TPU, the "
    "processes with /dev/accel* or /dev/vfio/* open), their command line, and the tpulab run each is. "
    "In a container NVML gives host PIDs: a command line shows only when that PID here uses a GPU too.",
    "[b]-[/b]: a figure not known (yet).",
])


HolderSource = Callable[[], Holders]


def bar(percent: float, width: int) -> str:
    """A horizontal bar of `width` cells, filled to `percent` in eighths of a cell."""
    eighths = round(max(0.0, min(percent, 100.0)) / 100 * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def core_lines(cores: list[float], width: int) -> list[Text]:
    """One bar per core, as many to a row as `width` allows; a column per core where they would not fit."""
    label = len(str(len(cores) - 1))
    per_row = max(1, min(len(cores), width // CORE_CELL))
    if math.ceil(len(cores) / per_row) > CORE_ROWS:
        return core_columns(cores, width)
    cell = width // per_row
    lines = []
    for start in range(0, len(cores), per_row):
        line = Text()
        for i, busy in enumerate(cores[start:start + per_row], start):
            line.append(f"{i:>{label}} ", style="dim")
            line.append(bar(busy, cell - label - 7), style=core_colour(busy))
            line.append(f" {fmt.pct(busy):>4} ")
        lines.append(line)
    return lines


def core_columns(cores: list[float], width: int) -> list[Text]:
    """Many cores: one cell each, as high as it is busy (▁ to █), after the first core's number in each row."""
    label = len(str(len(cores) - 1))
    per_row = max(1, width - label - 1)
    lines = []
    for start in range(0, len(cores), per_row):
        line = Text(f"{start:>{label}} ", style="dim")
        for busy in cores[start:start + per_row]:
            line.append(COLUMNS[min(len(COLUMNS) - 1, round(busy / 100 * (len(COLUMNS) - 1)))],
                        style=core_colour(busy))
        lines.append(line)
    return lines


def core_colour(busy: float) -> str:
    return "red" if busy >= 90 else "yellow" if busy >= 60 else "green"


def device_name(d: Accel) -> str:
    return f"{d.kind.upper()} {d.index}"


def share(used: float | None, total: float | None) -> float | None:
    return used / total * 100 if used is not None and total else None


def memory(used: float | None, total: float | None) -> str:
    """Used of total in GiB, in few characters (a chart's header is half of 80 columns): '8.2/24 GiB',
    '79/80 GiB' (a decimal below 10 GiB only), '-/16 GiB'; below 1 GiB in all, as fmt says it."""
    if total is None or total < 2**30:
        return f"{fmt.bytes_(used)}/{fmt.bytes_(total)}"
    u, t = ("-" if v is None else f"{v / 2**30:.{1 if v < 10 * 2**30 else 0}f}" for v in (used, total))
    return f"{u}/{t} GiB"


def figures(name: str, busy: float | None, used: float | None, total: float | None, *extra: str) -> list[str]:
    """What a chart's header says now, most important first: 'GPU 0: 45%', '12/80 GiB', '300 W'."""
    return [f"{name}: {fmt.pct(busy)}", memory(used, total), *extra]


def accel_extra(d: Accel) -> list[str]:
    """A GPU's power and temperature, where NVML gives them."""
    return [f"{v:.0f} {unit}" for v, unit in ((d.power_w, "W"), (d.temp_c, "C")) if v is not None]


def chart_title(parts: list[str], width: int) -> str:
    """As many of `parts` as fit beside the series' names on the chart's header line of `width`."""
    title = parts[0]
    for part in parts[1:]:
        if len(title) + 2 + len(part) + LEGEND > width:
            break
        title += ", " + part
    return title


class Sampled(Message):
    """What the sampling thread read: one sample, and the accelerators' holders when it asked for them."""

    def __init__(self, sample: Sample, holders: Holders | None, asked: list[str], notes: dict[str, str]) -> None:
        super().__init__()
        self.sample, self.holders, self.asked, self.notes = sample, holders, asked, notes


class HelpPanel(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close", key_display="escape",
                        tooltip="close this help (q and ? too)", id="top.help.close")]  # as the lab's help
    DEFAULT_CSS = """
    HelpPanel { align: center middle; }
    #top-help { width: 78; height: auto; max-height: 22; border: round $accent; background: $panel;
                padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        keys = "\n".join(f"  [b]{key:<8}[/b] {what}" for key, what in rows([*self.app.BINDINGS, *self.BINDINGS]))
        yield Static(f"[b]tpulab top[/b]: keys\n\n{keys}\n\n{HELP}", id="top-help")


class TopApp(FailsInOneLine):
    """The devices of this machine, live; `kinds`: the accelerator kinds detection found (gpu, tpu);
    `root`: where /proc and /dev are read; `probes`: the sampler's (default: the CPU and each kind's)."""

    TITLE = "tpulab top"
    SUBJECT, FAILURE_NAME = "top", "top"
    BINDINGS = [Binding("q", "quit", "Quit", tooltip="quit", id="top.quit"),
                Binding("question_mark,f1,h", "help", "Help", key_display="?", tooltip="this help (h and F1 too)",
                        id="top.help")]  # as the lab's
    CSS = """
    #cpu { height: auto; max-height: 7; padding: 0 1; }
    #charts { grid-size: 1; grid-gutter: 0 1; height: 1fr; min-height: 8; grid-rows: 1fr; }
    #charts SeriesPlot { height: 1fr; }
    #processes { height: auto; max-height: 9; padding: 0 1; }
    #holders { height: auto; max-height: 7; }
    """

    def __init__(self, kinds: list[str], interval_s: float = 1.0, count: int | None = None, root: Path = Path("/"),
                 probes: list[Probe] | None = None) -> None:
        super().__init__()
        self.kinds = kinds
        self.interval_s = interval_s
        self.count = count  # samples to show before it closes (None: until q)
        self.taken = 0
        self.sampler = Sampler(probes if probes is not None else probes_for(kinds), lambda s: None, interval_s)
        self.sources: dict[str, HolderSource] = {}
        if "tpu" in kinds:
            self.sources["TPU"] = lambda: tpu_holders(root)
        if "gpu" in kinds:
            self.sources["GPU"] = GpuHolders(root).read
        self.history = max(2, math.ceil(HISTORY_S / interval_s))
        self.started = time.monotonic()
        self.cores: list[float] = []
        self.last: Sample | None = None
        self.charts: dict[str, SeriesPlot] = {}
        self.holder_rows: list[tuple[str, ...]] = []
        self.holder_notes: dict[str, str] = {}  # a kind whose processes cannot be listed, and why (sampling thread)
        self.caller = Caller("tpulab-top-holders")  # the holders' calls, each with a timeout (NVML may hang)
        self.stopping = threading.Event()

    def compose(self) -> ComposeResult:
        yield Static(self._cpu_text(), id="cpu")
        with Grid(id="charts"):
            yield self._chart("CPU")
        with Vertical(id="processes"):
            yield Static(id="holders-title")
            yield RowTable(id="holders")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#holders", DataTable)
        table.add_columns(*HOLDER_COLUMNS)
        table.display = bool(self.sources)
        self._show_holders(None, [], {})
        threading.Thread(target=self._sampling, daemon=True, name="tpulab-top").start()

    def on_unmount(self) -> None:
        self.stopping.set()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpPanel):
            self.push_screen(HelpPanel())

    # --- the sampling thread ------------------------------------------------------------------
    def _sampling(self) -> None:
        """Sample every interval (the CPU figures cover the time since the previous one), holders once a second."""
        next_holders = 0.0
        while not self.stopping.wait(self.interval_s):
            sample = self.sampler.sample()
            found = None
            if time.monotonic() >= next_holders:
                found = self._read_holders()
                next_holders = time.monotonic() + HOLDERS_EVERY_S
            self.post_message(Sampled(sample, found, list(self.sources), dict(self.holder_notes)))

    def _read_holders(self) -> Holders:
        """Every source's holders; a source that fails or hangs is retired, and why is kept."""
        found = Holders()
        for kind, source in list(self.sources.items()):
            try:
                got: Holders = self.caller.call(source, CALL_TIMEOUT_S)
            except ImportError:
                why = f"nvidia-ml-py is not installed: {GPU_EXTRA}"
            except Hung as e:
                why = str(e)
            except Exception as e:  # noqa: BLE001 - NVML's errors are its own class per code: said, not raised
                why = one_line(e)
            else:
                found.found += got.found
                found.unreadable += got.unreadable
                continue
            del self.sources[kind]
            self.holder_notes[kind] = why
        return found

    # --- the screen ---------------------------------------------------------------------------
    def on_sampled(self, message: Sampled) -> None:
        s = message.sample
        for what, why in s.unavailable.items():
            self.notify(safe.visible(f"{what} unavailable: {why}"), severity="warning", timeout=8, markup=False)
        self.last = s
        if s.cores:
            self.cores = s.cores
        self.query_one("#cpu", Static).update(self._cpu_text())
        x = time.monotonic() - self.started
        self._point(self.charts["CPU"], x, figures("CPU", s.cpu, s.mem_used, s.mem_total),
                    s.cpu, share(s.mem_used, s.mem_total))
        for d in s.devices:
            name = device_name(d)
            plot = self.charts.get(name) or self._add_chart(name)
            self._point(plot, x, figures(name, d.util, d.mem_used, d.mem_total, *accel_extra(d)),
                        d.util, share(d.mem_used, d.mem_total))
        if message.holders is not None:
            self._show_holders(message.holders, message.asked, message.notes)
        self.taken += 1
        if self.count is not None and self.taken >= self.count:
            self.exit()

    def _chart(self, name: str) -> SeriesPlot:
        plot = SeriesPlot(name, ylim=(0, 100), id=f"chart-{len(self.charts)}")
        for series in SERIES:
            plot.series[series] = deque(maxlen=self.history)  # the chart's window: the last HISTORY_S
        self.charts[name] = plot
        return plot

    def _add_chart(self, name: str) -> SeriesPlot:
        plot = self._chart(name)
        grid = self.query_one("#charts", Grid)
        grid.mount(plot)
        grid.styles.grid_size_columns = 2  # two charts a row: readable at 80 columns
        return plot

    def _point(self, plot: SeriesPlot, x: float, now: list[str], busy: float | None, mem: float | None) -> None:
        plot.title = chart_title(now, plot.size.width)
        for series, y in zip(SERIES, (busy, mem)):
            if y is not None:
                plot.add(series, x, y)
        plot.replot()

    def _cpu_text(self) -> Text:
        s = self.last or Sample()
        head = Text.assemble(("CPU", "bold"), f" ({len(self.cores) or '-'} cores): {fmt.pct(s.cpu)} busy, memory "
                             f"{fmt.bytes_(s.mem_used)}/{fmt.bytes_(s.mem_total)}; a sample every {self.interval_s:g} s")
        if not self.cores:
            return head.append("; per core: -", style="dim")
        return Text("\n").join([head, *core_lines(self.cores, max(CORE_CELL, self.size.width - 2))])

    def _show_holders(self, found: Holders | None, asked: list[str], notes: dict[str, str]) -> None:
        """The processes on the accelerators: found None before the first look."""
        title = self.query_one("#holders-title", Static)
        if not self.kinds:
            title.update(Text("Processes: no accelerator detected here", style="dim"))
            return
        if found is None:
            title.update("Processes on the accelerators: looking")
            return
        rows = [holder_row(h) for h in sorted(found.found, key=lambda h: (h.device, h.pid))]
        if rows != self.holder_rows:  # rebuilt only when they change: the cursor stays where the user put it
            self.holder_rows = rows
            table = self.query_one("#holders", DataTable)
            table.clear()
            table.add_rows([tuple(map(safe.text, row)) for row in rows])  # a command line is anyone's text
        lines = [f"Processes on the accelerators: {len(found.found)}" if found.found
                 else f"No process holds a {' or '.join(asked)}" if asked else ""]
        if found.unreadable:
            lines[0] += f" ({found.unreadable} other users' processes not readable; root sees them)"
        lines += [f"{kind} processes unavailable: {why}" for kind, why in notes.items()]
        title.update(safe.text("\n".join(line for line in lines if line)))


def holder_row(h: Holder) -> tuple[str, ...]:
    return (h.device, str(h.pid), fmt.bytes_(h.memory), h.run or "-", h.command or "-")
