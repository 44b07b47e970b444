"""One run, however it is started: the same small conv from the command line, the lab (under pilot),
`tpulab.run` and `tpulab.sweep`, against one store that keeps a roofline's ceiling, is judged by that
ceiling every time (the notebook's run once said "no measured ceiling yet" where the CLI's did not)."""

from __future__ import annotations

import json

import pytest

import tpulab
from tpulab.base.events import PHASE_STEADY, Compiled, Device, Event, RunRecord, Sample, Started, Step
from tpulab.engine.ceilings import kept_at
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.lab.app import TpulabApp
from tpulab.lab.panes.run import RunPane
from tpulab.lab.panes.workloads import WorkloadsPane
from tpulab.machine.detect import detect
from tpulab.workloads import registry
from tpulab.workloads.roofline import ROOFLINE
from tpulab.workloads.shared.kernels import Kernel

from .helpers import json_events, run_cli, wait_for

CEILING = 50e9  # FLOP/s: above what the small conv reaches here, below this CPU's spec peak
CONV = {"preset": "smoke", "device": "cpu", "backend": "jax"}


def roofline(report, sizes=(1024, 2048)) -> RunRecord:
    """A finished roofline on this machine's CPU whose float32 curve is flat at CEILING, on a quiet host
    (2 cores: the worker on one, nothing else), built the way a run builds its record."""
    params = {**ROOFLINE.defaults(), "min_size": sizes[0], "max_size": sizes[-1], "dtypes": "float32",
              "device": "cpu", "backend": "jax"}
    rec = RunRecorder(RunSpec(ROOFLINE, params, "jax", "asked for", "cpu"), report)
    events: list[Event] = [Started(workload="roofline", device=Device(kind="cpu", name=report.cpu.model),
                                   dtype="float32", flops_per_step=None, steps_total=ROOFLINE.total_steps(params),
                                   per_replica_batch=0)]
    for n in sizes:
        kernel = Kernel("matmul", "float32", n).to_json()
        events += [Compiled(seconds=1.0),
                   *(Step(step=i, seconds=2 * n**3 / CEILING, phase="matmul", kernel=kernel) for i in range(3))]
    events += [Sample(phase=PHASE_STEADY, cpu=50.0, cores=[50.0, 50.0], process=100.0) for _ in range(3)]
    for e in events:
        rec.feed(e)
    rec.finish("finished")
    return rec.record()


@pytest.mark.slow
async def test_the_same_conv_from_every_front_end_is_judged_by_the_kept_ceiling(db, store):
    report = detect()
    store.save(roofline(report))
    kept = kept_at(db).flops(Device(kind="cpu", name=report.cpu.model), "float32")
    assert kept is not None and kept.value == pytest.approx(CEILING)

    done = run_cli("--run", "conv", "--no-ui", "--json", "--db", str(db),
                   *(f"--{k.replace('_', '-')}={v}" for k, v in CONV.items()), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cli = store.get(json_events(done.stdout)[-1]["id"])

    app = TpulabApp(probe=False, report=report, db=db)
    async with app.run_test(size=(120, 40)) as pilot:
        conv = registry()["conv"]
        params = {**conv.defaults(), **conv.preset("smoke"), "device": "cpu", "backend": "jax"}
        await pilot.press("3")  # the Run tab, which mounts its pane
        await wait_for(pilot, lambda: bool(app.query(RunPane)), 5)
        bar = app.query_one("#run-progress")
        assert not bar.display  # nothing runs yet: no bar says otherwise
        app.post_message(WorkloadsPane.RunRequested(conv, params))
        await wait_for(pilot, lambda: bar.display, 10)
        await wait_for(pilot, lambda: len(app.records) == 1, 120)
        await app.workers.wait_for_complete()  # the lab lists a run at once and keeps it in the background
        lab = store.get(app.records[0].id)

    notebook = tpulab.run("conv", live=False, db=db, **CONV).record
    swept = tpulab.sweep("conv", live=False, db=db, steps=3, batch_size=[8], **CONV).runs[0].record

    runs = {"cli": cli, "lab": lab, "tpulab.run": notebook, "tpulab.sweep": swept}
    for name, r in runs.items():
        s = r.summary
        assert r.status == "finished", (name, r.error)
        assert (s.ceiling_flops, s.ceiling_source) == (pytest.approx(CEILING), kept.source()), name
        assert s.ceiling_fraction == pytest.approx(s.gflops_per_s * 1e9 / CEILING), name
    print(json.dumps({name: r.summary.ceiling_fraction for name, r in runs.items()}))
