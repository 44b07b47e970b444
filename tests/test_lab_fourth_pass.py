"""What a newcomer meets at 80x24, the fourth pass (issue 64, items 13 to 15): the Sweep tab opens a sweep kept
from the command line, the Runtime tab shows llama.cpp by its own version and without Keras, and in Results End
goes to the last run and the backend stays at 80 columns. The real app under the pilot, a real Store in tmp_path,
records built through the real recorder."""

from __future__ import annotations

import dataclasses

import pytest
from textual.widgets import DataTable

from tpulab.engine.sweep import build_grid
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.sweep import SweepPane
from tpulab.views.sweep import findings_lines, kept_findings
from tpulab.workloads import registry

from .helpers import ReplayedSweep, make_record, results_tab, text, wait_for

SMALL = (80, 24)


def cells(table: DataTable, row: int) -> list[str]:
    return [str(c) for c in table.get_row_at(row)]


# --- 13. the Sweep tab opens a kept sweep ------------------------------------------------------------------------
async def test_the_sweep_tab_lists_and_opens_a_sweep_kept_from_the_command_line(store, db, cpu_machine):
    """`tpulab sweep ...` kept a sweep; the lab's Sweep tab said "No sweep yet". Now it lists the kept sweeps, Enter
    opens one (its points, its findings, as `tpulab results sweep ID` reads them), l lists them again."""
    grid, _ = build_grid(registry()["conv"], {"batch_size": "8,16,32", "device": "cpu"}, cpu_machine, steps=3)
    sweep = ReplayedSweep(grid, cpu_machine, lambda p: make_record(batch=p.values["batch_size"], median=0.005))
    for _ in sweep.drive(store):  # kept as the command line keeps it
        pass
    kept = store.get_sweep(sweep.id)
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("5")
        await wait_for(pilot, lambda: bool(app.query(SweepPane)), 5)
        pane = app.query_one(SweepPane)
        table = pane.query_one("#sweep-table", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1, 10)
        header = " ".join(text(pane.query_one("#sweep-header")).split())
        assert "No sweep yet" not in header and "1 kept sweep(s), newest first: Enter opens one" in header
        assert cells(table, 0)[0] == sweep.id[:8] and "conv" in cells(table, 0)
        assert table.virtual_size.width <= table.scrollable_content_region.width  # fitted at 80 columns
        await pilot.press("enter")
        points = sum(bool(p.records) for p in sweep.points)
        await wait_for(pilot, lambda: pane.opened is not None and table.row_count == points, 10)
        await pilot.pause()
        header = " ".join(text(pane.query_one("#sweep-header")).split())
        assert f"sweep {sweep.id[:8]} of conv over batch_size (3)" in header and f"{points}/{points} point(s)" in header
        said = " ".join(text(pane.query_one("#sweep-findings")).split())
        opened = pane.opened[1]
        assert all(" ".join(line.split()) in said for line in findings_lines(kept_findings(kept, opened), ["batch_size"]))
        assert sorted(cells(table, i)[1] for i in range(points)) == sorted(str(p.values["batch_size"]) for p in opened)
        await pilot.press("l")
        await wait_for(pilot, lambda: pane.kept is not None and table.row_count == 1, 10)
        assert pane.opened is None and "1 kept sweep(s)" in text(pane.query_one("#sweep-header"))


async def test_the_sweep_tab_with_nothing_kept_says_how_to_make_one(db, cpu_machine):
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("5")
        await wait_for(pilot, lambda: bool(app.query(SweepPane)) and app.query_one(SweepPane).kept == [], 10)
        assert "No sweep yet: in Workloads, tick sweep" in text(app.query_one("#sweep-header"))


# --- 14. the Runtime tab: llama.cpp by its version, and no Keras ------------------------------------------------
async def test_the_runtime_tab_shows_llama_cpp_probed_by_its_version_without_keras(cpu_machine):
    """The Runtime tab read 'llama.cpp | None (Keras -)' once probed: its view names its version by its package
    (xllamacpp), and Keras is no part of it. The real probe, in a worker, as the lab's own asks it."""
    from importlib import metadata

    from tpulab.engine.worker import probe

    try:
        version = metadata.version("xllamacpp")
    except metadata.PackageNotFoundError:
        pytest.skip("llama.cpp is not installed")
    report = dataclasses.replace(cpu_machine, packages={**cpu_machine.packages, "xllamacpp": version,
                                                        "gguf": metadata.version("gguf"), "keras": "3.15.1"})
    view = probe("llamacpp")
    app = TpulabApp(probe=False, report=report)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        app._probed("llamacpp", view, True)  # what the lab's probe thread hands it
        await pilot.pause()
        shown = text(app.query_one("#runtime-report"))
        [line] = [line for line in shown.splitlines() if "llama.cpp" in line]
        assert f"│ {version}, GPUs: none" in line and "Keras" not in line and "None" not in line, line


# --- 15. Results: End goes to the last run, and the backend stays at 80 columns ---------------------------------
async def test_end_goes_to_the_last_run_and_the_backend_is_kept_at_80_columns(store, db, cpu_machine):
    for i in range(30):
        store.save(make_record(median=0.01 * (i + 1)))
    for backend in ("llamacpp", "tensorflow"):  # one workload's runs, on two backends: told apart by it alone
        store.save(make_record(workload="decode", backend=backend))
    app = TpulabApp(probe=False, db=db, report=cpu_machine)
    async with app.run_test(size=SMALL) as pilot:
        table = await results_tab(pilot, 32)
        headers = [str(c.label) for c in table.columns.values()]
        assert "backend" in headers, headers
        at = headers.index("backend")
        assert [cells(table, 0)[at], cells(table, 1)[at]] == ["tf", "llama.cpp"]
        assert table.virtual_size.width <= table.scrollable_content_region.width
        await pilot.press("end")
        assert table.cursor_row == table.row_count - 1 == 31
        await pilot.press("home")
        assert table.cursor_row == 0
