"""The PyTorch backend: its doctor on fake GPU trees, `auto`'s choice, its runtime and its profiler on real torch."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tpulab import backends
from tpulab.backends.torch import BACKEND, TorchProfiler, TorchRuntime, op_category, trace_planes, wheel_build
from tpulab.base.errors import TpulabError
from tpulab.engine.doctor import diagnose
from tpulab.machine import fingerprint
from tpulab.machine.detect import detect

from .helpers import TF, gpu_tree, tree

TORCH_CPU = {"torch": "2.13.0+cpu", "keras": "3.15.1"}


def gpu_verdicts(report):
    return [v for v in diagnose(report) if v.device == "gpu" and v.framework == "torch"]


def test_the_wheel_names_its_build():
    assert wheel_build("2.13.0+cpu") == "cpu"
    assert wheel_build("2.13.0+cu128") == "cuda 12.8" and wheel_build("2.9.1+cu130") == "cuda 13.0"
    assert wheel_build("2.9.1+rocm6.4") == "rocm 6.4"
    assert wheel_build("2.13.0") is None  # PyPI's default: known once probed


def test_doctor_a_cpu_only_pytorch_on_a_gpu_machine(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TORCH_CPU)
    [v] = gpu_verdicts(r)
    assert v.level == "error" and "CPU-only build" in v.message and "2.13.0+cpu" in v.message
    assert "pip install torch" in v.fix
    assert not BACKEND.fitness(r, "gpu").usable


def test_doctor_a_driver_too_old_for_its_cuda(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, {"torch": "2.13.0+cu130"})  # the tree's driver: 535.104.05
    [v] = gpu_verdicts(r)
    assert v.level == "error" and "535.104.05 is too old" in v.message and "CUDA 13.0" in v.message
    assert "580.0 or newer" in v.message


def test_doctor_a_pytorch_that_sees_the_gpu(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, {"torch": "2.13.0+cu128"})
    assert gpu_verdicts(r) == []  # a CUDA 12 build the driver runs: nothing to say until probed
    r.frameworks["torch"] = {"gpus": [{"name": "Tesla T4"}], "build": "cuda 12.8"}
    [v] = gpu_verdicts(r)
    assert v.level == "ok" and "in use by PyTorch" in v.message


def test_auto_keeps_todays_choice_and_takes_torch_only_alone(tmp_path):
    r = detect(tree(tmp_path), {}, {**TF, **TORCH_CPU})
    assert backends.choose("auto", r)[0] == "tensorflow"
    alone = detect(tree(tmp_path), {}, TORCH_CPU)
    name, why = backends.choose("auto", alone)
    assert name == "torch" and "PyTorch" in why
    assert backends.choose("torch", r) == ("torch", "you chose torch")


def test_no_tpu_and_one_device():
    runtime = TorchRuntime()
    with pytest.raises(TpulabError, match="--shards 2: tpulab runs PyTorch on one device"):
        runtime.place("cpu", 2)
    with pytest.raises(TpulabError, match="PyTorch drives no TPU"):
        runtime.place("tpu", 1)
    placement = runtime.place("cpu", 1)
    assert placement.kind == "cpu" and placement.replicas == 1 and str(placement.devices[0]) == "cpu"


def test_the_probe_reports_build_and_threads():
    import torch

    view = TorchRuntime().probe()
    build = f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu"  # this machine's build: either runs here
    assert view["torch"] == torch.__version__ and view["build"] == build and view["gpus"] == []
    assert view["threads"] == torch.get_num_threads() and f"{view['threads']} intra-op threads" in view["also"]
    assert TorchRuntime().memory_stats() is None  # no CUDA: the process's RSS is its memory


HUGE_PAGES_OF_A_TENSOR = """
import torch
t = torch.ones(64 << 18)  # 64 MiB, every page touched
start = t.data_ptr()
lines = open("/proc/self/smaps").read().splitlines()
for i, line in enumerate(lines):
    lo, _, hi = line.partition(" ")[0].partition("-")
    if hi and int(lo, 16) <= start < int(hi, 16):
        print(next(int(l.split()[1]) for l in lines[i + 1:] if l.startswith("AnonHugePages:")))
        break
