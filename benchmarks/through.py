"""What every benchmark that sets tpulab against a baseline shares: one run through tpulab's own path.

The run is resolved and driven as `tpulab run` drives it (its own worker process, nothing kept), so
the figure set against a hand-written loop is the one a user would get.
"""

from __future__ import annotations

from typing import Any


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
