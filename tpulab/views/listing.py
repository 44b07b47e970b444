"""A run in one line of a listing: the CLI's, the lab's, the notebook's and the HTML page's."""

from __future__ import annotations

from tpulab.backends import registry
from tpulab.base import fmt, safe
from tpulab.engine.runindex import RunRow


def backend_short(name: str) -> str:
    """A backend's short name for narrow tables (its own word for it)."""
    found = registry().get(name)
    return found.short if found else name


def list_row(row: RunRow) -> tuple[str, ...]:
    """A run in one line of a listing (the CLI's and the lab's): LIST_COLUMNS; a user's model by its name. Each
    cell is visible text (`safe.visible`), so its length is its width; a terminal still shows it as Text."""
    cells = (row.short_id, row.started_at[5:16].replace("T", " "), row.model or row.workload, row.status,
             row.device_short, backend_short(row.backend), str(row.batch_size or "-"), fmt.gflop(row.flops_per_step),
             (row.sweep or "")[:SWEEP_TAG], fmt.seconds(row.median_s) + (DISTURBED if row.disturbed else ""),
             fmt.percent(row.peak_fraction))
    return tuple(map(safe.visible, cells))


DISTURBED = "!"  # the mark of a run timed while other work used the machine
DISTURBED_KEY = "! disturbed: other processes used the machine while it was timed (`results show` says how much)"
SWEEP_TAG = 5  # characters of a sweep's id in a listing: enough for `--sweep ID` to pick its runs
