"""The results pane: every kept run in a table; mark two or more of one workload to compare."""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Static

from tpulab.core import fmt
from tpulab.views.console import comparison_table
from tpulab.views.roofline import roofline_view
from tpulab.core.events import RunRecord
from tpulab.core.store import StoreError, compare
from tpulab.lab.screens import lab


class ResultsPane(Vertical):
    BINDINGS = [
        Binding("space", "toggle_mark", "Mark run", id="results.mark"),
        Binding("m", "compare", "Compare marked", id="results.compare"),
        Binding("r", "roofline", "Roofline", id="results.roofline"),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.records: list[RunRecord] = []
        self.marked: list[str] = []

    def compose(self) -> ComposeResult:
        from tpulab.lab.widgets.charts import BarPlot  # plotext loads after the first paint (this pane is lazy)

        yield Static("space marks a run, m compares the marked runs (the first marked is the baseline), r draws "
                     "the roofline of the run's device",
                     id="results-help")
        yield DataTable(id="results-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="compare-row"):
            yield Static(id="comparison")
            yield BarPlot(id="compare-chart")
        yield Button("Compare marked", id="compare-button", disabled=True)

    @property
    def table(self) -> DataTable[str]:
        return self.query_one("#results-table", DataTable)

    def on_mount(self) -> None:
        self.table.add_columns("", *fmt.LIST_COLUMNS)
        self.query_one("#compare-chart").display = False
        self.show(lab(self).records)

    def show(self, records: list[RunRecord]) -> None:
        """All runs, newest first."""
        self.records = records
        table = self.table
        table.clear()
        for r in records:
            table.add_row("*" if r.id in self.marked else "", *fmt.list_row(r), key=r.id)
        self._update_button()

    def action_toggle_mark(self) -> None:
        table = self.table
        if not self.records:
            return
        run_id = self.records[table.cursor_row].id
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        table.update_cell(run_id, table.ordered_columns[0].key, "*" if run_id in self.marked else "")
        self._update_button()

    def action_roofline(self) -> None:
        """The measured ceilings of the highlighted run's device, every kept run on it a point."""
        if not self.records:
            return
        record = self.records[self.table.cursor_row]
        self.query_one("#compare-chart").display = False
        view = (roofline_view(self.records, record.device, self.size.width - 2, height=16) if record.device
                else f"run {record.short_id} has no device: nothing to draw")
        self.query_one("#comparison", Static).update(view)

    def _update_button(self) -> None:
        self.query_one("#compare-button", Button).disabled = len(self.marked) < 2

    @on(Button.Pressed, "#compare-button")
    def action_compare(self) -> None:
        from tpulab.lab.widgets.charts import BarPlot

        by_id = {r.id: r for r in self.records}
        chosen = [by_id[i] for i in self.marked if i in by_id]
        try:
            result = compare(chosen)
        except StoreError as e:
            self.notify(str(e), severity="error")
            return
        chart = self.query_one("#compare-chart", BarPlot)
        chart.display = True
        # The table takes what the chart leaves; when that is too narrow it turns to runs as columns.
        self.query_one("#comparison", Static).update(comparison_table(result, max(40, self.size.width * 2 // 3 - 2)))
        chart.show_bars(f"speedup vs the first run (x, by {result.by})",
                        [f"{r.short_id}\n{r.device_label(short=True)} {r.backend}"[:24] for r in result.records],
                        [x or 0 for x in result.speedups])
