"""One run job built whole, however it is started: the CLI, the lab, the notebook and each sweep point make
their run here, so that every run is judged by the ceilings kept in its store and keeps its trace where
something prunes it. (A front end that sets these after making a run is how the notebook once ran without them.)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tpulab.engine.ceilings import Ceilings, kept_at
from tpulab.engine.runner import Run, Standby
from tpulab.engine.spec import RunSpec
from tpulab.machine.detect import RuntimeReport

UNKEPT_TRACES = Path(tempfile.gettempdir()) / "tpulab-traces"  # no record names these traces, so none prunes them


def run_job(spec: RunSpec, report: RuntimeReport, db: Path | None = None, *, ceilings: Ceilings | None = None,
            kept: bool = True, standby: Standby | None = None) -> Run:
    """A run ready to start: judged by `ceilings` where given (a sweep reads them once for all its points), else
    by those the store at `db` keeps (none without one); `kept=False`: no record will name its trace, so it goes
    to the system's temporary folder; `standby`: a worker waiting for this run is handed it."""
    run = Run(spec, report, standby)
    run.recorder.ceilings = ceilings if ceilings is not None else kept_at(db) if db is not None else Ceilings()
    if not kept:
        run.traces = UNKEPT_TRACES
    return run
