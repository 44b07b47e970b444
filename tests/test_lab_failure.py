"""If the lab or top fails after all: exit code 1, one line naming what failed and the file holding the traceback,
the terminal restored, and a run in flight stopped with what it measured kept."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from textual.binding import Binding

from tpulab.engine.store import Store
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.run import RunPane
from tpulab.lab.panes.workloads import WorkloadsPane
from tpulab.lab.top import TopApp
from tpulab.workloads import registry

from .helpers import ROOT, in_a_terminal, wait_for

LINE = re.compile(r"tpulab: the lab failed: ZeroDivisionError: float division by zero \(\S+\.py:\d+ in flops_per_step\); "
                  r"the traceback is in (\S+)\r?\n")

# A plugin workload with a bug in its arithmetic: the lab fails as the form for it plans its first run.
FAULTY = '''
from tpulab.workloads.base import BACKEND, DEVICE, ParamSpec, Workload


class Faulty(Workload):
    name = "faulty"
    title = "Faulty arithmetic"
    summary = "A plugin whose FLOPs per step divide by zero."
    params = (ParamSpec("size", int, 8, "rows and columns", 1, 64), DEVICE, BACKEND)
    presets = {}
    unit = "step"
    runners = {}

    def flops_per_step(self, p):
        return 2.0 * p["size"] ** 3 / 0

    def total_steps(self, p):
        return 2

    def batch_size(self, p):
        return 1

    def check(self, p, limits):
        pass


W = Faulty()
'''


class Broken:
    """A binding whose action raises: the edge where the test makes the app fail (a bug in any handler ends the
    same way)."""

    BINDINGS = [Binding("f12", "break", "Fail, for the test")]

    def action_break(self) -> None:
        raise RuntimeError("a handler's bug")


class BrokenLab(Broken, TpulabApp):
    BINDINGS = [*TpulabApp.BINDINGS, *Broken.BINDINGS]


class BrokenTop(Broken, TopApp):
    BINDINGS = [*TopApp.BINDINGS, *Broken.BINDINGS]


def the_traceback(app, home: Path, subject: str) -> str:
    """The app's failure: its one line names the error, where it was raised and its file under tpulab's home."""
    failure = app.failure
    assert app.return_code == 1 and failure is not None
    line = failure.line()
    assert line.startswith(f"{subject} failed: RuntimeError: a handler's bug (test_lab_failure.py:")
    assert "\n" not in line and f"in action_break); the traceback is in {failure.path}" in line
    assert failure.path is not None and failure.path.parent == home / "crashes"
    return failure.path.read_text()


async def test_a_failing_handler_ends_the_lab_with_one_line_and_its_traceback_in_a_file(db, cpu_machine, tpulab_home):
    app = BrokenLab(probe=False, report=cpu_machine, db=db)
    with pytest.raises(RuntimeError, match="a handler's bug"):  # the pilot raises what ended the app
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f12")
    kept = the_traceback(app, tpulab_home, "the lab")
    assert kept.startswith("Traceback (most recent call last):") and "RuntimeError: a handler's bug" in kept
    assert not app._exit_renderables  # Textual prints nothing over the one line


async def test_a_failing_handler_ends_top_the_same_way(tpulab_home):
    app = BrokenTop([], interval_s=0.25)
    with pytest.raises(RuntimeError, match="a handler's bug"):
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f12")
    assert "RuntimeError: a handler's bug" in the_traceback(app, tpulab_home, "top")


@pytest.mark.slow
async def test_a_run_in_flight_when_the_lab_fails_is_stopped_and_its_steps_kept(db, tpulab_home):
    # the form's backend JAX, the run's: no TensorFlow worker is prestarted beside it
    app = BrokenLab(probe=False, db=db, params={"backend": "jax"})
    conv = registry()["conv"]
    tiny = {**conv.defaults(), "batch_size": 2, "image_size": 16, "filters": 4, "iterations": 100000, "warmup": 1,
            "backend": "jax"}
    with pytest.raises(RuntimeError, match="a handler's bug"):
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: bool(app.query(RunPane)), 10)  # the lazy panes mounted
            app.post_message(WorkloadsPane.RunRequested(conv, tiny))  # as the form's Run asks
            await wait_for(pilot, lambda: bool(app.query(RunPane)) and app.query_one(RunPane).running
                           and app.query_one(RunPane).run.recorder.steps_done() >= 3)
            run = app.query_one(RunPane).run
            await pilot.press("f12")
    assert all(not h.alive for h in run.handles)
    kept = Store(db).get(run.recorder.id)
    assert kept.status == "cancelled" and kept.error == "the lab failed: RuntimeError: a handler's bug"
    assert len(kept.steps) >= 3


def test_a_plugin_that_fails_the_lab_exits_1_with_one_line_and_the_terminal_restored(tmp_path, tpulab_home):
    (tmp_path / "faulty_plugin.py").write_text(FAULTY)
    info = tmp_path / "site" / "faulty_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faulty-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tpulab.workloads]\nfaulty = faulty_plugin:W\n")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env |= {"TERM": "xterm-256color", "PYTHONPATH": os.pathsep.join(map(str, [ROOT, tmp_path, tmp_path / "site"]))}
    code, out = in_a_terminal("--run", "faulty", env=env)
    assert code == 1, out
    found = LINE.search(out)
    assert found, out[-2000:]
    assert "Traceback" not in out
    opened, closed = out.rfind("\x1b[?1049h"), out.rfind("\x1b[?1049l")  # the alternate screen, left before the line
    assert 0 <= opened < closed < found.start()
    assert out.rfind("\x1b[?25h") > out.rfind("\x1b[?25l")  # the cursor shown again
    assert out[found.end():].strip() == ""  # the line is the last word
    kept = Path(found.group(1))
    assert kept.parent == tpulab_home / "crashes" and "ZeroDivisionError" in kept.read_text()
