"""The profile's plumbing without a framework: the shared parameters on every workload (the CLI, the
notebook, the lab's form), sweeps that never vary them, a profile said per step, and each op judged
against known ceilings."""

from __future__ import annotations

import pytest
from textual.widgets import Switch

from tpulab.base.ceilings import MEASURED, Sourced
from tpulab.base.events import OTHER_OPS, OpRow, Profile
from tpulab.engine.profile_verdicts import Levers, Roof, judge, roof
from tpulab.engine.sweep import Sweep, build_grid
from tpulab.lab.app import TpulabApp
from tpulab.lab.widgets.param_form import ParamForm
from tpulab.workloads import registry
from tpulab.workloads.base import COMPILE, PROFILE, PROFILE_STEPS, SHARED, ParamError, Params, ParamSpec, Workload
from tpulab.workloads.conv import CONV
from tpulab.workloads.running import per_step

from .helpers import SIZE


def test_every_workload_takes_the_shared_parameters_once_after_its_own():
    """The shared parameters, or those a workload declares it shares (serve: none, its work is a server's)."""
    assert [p.name for p in SHARED] == ["profile", "profile_steps", "compile"]
    for w in registry().values():
        names, tail = [p.name for p in w.params], [p.name for p in w.shared]
        assert names[len(names) - len(tail):] == tail, w.name
        assert names.count("profile") == ("profile" in tail)
    assert [w.name for w in registry().values() if w.shared != SHARED] == ["serve"]


def test_a_plugins_workload_gets_them_from_the_base():
    class Mine(Workload):
        name, title, summary = "mine", "Mine", "a plugin's own"
        params = (ParamSpec("size", int, 4, "how big", 1, 8),)

        def flops_per_step(self, p: Params) -> float | None:
            return None

        def total_steps(self, p: Params) -> int:
            return 1

    assert Mine.params == (Mine.params[0], PROFILE, PROFILE_STEPS, COMPILE)
    assert Mine().parse({"profile": "on", "profile_steps": "5"})["profile_steps"] == 5


def test_a_sweep_profiles_every_point_and_never_varies_profiling(cpu_machine):
    grid, _ = build_grid(CONV, {"batch_size": "4,8", "profile": True, "profile_steps": "2"}, cpu_machine, "smoke")
    assert grid.axes == {"batch_size": [4, 8]}
    assert all(p.params["profile"] and p.params["profile_steps"] == 2 for p in Sweep(grid, cpu_machine).points)
    with pytest.raises(ParamError, match="--profile-steps takes one value for every point of a sweep, never a "
                                         "list"):
        build_grid(CONV, {"batch_size": "4,8", "profile_steps": "2,3"}, cpu_machine, "smoke")


def test_a_call_of_several_steps_is_said_per_step():
    """Keras's steps_per_execution: one annotated call ran 4 steps; shares stay, the rest is divided."""
    call = Profile(steps=3, step_seconds=0.08, host_gap=0.02, host_gap_share=0.25,
                   ops=[OpRow(name="dot", calls=4, seconds=0.06, share=0.75, flops=8e9, bytes=4e6)])
    each = per_step(call, 4)
    assert (each.steps, each.step_seconds, each.host_gap, each.host_gap_share) == (12, 0.02, 0.005, 0.25)
    assert [(o.calls, o.seconds, o.share, o.flops, o.bytes) for o in each.ops] == [(1, 0.015, 0.75, 2e9, 1e6)]


ROOF = Roof(Sourced(1e12, "a roofline", MEASURED), Sourced(1e11, "a roofline", MEASURED))  # ridge 10 FLOP/B


def test_each_op_is_set_against_the_ceiling_its_intensity_puts_it_under():
    dot = OpRow(name="dot.1", type="dot", category="matmul/conv", seconds=0.004, share=0.4, flops=2e9, bytes=1e8)
    add = OpRow(name="add.2", type="add", category="elementwise", seconds=0.005, share=0.5, flops=1e6, bytes=4e8)
    unknown = OpRow(name="custom", seconds=0.001, share=0.1)
    judged = judge(Profile(steps=3, step_seconds=0.01, host_gap=0.0, host_gap_share=0.0, ops=[dot, add, unknown]),
                   ROOF, Levers(precision="bfloat16", fusion="XLA"))
    d, a, u = judged.ops
    assert (d.gflops_per_s, d.intensity, d.bound, d.ceiling_fraction) == (500, 20, "compute", 0.5)
    assert (a.gbytes_per_s, a.intensity, a.bound, a.ceiling_fraction) == (80, 0.0025, "memory", 0.8)
    assert (u.gflops_per_s, u.gbytes_per_s, u.bound, u.ceiling_fraction) == (None, None, None, None)
    assert [f.code for f in judged.verdicts] == ["one-op-dominates", "memory-bound-ops"]
    dominates, memory = (f.message for f in judged.verdicts)
    assert "add.2 (add) takes 50% of the step, at 80% of the bandwidth ceiling: it runs near the ceiling" in dominates
    assert "1 op(s) under the bandwidth line take 50% of the step" in memory and "precision" in memory
    assert judged.against == "compute 1000.0 GFLOP/s (a roofline); memory 100.0 GB/s (a roofline)"


