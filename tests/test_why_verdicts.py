"""A why starts with the machine: the load beside a run comes before what its threads did, and advice names only
what this hardware and framework can use (bfloat16 where units compute in it, XLA on TensorFlow and JAX,
torch.compile on PyTorch, more threads where a core was idle)."""

from __future__ import annotations

import dataclasses

from tpulab.base.ceilings import MEASURED, Sourced
from tpulab.base.events import OpRow, Profile, Sample, Telemetry
from tpulab.engine.profile_verdicts import Levers, Roof, judge
from tpulab.engine.telemetry_summary import SampleKeeper, summarize, verdicts

from .helpers import FIXED_CPU, fixed_machine, make_record

AMX = dataclasses.replace(FIXED_CPU, features=[*FIXED_CPU.features, "avx512f", "avx512_bf16", "amx_bf16"])
ROOF = Roof(Sourced(1e12, "a roofline", MEASURED), Sourced(1e11, "a roofline", MEASURED))  # ridge 10 FLOP/B


def step(dot_flops: float = 6e8) -> Profile:
    """A step whose dot takes 60% (by default at 10% of the compute ceiling: far from it) and whose add, under the
    bandwidth line, 40%: the two verdicts whose levers include a precision and fusion."""
    dot = OpRow(name="dot.1", type="dot", seconds=0.006, share=0.6, flops=dot_flops, bytes=1e6)
    add = OpRow(name="add.2", type="add", seconds=0.004, share=0.4, flops=1e6, bytes=4e7)
    return Profile(steps=3, step_seconds=0.01, host_gap=0.0, host_gap_share=0.0, ops=[dot, add])


def advice(profile: Profile | None) -> dict[str, str]:
    assert profile is not None
    return {f.code: f.message for f in profile.verdicts}


def dominates(backend: str = "tensorflow", cpu=FIXED_CPU) -> str:
    """The one-op-dominates verdict of a recorded CPU run (its dot at about 15% of FIXED_CPU's spec peak)."""
    report = dataclasses.replace(fixed_machine(), cpu=cpu)
    profile = Profile(steps=3, step_seconds=0.01, ops=[OpRow(name="dot.1", type="dot", seconds=0.005, share=0.5,
                                                             flops=1e8, bytes=1e6)])
    return advice(make_record(backend=backend, report=report, profile=profile).summary.profile)["one-op-dominates"]


def test_a_cpu_without_bfloat16_units_is_never_advised_bfloat16():
    for flops in (6e8, 4.8e9):  # far from the ceiling, and near it (80%)
        plain = advice(judge(step(flops), ROOF, Levers.of("jax", "cpu", "float32", FIXED_CPU)))
        assert set(plain) == {"one-op-dominates", "memory-bound-ops"}
        assert not any("bfloat16" in m or "precision" in m for m in plain.values()), plain
        units = advice(judge(step(flops), ROOF, Levers.of("jax", "cpu", "float32", AMX)))
        assert all("a lower precision (bfloat16" in m for m in units.values()), units
    near = advice(judge(step(4.8e9), ROOF, Levers.of("jax", "cpu", "float32", FIXED_CPU)))["one-op-dominates"]
    assert near.endswith("it runs near the ceiling, so only less work makes the step faster: a smaller model")
    # the recorder judges by the CPU the run met
    assert "bfloat16" not in dominates() and "a lower precision (bfloat16)" in dominates(cpu=AMX)
    # a GPU or a TPU has the units; a run in 16 bits already is not told to use them
    assert Levers.of("jax", "gpu", "float32", FIXED_CPU).precision == "bfloat16 or float16"
    assert Levers.of("jax", "tpu", "float32", None).precision == "bfloat16"
    assert Levers.of("jax", "tpu", "bfloat16", None).precision is None
    assert Levers.of("tensorflow", "cpu", "mixed_bfloat16", AMX).precision is None


