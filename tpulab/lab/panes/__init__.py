"""The lab's panes. Each reads the app's state and asks it to act through `lab()`, typed."""

from __future__ import annotations

from typing import Any, Callable, Protocol, cast

from textual.widget import Widget

from tpulab.base.events import RunRecord
from tpulab.engine.estimate import Estimate
from tpulab.engine.runindex import RunRow, Wanted
from tpulab.engine.store import Store
from tpulab.engine.sweep import Sweep
from tpulab.machine.detect import RuntimeReport
from tpulab.workloads.base import Workload


Candidates = Callable[[Wanted], list[RunRow]]  # the kept runs an estimate may read


class Lab(Protocol):
    """What a pane reads of the lab's app and asks of it (`tpulab.lab.app.TpulabApp` is the one)."""

    report: RuntimeReport
    probing: bool  # the frameworks' own probes are still running
    store: Store
    records: list[RunRecord]  # this session's runs, newest first
    cluster: str | None  # a Ray cluster's address (`tpulab --ray`): the Runtime tab's card is its fleet's

    def busy(self) -> bool: ...  # a run, a sweep or the card is going: said to the user
    def keep_record(self, record: RunRecord) -> None: ...
    def list_record(self, record: RunRecord) -> None: ...  # kept already (a sweep's point)
    def keep_sweep(self, sweep: Sweep) -> object: ...  # a worker saves it
    def estimate_in_background(self, compute: Callable[[Candidates], Estimate],
                               then: Callable[[Estimate], None]) -> None: ...
    async def open_configuration(self, workload: Workload, params: dict[str, Any]) -> None: ...


def lab(widget: Widget) -> Lab:
    """The running tpulab app, typed (a pane is only ever mounted in it)."""
    return cast(Lab, widget.app)