"""


THP_MODE = fingerprint.huge_pages()  # always, madvise, never, or not readable


@pytest.mark.skipif(THP_MODE not in ("always", "madvise"), reason="this kernel gives no transparent huge pages")
def test_a_torch_workers_large_tensors_sit_on_huge_pages_unless_the_user_says_otherwise(monkeypatch):
    from tpulab.engine.worker import child_env, worker_env

    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)

    def huge_kib(environ: dict[str, str]) -> int:
        out = subprocess.run([sys.executable, "-c", HUGE_PAGES_OF_A_TENSOR], env=child_env(environ),
                             capture_output=True, text=True, check=True)
        return int(out.stdout)

    assert worker_env("torch", "cpu", 1)["THP_MEM_ALLOC_ENABLE"] == "1"
    assert huge_kib(worker_env("torch", "cpu", 1)) >= 2048  # at least one 2 MiB page under the tensor
    if THP_MODE == "madvise":  # (with "always" every large mapping gets them)
        assert huge_kib({"THP_MEM_ALLOC_ENABLE": "0"}) == 0
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    assert "THP_MEM_ALLOC_ENABLE" not in worker_env("torch", "cpu", 1)  # the user's own "0" stays


def test_aten_ops_fall_in_categories():
    assert op_category("aten::addmm") == op_category("aten::mkldnn_convolution") == "matmul/conv"
    assert op_category("aten::clamp_min") == "elementwise" and op_category("aten::t") == "data movement"
    assert op_category("aten::sum") == "reduction" and op_category("aten::empty") == "other"
    assert op_category("aten::_log_softmax") == op_category("aten::native_layer_norm_backward") == "reduction"
    assert op_category("aten::addcdiv_") == op_category("aten::lerp_") == "elementwise"  # Adam's


def test_the_profile_of_a_conv_and_a_linear(tmp_path):
    """Real torch.profiler: each op's self time, its FLOPs on the op that did the work (never on the op the
    profiler put them on), unknown elsewhere, the host gap, and a Chrome trace."""
    import torch
    import torch.nn.functional as F

    x, w, lin = torch.randn(4, 3, 16, 16), torch.randn(8, 3, 3, 3), torch.nn.Linear(64, 10)
    profiler = TorchProfiler()
    with profiler.trace(tmp_path), torch.no_grad():
        for n in range(3):
            with profiler.step(n):
                float(F.conv2d(x, w).relu().sum() + lin(torch.ones(16, 64)).sum())
    p = profiler.read(tmp_path)
    ops = {o.name: o for o in p.ops}
    assert p.steps == 3 and p.profiler == "torch.profiler" and p.where == "/host:CPU"
    assert ops["aten::mkldnn_convolution"].flops == 2 * 4 * 8 * 14 * 14 * 27  # conv2d's count, where its time is
    assert ops["aten::addmm"].flops == 2 * 16 * 64 * 10
    assert ops["aten::conv2d"].flops is None and ops["aten::relu"].flops is None  # unknown, never 0
    assert all(o.bytes is None and o.bound is None for o in p.ops)
    assert 0 <= p.host_gap < p.step_seconds and p.no_flops is None
    assert sum(o.seconds for o in p.ops) + p.host_gap == pytest.approx(p.step_seconds, rel=1e-6)
    trace = json.loads((tmp_path / "torch_trace.json").read_text())
    assert any(e.get("name") == "aten::conv2d" for e in trace["traceEvents"])


def test_the_allocators_peaks_are_a_figure_of_the_record_and_said_in_words():
    """What `TorchRuntime.memory_stats` gives on CUDA (its keys; no GPU here, so the figures are made up): the fullest
    device's peaks travel as an event, land in the record's telemetry and show in its summary and its log."""
    from tpulab.base.events import Allocated, event_from_json
    from tpulab.engine.worker import allocator_peak
    from tpulab.views.narrate import describe, telemetry_rows

    from .helpers import recorder

    cuda = [{"bytes_in_use": 2**30, "peak_bytes_in_use": 2**30, "bytes_limit": 80 * 2**30},
            {"bytes_in_use": 2**30, "peak_bytes_in_use": 3 * 2**30, "bytes_reserved": 2**31,
             "peak_bytes_reserved": 4 * 2**30, "bytes_limit": 80 * 2**30}]
    peak = allocator_peak(cuda)
    assert peak == Allocated(device=1, allocated=3 * 2**30, reserved=4 * 2**30, limit=80 * 2**30)
    assert allocator_peak(None) is None and allocator_peak([{}]) is None  # a CPU's: nothing to say
    assert event_from_json(peak.to_json()) == peak  # as the parent reads it from the worker's stream
    rec = recorder("conv", {"batch_size": 8}, 1e9)
    rec.feed(peak)
    rec.finish("finished")
    t = rec.record().summary.telemetry
    assert (t.allocated_peak, t.reserved_peak) == (3 * 2**30, 4 * 2**30)
    assert ("allocator", "peak 3.0 GiB allocated, 4.0 GiB reserved (the framework's own count: what the run's "
                         "tensors took)") in telemetry_rows(t)
    assert describe(peak, rec) == "allocator peak: 3.0 GiB allocated, 4.0 GiB reserved of 80.0 GiB (device 1)"


def test_a_torch_profile_lines_up_with_an_xla_one_by_category(tmp_path):
    """compare --profile: no aten op shares a name with an HLO fusion, so the conv's time meets the fusion's under
    matmul/conv (the XLA side as `hlo_ops` names a convolution fusion)."""
    import torch
    import torch.nn.functional as F

    from tpulab.base.events import OpRow, Profile
    from tpulab.views.profile import op_moves

    profiler = TorchProfiler()
    x, w = torch.randn(2, 3, 16, 16), torch.randn(4, 3, 3, 3)
    with profiler.trace(tmp_path), torch.no_grad():
        for n in range(2):
            with profiler.step(n):
                float(F.conv2d(x, w).sum())
    ours = profiler.read(tmp_path)
    xla = Profile(steps=2, step_seconds=1e-3, host_gap=1e-4, host_gap_share=0.1,
                  ops=[OpRow(name="convolution.3", type="convolution", category="matmul/conv", calls=1, seconds=8e-4,
                             share=0.8),
                       OpRow(name="reduce.1", type="reduce", category="reduction", calls=1, seconds=1e-4, share=0.1)])
    moves = {m.label.split(" (")[0]: m for m in op_moves(xla, ours)}
    conv = sum(o.seconds for o in ours.ops if o.category == "matmul/conv")
    assert moves["matmul/conv"].matched == "category" and moves["matmul/conv"].b == pytest.approx(conv)
    assert moves["matmul/conv"].a == 8e-4 and moves["reduction"].a == 1e-4 and moves["reduction"].b > 0


def profiled_conv(t0: float, held_up: float) -> list[SimpleNamespace]:
    """One F.conv2d call as torch.profiler lists it (microseconds): its FLOPs on aten::conv2d, its 10 us of work
    in aten::mkldnn_convolution, and `held_up` us of the CPU taken away inside aten::_convolution."""
    def op(name: str, start: float, end: float, children: list[SimpleNamespace], flops: float = 0) -> SimpleNamespace:
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), cpu_children=children,
                               thread=1, flops=flops, device_type="DeviceType.CPU")

    end = t0 + 14 + held_up
    kernel = op("aten::mkldnn_convolution", t0 + 3, t0 + 13, [])
    inner = op("aten::_convolution", t0 + 2, end - 1, [kernel])
    outer = op("aten::convolution", t0 + 1, end - 0.5, [inner])
    return [op("aten::conv2d", t0, end, [outer], flops=4915200.0), outer, inner, kernel]


def test_a_convolutions_flops_stay_on_its_kernel_when_a_call_is_held_up_elsewhere():
    """A noisy machine took the CPU away inside aten::_convolution in one call of three: the FLOPs per call are
    still the kernel's whole count (by each call's self time, that call's went to _convolution: 2/3 of the count)."""
    events = [e for t0, held in ((0, 0), (100, 50), (300, 0)) for e in profiled_conv(t0, held)]
    _, flops = trace_planes(events)
    assert flops == {"aten::mkldnn_convolution": 4915200.0}