def test_a_step_spent_waiting_on_the_host_says_so_with_its_figures():
    judged = judge(Profile(steps=3, step_seconds=0.02, host_gap=0.012, host_gap_share=0.6,
                           ops=[OpRow(name="dot", seconds=0.008, share=0.4)]), Roof())
    [flag] = judged.verdicts
    assert flag.code == "host-bound" and "60% of the step (12.0 ms of 20.0 ms)" in flag.message
    assert "input pipeline" in flag.message and "larger batch" in flag.message


def test_without_a_bandwidth_an_op_is_set_against_the_compute_ceiling_alone():
    judged = judge(Profile(ops=[OpRow(name="dot", seconds=0.01, share=0.3, flops=1e9, bytes=1e6)]),
                   Roof(flops=Sourced(1e12, "a roofline", MEASURED)))
    assert (judged.ops[0].bound, judged.ops[0].ceiling_fraction) == (None, 0.1)
    assert judged.against == "compute 1000.0 GFLOP/s (a roofline)" and judge(Profile(), Roof()).against is None
    assert judged.ops[0].ceiling == "the compute ceiling"


def test_a_verdict_reads_a_ceilings_kind_not_its_words():
    """A spec figure whose words look measured, and a measured one whose words start 'spec:': each op's fraction
    is named by the kind alone."""
    op = OpRow(name="dot", seconds=0.01, share=0.3, flops=1e9, bytes=1e6)
    spec = judge(Profile(ops=[op]), Roof(flops=Sourced(1e12, "roofline run ab12cd34")))
    measured = judge(Profile(ops=[op]), Roof(flops=Sourced(1e12, "spec: of a test", MEASURED)))
    assert (spec.ops[0].ceiling, measured.ops[0].ceiling) == ("the spec peak", "the compute ceiling")
    assert spec.against == "compute 1000.0 GFLOP/s (spec: roofline run ab12cd34)"


def test_the_row_that_sums_the_rest_is_no_op_to_rate():
    """`other` holds many ops: it gets no rate, no side of the ridge, and no part in memory-bound-ops."""
    rest = OpRow(name=OTHER_OPS, category="other", seconds=0.006, share=0.6, flops=1e6, bytes=4e8)
    judged = judge(Profile(steps=3, step_seconds=0.01, host_gap=0.0, host_gap_share=0.0,
                           ops=[OpRow(name="dot", seconds=0.004, share=0.4, flops=2e9, bytes=1e8), rest]), ROOF)
    assert judged.ops[1] == rest and judged.ops[0].ceiling == "the compute ceiling"
    assert "memory-bound-ops" not in [f.code for f in judged.verdicts]


def test_a_run_over_several_devices_sets_each_op_against_one_devices_ceilings():
    """The op table is one device's (the trace's first, its program's FLOPs): four H100s' ops are set against
    one H100's 989.4 TFLOP/s and 3.35 TB/s (its datasheet), not four times that."""
    from tpulab.base.events import Device
    from tpulab.engine.ceilings import Ceilings

    four = roof(Device(kind="gpu", name="NVIDIA H100 80GB HBM3", replicas=4, hosts=2, machines=2), "bfloat16",
                Ceilings(), None)
    assert four.flops and four.bandwidth and (four.flops.value, four.bandwidth.value) == (989.4e12, 3.35e12)
    assert (four.flops.kind, four.bandwidth.kind) == ("spec", "spec")


def test_the_notebook_and_the_command_line_take_profile_from_the_one_declaration():
    from tpulab.cli.main import build_parser
    from tpulab.notebook.api import resolve

    spec, _ = resolve("conv", "smoke", {"profile": True, "profile_steps": 2, "backend": "jax"})
    assert (spec.params["profile"], spec.params["profile_steps"]) == (True, 2)
    run = ["--run", "conv", "--profile", "--profile-steps", "4"]
    args = build_parser("conv", run).parse_args(run)
    assert (args.profile, args.profile_steps) == (True, "4")
    sweep = ["sweep", "conv", "--profile"]
    swept = build_parser("conv", sweep).parse_args(sweep)
    assert swept.profile is True  # a flag in a sweep too, not a list


async def test_the_labs_form_has_a_profile_switch(cpu_machine):
    app = TpulabApp(probe=False, report=cpu_machine, workload="conv")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        form, switch = app.query_one(ParamForm), app.query_one("#param-profile", Switch)
        assert switch.value is False and form.params is not None and form.params["profile"] is False
        switch.value = True
        await pilot.pause()
        assert form.params is not None and (form.params["profile"], form.params["profile_steps"]) == (True, 3)
