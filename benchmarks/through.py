"""What every benchmark that sets tpulab against a baseline shares: one run through tpulab's own path, and the
baseline's process set up as that run's worker is.

The run is resolved and driven as `tpulab run` drives it (its own worker process, nothing kept), so
the figure set against a hand-written loop is the one a user would get.
"""

from __future__ import annotations

import os
from typing import Any


def as_worker(backend: str, device: str = "cpu") -> dict[str, str]:
    """The environment of a hand-written baseline's process: as tpulab's worker for `backend` has it (how its
    threads wait, which pages its allocator asks for, its host devices), so that the two differ in their code
    alone."""
    from tpulab.backends import get

    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **get(backend).worker_env(device, 1, os.environ)}


def record(workload: str, values: dict[str, Any]) -> Any:
    """The record of a run of `workload` with `values`, once it finished; a run that did not finish stops
    the benchmark with its error."""
    from tpulab.engine.runner import run_job
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    report = detect()
    run = run_job(resolve(workload, values, report), report)
    for _ in run.events():
        pass
    rec = run.recorder.record()
    assert rec.status == "finished", rec.error
    return rec
