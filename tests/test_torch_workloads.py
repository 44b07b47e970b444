"""tpulab's own workloads on torch, on real torch at tiny sizes: the runners called in this process as a worker
calls them (no worker needed), and through the real command where the record is what is checked."""

from __future__ import annotations

import numpy as np
import pytest

from tpulab import backends
from tpulab.backends.torch import TorchRuntime
from tpulab.base.errors import UsageError
from tpulab.base.events import Compiled, Started, Step
from tpulab.base.timing import conv_flops, conv_output_size
from tpulab.workloads import registry
from tpulab.workloads.decode import DECODE
from tpulab.workloads.decode.arithmetic import parameters
from tpulab.workloads.running import CancelToken

from .helpers import json_events, run_cli, watched, worker_imports


def run_here(workload: str, preset: str = "smoke", **values) -> list:
    w = registry()[workload]
    p = w.parse({"backend": "torch", "device": "cpu", **values}, preset)
    load = w.runner(backends.get("torch"))
    events: list = []
    load()(w, p, events.append, CancelToken(), TorchRuntime())
    return events


@pytest.mark.parametrize("size, kernel, stride", [(32, 5, 2), (31, 5, 2), (8, 3, 1), (7, 4, 3), (4, 5, 1)])
def test_same_padding_gives_tensorflows_output_size(size, kernel, stride):
    import torch

    from tpulab.workloads.conv.torch import conv, same_padding

    out = conv(torch.ones(1, 1, size, size), torch.ones(1, 1, kernel, kernel), stride, same_padding(size, kernel, stride))
    assert out.shape[-1] == out.shape[-2] == conv_output_size(size, kernel, stride, "SAME")


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_the_conv_sums_what_jax_sums(padding):
    """The same images and kernels, in each framework's layout: the same convolution, to float32's precision."""
    import jax.numpy as jnp
    import torch

    from tpulab.workloads.conv.jax import conv_sum
    from tpulab.workloads.conv.torch import conv, inputs, same_padding

    p = {"seed": 3, "batch_size": 2, "channels": 3, "image_size": 11, "filters": 4, "kernel_size": 5}
    images, kernel = inputs(p)
    pad = same_padding(11, 5, 2) if padding == "SAME" else (0, 0)
    ours = float(conv(torch.from_numpy(images), torch.from_numpy(kernel), 2, pad).sum())
    theirs = float(conv_sum(jnp.asarray(images.transpose(0, 2, 3, 1)), jnp.asarray(kernel.transpose(2, 3, 1, 0)), 2,
                            padding))
    assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-2)


@pytest.mark.parametrize("mode", ["sharded", "naive"])
def test_conv_runs_every_step_and_fetches_each(mode):
    events = run_here("conv", mode=mode)
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.flops_per_step == conv_flops(8, 32, 32, 3, 16, 5, 2, "SAME")  # the smoke preset's conv
    assert [e.phase for e in events if isinstance(e, Compiled)] == [""]  # its one phase: it times no `predict`
    steps = [e for e in events if isinstance(e, Step)]
    assert {e.phase for e in steps} == {""}
    assert len(steps) == 1 + 5 and sum(e.warmup for e in steps) == 1  # warm-up 1, then 5 timed iterations
    assert len({round(float(e.value), 3) for e in steps}) == 1  # the same work each time, its value fetched


def test_compile_both_is_one_line_for_a_one_program_workload():
    with pytest.raises(UsageError, match=r"^--compile both: conv times one program per run; run it with --compile "
                                         r"off, then --compile on, and compare the two \(tpulab results compare\)$"):
        run_here("conv", compile="both")


@pytest.mark.slow
def test_conv_on_torch_profiled_from_the_command_line():
    r = run_cli("run", "conv", "--backend", "torch", "--preset", "smoke", "--profile", "--no-ui", "--no-save", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json_events(r.stdout)[-1]
    assert out["backend"] == "torch" and out["summary"]["gflops_per_s"] > 0
    ops = {op["name"]: op for op in out["summary"]["profile"]["ops"]}
    conv = ops["aten::mkldnn_convolution"]  # where the time is, and the FLOPs F.conv2d's count put on aten::conv2d
    assert conv["category"] == "matmul/conv" and conv["flops"] == pytest.approx(conv_flops(8, 32, 32, 3, 16, 5, 2, "SAME"))
    assert np.isclose(sum(op["share"] for op in ops.values()) + out["summary"]["profile"]["host_gap_share"], 1.0)


@pytest.mark.parametrize("run", [("conv", "--backend", "torch"), ("model", "--model", "examples/models/torch_mlp.py:build")])
def test_more_than_one_shard_on_torch_is_one_line_before_any_worker(run):
    """Refused as the run is resolved, exit 2, whether torch was asked for or an nn.Module chose it."""
    r = run_cli("run", *run, "--preset", "smoke", "--shards", "2", "--no-ui", "--no-save", env={"COLUMNS": "400"})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("tpulab: error: --shards means nothing on --backend torch: tpulab runs PyTorch on one "
                                "device per process (--processes N: DistributedDataParallel, one device each): leave "
                                "--shards out, or use --backend jax to shard")


def test_the_roofline_times_each_matmul_and_copy():
    events = run_here("roofline", dtypes="float32")
    steps = [e for e in events if isinstance(e, Step)]
    kinds = {(e.kernel["kind"], e.kernel["size"]) for e in steps}
    assert kinds == {("matmul", 16), ("matmul", 32), ("matmul", 64), ("copy", 4)}  # the smoke preset's sizes
    assert [e.phase for e in events if isinstance(e, Compiled)] == ["matmul", "matmul", "matmul", "copy"]
    assert all(e.seconds > 0 for e in steps)


def test_the_copy_negates_in_place_and_the_matmul_is_torchs():
    import torch

    from tpulab.workloads.shared.kernels import Kernel
    from tpulab.workloads.shared.kernels_torch import builder

    build = builder(0, torch.device("cpu"))
    copy = build(Kernel("copy", "float32", 1))
    first = copy()
    assert copy() is first and float(first[0]) == 1.0  # negated twice, the same array each call
    product = build(Kernel("matmul", "float32", 8))()
    assert product.shape == (8, 8) and product.dtype == torch.float32


@pytest.mark.slow
def test_decode_on_torch_verified_from_the_command_line(tmp_path):
    """PyTorch's own module (its worker loads no Keras), the formula's model, verified and profiled."""
    r = run_cli("run", "decode", "--preset", "smoke", "--backend", "torch", "--verify", "--profile", "--no-ui",
                "--no-save", "--json", env=watched(tmp_path / "home"))
    assert r.returncode == 0, r.stderr[-3000:]
    events = json_events(r.stdout)
    out = events[-1]
    assert out["backend"] == "torch" and out["status"] == "finished"
    assert events[0]["model"]["parameters"] == parameters(DECODE.preset("smoke"))
    assert [(w["code"], w["keras"], w["tensorflow"]) for w in worker_imports(tmp_path / "home")] == [(0, False, [])]
    assert out["summary"]["figures"]["verified"] < 1e-3  # the cached logits against a full forward pass
    assert out["summary"]["profile"]["profiler"] == "torch.profiler" and out["summary"]["profile"]["ops"]
