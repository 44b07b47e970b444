"""The worker started before the run: framework imported while the user edits, handed the run on Enter,
replaced when the backend changes, gone when the lab closes, never on a TPU host."""

from __future__ import annotations

import pytest

from tpulab.base.events import Step
from tpulab.engine.runner import Standby, run_job
from tpulab.engine.spec import resolve
from tpulab.lab.app import TpulabApp
from tpulab.machine.detect import detect
from tpulab.workloads import registry

from .helpers import cpu_only, v5e_tree

SMOKE = {"batch_size": 8, "image_size": 16, "filters": 4, "iterations": 2, "warmup": 0, "device": "cpu"}


@pytest.fixture(autouse=True)
def standby_on(monkeypatch):
    """The lab's default (the suite's conftest turns it off for every other test)."""
    monkeypatch.setenv("TPULAB_STANDBY", "on")


def conv(backend: str) -> dict:
    return {**registry()["conv"].defaults(), **SMOKE, "backend": backend}


@pytest.mark.slow
def test_a_standby_worker_is_replaced_when_the_backend_changes_and_handed_the_run():
    report = detect()
    standby = Standby()
    try:
        standby.want(resolve("conv", conv("jax"), report), report)
        first = standby.handle
        assert first is not None and first.ready.wait(120)  # framework imported, no run yet
        standby.want(resolve("conv", conv("tensorflow"), report), report)
        assert first.proc.wait(10) is not None  # replaced: the JAX worker is gone
        assert standby.handle is not None and standby.handle.env["KERAS_BACKEND"] == "tensorflow"
        standby.want(resolve("conv", conv("jax"), report), report)
        waiting = standby.handle
        assert waiting is not None and waiting.ready.wait(120)
        # A run the standby was not made for starts its own worker and leaves the standby waiting (first: no
        # standby for the next run imports JAX beside it).
        other = run_job(resolve("conv", {**conv("jax"), "shards": 2}, report), report, standby=standby)
        list(other.events())
        assert other.handles[0] is not waiting and standby.handle is waiting
        run = run_job(resolve("conv", conv("jax"), report), report, standby=standby)
        steps = [e for e in run.events() if isinstance(e, Step)]
        assert run.handles[0] is waiting and standby.handle is None  # handed, not started anew
        assert run.recorder.status == "finished" and len(steps) == 2
    finally:
        standby.drop()
    assert standby.handle is None


def test_no_standby_on_a_tpu_host_or_across_processes(tmp_path):
    tpu = detect(v5e_tree(tmp_path / "tpu"), {}, {"jax": "0.10.2"})
    standby = Standby()
    standby.want(resolve("conv", {**conv("jax"), "device": "auto"}, tpu), tpu)
    assert standby.handle is None  # one process holds a TPU: the worker starts when the run does
    cpu = cpu_only(tmp_path / "cpu", {"jax": "0.10.2"})
    standby.want(resolve("conv", {**conv("jax"), "processes": 2, "shards": 2}, cpu), cpu)
    assert standby.handle is None


def test_no_standby_where_the_user_turned_it_off(tmp_path, monkeypatch):
    """TPULAB_STANDBY=off: no worker imports a framework while the user edits (the run starts its own)."""
    monkeypatch.setenv("TPULAB_STANDBY", "off")
    cpu = cpu_only(tmp_path / "cpu", {"jax": "0.10.2"})
    standby = Standby()
    standby.want(resolve("conv", conv("jax"), cpu), cpu)
    assert standby.handle is None
    monkeypatch.setenv("TPULAB_STANDBY", "on")
    assert Standby.fits(resolve("conv", conv("jax"), cpu), cpu)  # the same run, with it on: one would start


@pytest.mark.slow
async def test_the_lab_prestarts_the_forms_worker_hands_it_the_run_and_ends_it_on_exit(tmp_path):
    app = TpulabApp(probe=False, workload="conv", db=tmp_path / "r.db", report=cpu_only(tmp_path, {"jax": "0.10.2"}),
                    params={**SMOKE, "backend": "jax"})
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        waiting = app.standby.handle
        assert waiting is not None and waiting.env["KERAS_BACKEND"] == "jax"
        await pilot.press("ctrl+r")
        await pilot.pause()
        from tpulab.lab.panes.run import RunPane

        pane = app.query_one(RunPane)
        assert pane.run is not None and pane.run.handles[0] is waiting
        while pane.running:
            await pilot.pause(0.2)
        assert pane.run.recorder.status == "finished"
        await pilot.pause(0.5)
        again = app.standby.handle  # ready for the next run
        assert again is not None and again is not waiting
    assert again.proc.wait(10) is not None  # the lab closed: no worker left behind
