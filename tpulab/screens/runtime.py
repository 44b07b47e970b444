"""The runtime pane: what will run where, and what to fix if an accelerator is idle."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..console import runtime_table
from ..runtime.detect import RuntimeReport
from ..runtime.doctor import diagnose


class RuntimePane(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static(id="runtime-report")
        yield Static("TensorFlow: probing in the background...", id="runtime-status")

    def on_mount(self) -> None:
        self.show(self.app.report, probing=self.app.probing)

    def show(self, report: RuntimeReport, probing: bool) -> None:
        self.query_one("#runtime-report", Static).update(runtime_table(report, diagnose(report)))
        tf = report.tensorflow
        status = ("TensorFlow: probing in the background..." if probing else
                  f"TensorFlow: {tf.get('error')}" if tf and "error" in tf else
                  "TensorFlow probed: details above.")
        self.query_one("#runtime-status", Static).update(status)