def test_a_pytorch_run_is_never_advised_xla():
    torch = advice(judge(step(), ROOF, Levers.of("torch", "gpu", "float32", None)))
    assert not any("XLA" in m for m in torch.values()), torch
    assert "fusing it with its neighbours (torch.compile)" in torch["one-op-dominates"]
    assert "fusion (torch.compile keeps values on chip)" in torch["memory-bound-ops"]
    for backend in ("tensorflow", "jax"):
        xla = advice(judge(step(), ROOF, Levers.of(backend, "gpu", "float32", None)))
        assert "fusing it with its neighbours (XLA)" in xla["one-op-dominates"] and "torch.compile" not in str(xla)
    plugin = advice(judge(step(), ROOF, Levers.of("someones-plugin", "gpu", "float32", None)))
    assert not any("XLA" in m or "torch.compile" in m or "fusi" in m for m in plugin.values()), plugin
    # the recorder judges by the run's backend
    assert "XLA" not in dominates("torch") and "(torch.compile)" in dominates("torch")
    assert "(XLA)" in dominates("jax") and "torch.compile" not in dominates("jax")


def telemetry(cores: int, cpu_cores: float, process: float = 100.0, **more) -> Telemetry:
    """A CPU run's telemetry: the host busy `cpu_cores` cores in all, the worker `process`% of one, its core 99%."""
    return Telemetry(samples=10, cores=cores, cpu_mean=100 * cpu_cores / cores, busiest_core_mean=99.0,
                     process_mean=process, **more)


def test_every_core_busy_is_never_called_one_busy_core():
    """Issue 64, item 16: 'one core was busy (100% on average) ... (all cores averaged 100%)' said one thing and its
    opposite. With every core busy, the worker's one among them, the load verdict says so and what cannot be told."""
    full = verdicts(telemetry(2, 2.0))  # the worker's one core, and other processes' the other, all at 100%
    assert [v.code for v in full] == ["busy-machine"]
    assert full[0].message.endswith("; every core was busy (all cores averaged 100%), the worker's 100% of one among "
                                    "them, so how many threads the work runs on cannot be told here")
    assert "one core was busy" not in " ".join(v.message for v in full)
    many = verdicts(telemetry(8, 7.6))  # 95% of 8 cores
    assert [v.code for v in many] == ["busy-machine"] and "every core was busy" in many[0].message
    # a busy machine with a core to spare keeps its one-busy-core verdict, and says no 'every core'
    half = verdicts(telemetry(2, 1.54))
    assert [v.code for v in half] == ["busy-machine", "one-busy-core"] and "every core" not in half[0].message


def test_a_run_beside_a_busy_process_gets_the_load_verdict_first():
    busy = verdicts(telemetry(2, 1.54))  # 0.54 of 2 cores were other processes'
    assert [v.code for v in busy] == ["busy-machine", "one-busy-core"]
    assert busy[0].message.startswith("more than a quarter of the 2 cores (0.54) were other processes'")
    assert "the work runs on one thread" not in busy[1].message
    assert "other processes held the rest (0.54 cores), so no core was idle for a second thread" in busy[1].message
    quiet = verdicts(telemetry(2, 1.04))
    assert [v.code for v in quiet] == ["one-busy-core"] and quiet[0].message.endswith("the work runs on one thread")
    # busy, but with cores left idle: the one thread is the work's
    idle = verdicts(telemetry(8, 4.0))
    assert [v.code for v in idle] == ["busy-machine", "one-busy-core"]
    assert idle[1].message.endswith("the work runs on one thread")
    # before the input pipeline too: an idle GPU beside a busy host
    fed = verdicts(telemetry(2, 1.6, process=90, device_kind="gpu", device_util_mean=10.0))
    assert [v.code for v in fed] == ["busy-machine", "input-bound", "one-busy-core"]
    # as the recorder summarises a run's samples
    keeper = SampleKeeper()
    for i in range(6):
        keeper.add(Sample(t=0.5 * i, phase="steady", cpu=77.0, cores=[99.0, 55.0], process=100.0))
    summary = summarize(keeper, None, None)
    assert summary is not None and [v.code for v in summary.verdicts] == ["busy-machine", "one-busy-core"]
