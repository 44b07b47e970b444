"""The runtime pane: what will run where, and what to fix if an accelerator is idle."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from tpulab.engine.doctor import diagnose
from tpulab.lab.panes import lab
from tpulab.machine.detect import RuntimeReport
from tpulab.views.console import runtime_table


class RuntimePane(VerticalScroll, can_focus=True):
    def compose(self) -> ComposeResult:
        yield Static(id="runtime-report")
        yield Static(id="runtime-status")

    def on_mount(self) -> None:
        self.show(lab(self).report, probing=lab(self).probing)

    def show(self, report: RuntimeReport, probing: bool) -> None:
        self.query_one("#runtime-report", Static).update(runtime_table(report, diagnose(report), probing))
        failed = [f"{name}: {view['error']}" for name, view in report.frameworks.items() if "error" in view]
        status = ("frameworks: probing in the background..." if probing else
                  "; ".join(failed) if failed else "frameworks probed: details above.")
        self.query_one("#runtime-status", Static).update(status)
