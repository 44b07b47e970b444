"""One run job built whole, however it is started: the CLI, the lab, the notebook and each sweep point make
their run from it (`tpulab.engine.runner.run_job`), so that every run is judged by the ceilings kept in its store and keeps its trace where
something prunes it. (A front end that sets these after making a run is how the notebook once ran without them.)

The job is what a run is before it starts: its resolved spec, the ceilings it is judged against, where its trace
goes and what only the parent knows for the worker (`Workload.worker_knows`). `RunJob.to_json` is the one form
it travels in: the worker reads it (`tpulab.workloads.running.Handed`), the record keeps its spec's part.
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tpulab.base.home import traces
from tpulab.engine.ceilings import Ceilings, kept_at
from tpulab.engine.spec import RunSpec
from tpulab.workloads.base import PROFILE

UNKEPT_TRACES = Path(tempfile.gettempdir()) / "tpulab-traces"  # no record names these traces, so none prunes them


@dataclass(frozen=True)
class RunJob:
    spec: RunSpec
    ceilings: Ceilings = field(default_factory=Ceilings)  # what the run is judged against
    id: str = field(default_factory=lambda: uuid.uuid4().hex)  # the record's id, and its trace folder's name
    trace_folder: Path | None = None  # where a profiled run's trace goes (None: not profiled)
    knows: Mapping[str, Any] = field(default_factory=dict)  # for the worker alone, never a parameter

    def to_json(self) -> dict[str, Any]:
        """What the worker is handed: the spec's form, with the job's own beside it."""
        return {**self.spec.to_json(), "trace_folder": str(self.trace_folder) if self.trace_folder else None,
                "knows": dict(self.knows)}


def job_of(spec: RunSpec, db: Path | None = None, *, ceilings: Ceilings | None = None, kept: bool = True) -> RunJob:
    """The job of `spec`: judged by `ceilings` where given (a sweep reads them once for all its points), else by
    those the store at `db` keeps (none without one); `kept=False`: no record will name its trace, so it goes to
    the system's temporary folder."""
    judged = ceilings if ceilings is not None else kept_at(db) if db is not None else Ceilings()
    job_id = uuid.uuid4().hex
    folder = (traces() if kept else UNKEPT_TRACES) / job_id if spec.params.get(PROFILE.name) else None
    return RunJob(spec, judged, job_id, folder, spec.workload.worker_knows(spec.params, judged))

