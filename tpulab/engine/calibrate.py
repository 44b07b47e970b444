"""`tpulab calibrate`: this machine's noise floor, measured between fresh processes and kept.

A run's steps cannot show how far its level moves from one process to the next (thread placement, memory layout,
the allocator): alike runs on a shared VM differ up to 1.36x process to process while each run's own interval is a
few percent. So the calibration workload (a step of exactly known work) runs in `PROCESSES` fresh processes, two
alike configurations interleaved (data seeds 0 and 1: A B A B), and the spread between their medians is the floor
(`tpulab.base.noise.floor_of`) that a comparison of runs made here takes as its threshold. It is kept per machine,
backend and device kind (`tpulab.engine.floor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tpulab.base.errors import TpulabError
from tpulab.base.noise import floor_of
from tpulab.base.events import RunRecord
from tpulab.engine.ceilings import Ceilings
from tpulab.engine.floor import Calibration
from tpulab.engine.record import now_iso
from tpulab.engine.runner import Run, run_job
from tpulab.engine.spec import RunSpec, resolve
from tpulab.base.timing import median
from tpulab.engine.store import Store, timed_span
from tpulab.machine.detect import RuntimeReport
from tpulab.machine.fingerprint import machine_key
from tpulab.workloads.calibration import CALIBRATION

PROCESSES = 10  # fresh processes: 45 pairs, enough for the 95th percentile of their ratios
SEEDS = (0, 1)  # two alike configurations, interleaved: only their random data differs
AGAIN = 2  # a process run beside other work (`disturbed`) runs again, at most this many times: the floor is the
# spread between processes on this machine, not a neighbour's load (which flags the run it disturbs)


class CalibrationFailed(TpulabError):
    """A calibration process did not finish: no floor is kept from part of one."""


@dataclass(frozen=True)
class Done:
    """One process of the calibration finished: its record, and how many of how many."""

    record: RunRecord
    index: int  # 1-based
    total: int
    again: bool = False  # it was disturbed and runs again


class Calibrate:
    """The calibration's processes, run one after another (`run`); `cancel` stops after the current one."""

    def __init__(self, report: RuntimeReport, backend: str = "auto", device: str = "auto",
                 processes: int = PROCESSES, params: Mapping[str, Any] | None = None) -> None:
        if not 2 <= processes <= 100:
            from tpulab.workloads.base import ParamError

            raise ParamError("processes", f"--processes must be an integer from 2 to 100 (got {processes})")
        self.report = report
        self.processes = processes
        self.specs: list[RunSpec] = [resolve(CALIBRATION, {**(params or {}), "backend": backend, "device": device,
                                                           "seed": seed}, report) for seed in SEEDS]
        self.current: Run | None = None
        self.cancelled = False

    def run(self, on_done: Callable[[Done], None] = lambda d: None) -> Calibration:
        """Every process in turn, then the floor their medians give (not yet kept: `Store.save_calibration`)."""
        records: list[RunRecord] = []
        for i in range(self.processes):
            for tried in range(AGAIN + 1):
                record = self._one(self.specs[i % len(self.specs)], i)
                again = record.summary.has_flag("disturbed") and tried < AGAIN
                on_done(Done(record, i + 1, self.processes, again))
                if not again:
                    break
            records.append(record)
        first = self.specs[0]
        return Calibration(machine=machine_key(self.report.to_dict()), backend=first.backend, device=first.device,
                           made_at=now_iso(), workload=CALIBRATION.name,
                           params={k: v for k, v in first.params.items() if k != "seed"},
                           spread=floor_of([r.median or 0.0 for r in records]),
                           medians=[r.median or 0.0 for r in records],
                           seeds=[int(r.params.get("seed", 0)) for r in records],
                           disturbed=sum(r.summary.has_flag("disturbed") for r in records),
                           span_s=median([timed_span(r) or 0.0 for r in records]))

    def _one(self, spec: RunSpec, i: int) -> RunRecord:
        if self.cancelled:
            raise CalibrationFailed(f"cancelled after {i} of {self.processes} processes: no floor kept")
        self.current = run_job(spec, self.report, ceilings=Ceilings(), kept=False)
        for _ in self.current.events():
            pass
        record = self.current.recorder.record()
        if record.status != "finished" or not record.median:
            raise CalibrationFailed(f"process {i + 1} of {self.processes} {record.status}: "
                                    f"{record.error or 'no steady step'}; no floor kept")
        return record

    def cancel(self) -> None:
        self.cancelled = True
        if self.current is not None:
            self.current.cancel()


def calibrate(report: RuntimeReport, db: Path, backend: str = "auto", device: str = "auto",
              processes: int = PROCESSES, on_done: Callable[[Done], None] = lambda d: None) -> Calibration:
    """Measure this machine's floor and keep it at `db` (replacing the one kept for this machine, backend and device)."""
    found = Calibrate(report, backend, device, processes).run(on_done)
    Store(db).save_calibration(found)
    return found
