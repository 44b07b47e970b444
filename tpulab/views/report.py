"""`tpulab results report ID... -o FILE.html`: kept runs and sweeps as one page to share.

The page holds the notebook's tables and charts (inline SVG, its style inline): it opens
anywhere, without a network. Several runs are compared, then each is shown; a sweep is shown whole.
"""

from __future__ import annotations

from tpulab.base.events import RunRecord
from tpulab.engine.store import NotKept, Store, StoreError, compare
from tpulab.views import html


def report_page(store: Store, ids: list[str]) -> str:
    runs: list[RunRecord] = []
    sweeps = []
    for i in ids:
        try:
            runs.append(store.get(i))
        except StoreError as run_error:
            try:
                sweeps.append(store.get_sweep(i))
            except StoreError:
                if "matches" in str(run_error):
                    raise
                raise NotKept(f"no run or sweep {i!r} in {store.path}: `tpulab results` and "
                              "`tpulab results sweep` list them") from None
    bodies = [html.sweep_body(sw, store.sweep_runs(sw)) for sw in sweeps]
    if len(runs) > 1:
        bodies.append(html.comparison_body(compare(runs, across_workloads=True)))
        if all(r.summary.profile for r in runs):
            bodies += [html.moves_body(runs[0], r) for r in runs[1:]]
    bodies += [html.run_body(r) for r in runs]
    what = [f"sweep {sw.short_id}" for sw in sweeps] + [f"run {r.short_id}" for r in runs]
    title = ("tpulab: " + ("comparison of " if len(runs) > 1 and not sweeps else "") + ", ".join(what))
    return html.page(title, bodies)
