"""Reading a trace: the op table from the tiny traces each framework wrote (checked in, read by either
framework), from synthetic GPU and TPU traces laid out as XProf documents them, from optimized HLO; then
real traces taken here, on tiny shapes, with both frameworks."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpulab.backends.hlo_ops import hlo_ops
from tpulab.backends.profile_table import OTHER, TOP_OPS, OpInfo, TraceEvent, TraceLine, TracePlane, build, by_name, category
from tpulab.base.events import OTHER_OPS, Profile

TRACES = Path(__file__).resolve().parent / "data" / "traces"
JAX_HLO = (TRACES / "jax" / "step.hlo.txt").read_text()
SLEEP_S = 0.005  # make_traces.py's host sleep inside each step
M, K, N = 64, 32, 48  # make_traces.py's matmul: (M x K) @ (K x N)
# make_traces.py's step as each framework runs it on the CPU: op -> (category, calls per step)
JAX_TABLE = {"ynn_fusion": ("matmul/conv", 1), "wrapped_exponential": ("elementwise", 1),
             "wrapped_reduce-window": ("reduction", 1), "wrapped_reduce": ("reduction", 1),
             "wrapped_copy": ("data movement", 1)}  # the transpose: a layout copy
TF_TABLE = {"MatMul": ("matmul/conv", 1), "Exp": ("elementwise", 1), "Sum": ("reduction", 1),
            "transpose": ("data movement", 1)}


# A tiny Keras model: its step's matmul and conv FLOPs (forward, and the gradients a step needs: the conv's
# filter, the dense layer's weights and input), per step
BATCH, CONV_OUT, DENSE_IN, CLASSES = 4, 6 * 6 * 4, 6 * 6 * 4, 10
CONV = 2 * BATCH * CONV_OUT * 3 * 3 * 3  # 3x3 filters over 3 channels, 4 of them, on 8x8 images
DENSE = 2 * BATCH * DENSE_IN * CLASSES
KERAS_STEP = """
import json, sys, tempfile
from pathlib import Path
import numpy as np, keras
from tpulab.backends import get
profiler = get(keras.backend.backend()).load().profiler()
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3), keras.layers.Flatten(),
                          keras.layers.Dense(10)])
model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x, y = rng.random((4, 8, 8, 3), dtype=np.float32), rng.integers(0, 10, 4)
model.train_on_batch(x, y)
folder = Path(tempfile.mkdtemp())
with profiler.trace(folder):
    for n in range(3):
        with profiler.step(n):
            model.train_on_batch(x, y)
profile = profiler.read(folder, profiler.keras_programs(model, x, y))
print(json.dumps([[op.name, op.type, op.category, op.flops] for op in profile.ops]))
"""


def reader(name: str):  # noqa: ANN201 - a Profiler class
    """One framework's profiler; either reads either's trace."""
    if name == "jax":
        pytest.importorskip("jax")
        from tpulab.backends.jax import JaxProfiler

        return JaxProfiler()
    pytest.importorskip("tensorflow")
    from tpulab.backends.tensorflow import TensorFlowProfiler

    return TensorFlowProfiler()


def table(profile: Profile) -> dict[str, tuple[str, float]]:
    return {op.name: (op.category, op.calls) for op in profile.ops}


def adds_up(profile: Profile) -> None:
    """The op times and the host gap make the step, and the ops alone no more than it."""
    assert profile.step_seconds is not None and profile.host_gap is not None
    ops = sum(op.seconds for op in profile.ops)
    assert ops <= profile.step_seconds
    assert ops + profile.host_gap == pytest.approx(profile.step_seconds)
    assert sum(op.share for op in profile.ops) + profile.host_gap_share == pytest.approx(1.0)


# --- the checked-in traces ---------------------------------------------------------------------
@pytest.mark.parametrize("framework", ["jax", "tf"])
def test_the_jax_trace_reads_to_its_op_table_with_either_framework(framework):
    profile = reader(framework).read(TRACES / "jax", [JAX_HLO])
    assert (profile.steps, profile.where, profile.no_flops) == (3, "/host:CPU", None)
    assert table(profile) == JAX_TABLE
    adds_up(profile)
    assert profile.host_gap >= SLEEP_S  # each step slept on the host, no op running
    matmul = next(op for op in profile.ops if op.name == "ynn_fusion")
    assert (matmul.type, matmul.flops, matmul.bytes) == ("custom fusion", 2 * M * N * K, 4 * (M * K + K * N + M * N))


@pytest.mark.parametrize("framework", ["jax", "tf"])
def test_the_tensorflow_trace_reads_to_its_op_table_with_either_framework(framework):
    profile = reader(framework).read(TRACES / "tf")
    assert (profile.steps, profile.where) == (3, "/host:CPU")
    assert table(profile) == TF_TABLE
    assert {op.name: op.type for op in profile.ops}["MatMul"] == "_MklMatMul"
    adds_up(profile)
    assert profile.host_gap >= SLEEP_S
    assert all(op.flops is None for op in profile.ops)
    assert profile.no_flops  # says why


def test_without_its_program_a_jax_trace_names_its_ops_and_says_why_flops_are_unknown():
    profile = reader("jax").read(TRACES / "jax")
    assert {name: cat for name, (cat, _) in table(profile).items()} == {
        **{name: cat for name, (cat, _) in JAX_TABLE.items()}, "ynn_fusion": OTHER}  # a fusion's name says nothing
    assert all(op.flops is None for op in profile.ops) and profile.no_flops and "program" in profile.no_flops


@pytest.mark.parametrize("name, expected", [
    ("_MklMatMul", "matmul/conv"), ("MatMul", "matmul/conv"), ("dot.3", "matmul/conv"),
    ("_MklFusedConv2D", "matmul/conv"), ("Conv2DBackpropFilter", "matmul/conv"), ("convolution.1", "matmul/conv"),
    ("Exp", "elementwise"), ("wrapped_exponential", "elementwise"), ("AddV2", "elementwise"),
    ("loop_multiply_fusion.2", "elementwise"), ("convert_compare_fusion", "elementwise"),
    ("ResourceApplyAdam", "elementwise"), ("transpose", "data movement"), ("_MklTranspose", "data movement"),
    ("copy.12", "data movement"), ("GatherV2", "data movement"), ("Sum", "reduction"),
    ("wrapped_reduce-window", "reduction"), ("FusedBatchNormV3", "reduction"), ("MaxPool", "reduction"),
    ("all-reduce.1", "collective"), ("NcclAllReduce", "collective"), ("MemcpyH2D", "host-to-device"),
    ("infeed", "host-to-device"), ("fusion.12", "other"), ("Const", "other")])
def test_an_ops_type_or_name_puts_it_in_its_category(name, expected):
    assert category(name) == expected


# --- synthetic traces, laid out as XProf documents them -----------------------------------------
def event(name: str, start_us: float, length_us: float, **stats: object) -> TraceEvent:
    return TraceEvent(name, start_us * 1e3, length_us * 1e3, stats)


def host(*steps: tuple[float, float], lines: tuple[TraceLine, ...] = ()) -> TracePlane:
    """The host plane: one step annotation per (start, length) in us, as StepTraceAnnotation leaves it."""
    annotations = [event("train", start, length, step_num=n, _r=1) for n, (start, length) in enumerate(steps)]
    return TracePlane("/host:CPU", [TraceLine("python", annotations), *lines])


def test_a_gpu_trace_is_read_from_the_first_gpus_streams():
    streams = [TraceLine("Stream #7(Compute)", [
                   event("sm90_xmma_gemm", 10, 40, hlo_op="fusion.3", hlo_module="jit_step"),
                   event("loop_exp_fusion", 60, 10, hlo_op="exp_fusion", hlo_module="jit_step")]),
               TraceLine("Stream #9(MemcpyH2D)", [event("MemcpyH2D", 0, 30)]),
               TraceLine("XLA Modules", [event("jit_step", 0, 80)])]  # a derived line: spans the others
    other_gpu = TracePlane("/device:GPU:1", [TraceLine("Stream #7(Compute)", [event("gemm", 10, 90)])])
    profile = build([other_gpu, host((0, 100)), TracePlane("/device:GPU:0", streams)])
    assert profile.where == "/device:GPU:0"
    seconds = {op.name: round(op.seconds * 1e6, 6) for op in profile.ops}
    # 10-30 us: the copy and the gemm ran at once and share it; then the gemm alone, the exp alone
    assert seconds == {"fusion.3": 30.0, "MemcpyH2D": 20.0, "exp_fusion": 10.0}
    assert {op.name: op.category for op in profile.ops}["MemcpyH2D"] == "host-to-device"
    assert profile.host_gap == pytest.approx(40e-6)  # nothing ran at 50-60 us and 70-100 us
    adds_up(profile)


def test_a_tpu_trace_is_read_from_its_xla_ops_line_with_the_programs_flops():
    tpu = TracePlane("/device:TPU:0", [
        TraceLine("XLA Modules", [event("jit_step(1)", 0, 90)]),
        TraceLine("XLA Ops", [event("dot.1", 5, 50), event("add.2", 60, 20)]),
        TraceLine("Steps", [event("0", 0, 100)])])
    hlo = """HloModule jit_step, is_scheduled=true

ENTRY %main (a: bf16[128,256], b: bf16[256,512]) -> bf16[128,512] {
  %a = bf16[128,256]{1,0} parameter(0)
  %b = bf16[256,512]{1,0} parameter(1)
  %dot.1 = bf16[128,512]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %add.2 = bf16[128,512]{1,0} add(%dot.1, %dot.1)
}
"""
    profile = build([host((0, 100)), tpu], by_name(hlo_ops([hlo])))
    assert profile.where == "/device:TPU:0"
    rows = {op.name: op for op in profile.ops}
    assert (rows["dot.1"].category, rows["dot.1"].flops) == ("matmul/conv", 2 * 128 * 512 * 256)
    assert rows["dot.1"].bytes == 2 * (128 * 256 + 256 * 512 + 128 * 512)
    assert (rows["add.2"].category, rows["add.2"].flops) == ("elementwise", 128 * 512)
    assert profile.host_gap == pytest.approx(30e-6)


def test_nested_events_are_counted_once_and_the_median_step_is_the_table():
    compute = TraceLine("tf_Compute/1", [
        event("outer:PartitionedCall", 10, 50),
        event("StatefulPartitionedCall/inner/MatMul:MatMul", 20, 30),  # inside the call, named without its callers
        event("ExecutorState::Process", 5, 80),  # not a kernel
        event("Exp:Exp", 210, 20), event("Exp:Exp", 420, 60), event("Exp:Exp", 500, 5)])  # one a step, and one
    profile = build([host((0, 100), (200, 100), (400, 150), lines=(compute,))])
    assert profile.steps == 3 and profile.step_seconds == pytest.approx(100e-6)  # the median: the second step
    assert table(profile) == {"Exp": ("elementwise", 1)}
    profile = build([host((0, 100), lines=(compute,))])
    assert {op.name: round(op.seconds * 1e6, 6) for op in profile.ops} == {"inner/MatMul": 30.0, "outer": 20.0}
    adds_up(profile)


def test_the_top_ops_are_kept_and_the_rest_summed_in_one_row():
    ops = [event(f"op{i}:Add", i * 10, 10 - i * 0.1) for i in range(TOP_OPS + 5)]
    profile = build([host((0, 1000), lines=(TraceLine("tf_Compute/1", ops),))])
    assert [op.name for op in profile.ops] == [f"op{i}" for i in range(TOP_OPS)] + [OTHER_OPS]
    rest = profile.ops[-1]
    assert rest.calls == 5 and rest.seconds * 1e6 == pytest.approx(sum(10 - i * 0.1 for i in range(TOP_OPS, TOP_OPS + 5)))
    adds_up(profile)


def test_a_fused_kernel_is_named_by_what_it_fuses_never_by_its_last_node_alone():
    """oneDNN's Conv2D+BiasAdd+Elu runs under the Elu's name: with the graph, named by its nodes; without, by
    its kernel's op and that node. A kernel of one op keeps its name (a batch norm is no fusion)."""
    compute = TraceLine("tf_Compute/1", [event("sequential_1/conv2d_1/Elu:_MklNativeFusedConv2D", 0, 50),
                                         event("sequential_1/dense/BiasAdd:_FusedMatMul", 50, 10),
                                         event("sequential_1/bn/FusedBatchNormV3:_MklFusedBatchNormV3", 60, 10)])
    planes = [host((0, 100), lines=(compute,))]
    assert [op.name for op in build(planes).ops] == [
        "sequential_1/conv2d_1: Conv2D…Elu, fused", "sequential_1/bn/FusedBatchNormV3",
        "sequential_1/dense: MatMul…BiasAdd, fused"]
    graph = {"sequential_1/conv2d_1/Elu": OpInfo("_MklNativeFusedConv2D", "matmul/conv", 1e6, 1e4,
                                                 ("Conv2D", "BiasAdd", "Elu"))}
    named = build(planes, lambda module, name, kind: graph.get(name)).ops[0]
    assert (named.name, named.type, named.flops) == ("sequential_1/conv2d_1: Conv2D+BiasAdd+Elu, fused",
                                                     "_MklNativeFusedConv2D", 1e6)


def test_a_trace_without_step_annotations_has_no_table():
    profile = build([TracePlane("/host:CPU", [TraceLine("t", [event("Exp:Exp", 0, 10)])])], no_flops="why")
    assert (profile.steps, profile.ops, profile.step_seconds) == (0, [], None)


# --- FLOPs and bytes from optimized HLO --------------------------------------------------------
def test_hlo_gives_a_convolutions_and_a_gpu_gemms_flops():
    hlo = """HloModule jit_net, is_scheduled=true

%fused_conv (p0: f32[8,32,32,3], p1: f32[5,5,3,16]) -> f32[8,16,16,16] {
  %p0 = f32[8,32,32,3]{3,2,1,0} parameter(0)
  %p1 = f32[5,5,3,16]{3,2,1,0} parameter(1)
  ROOT %convolution.1 = f32[8,16,16,16]{3,2,1,0} convolution(%p0, %p1), window={size=5x5 stride=2x2 pad=1_2x1_2}, dim_labels=b01f_01io->b01f
}

ENTRY %main (x: f32[8,32,32,3], w: f32[5,5,3,16], a: f32[64,32], b: f32[32,48]) -> (f32[8,16,16,16], f32[64,48]) {
  %x = f32[8,32,32,3]{3,2,1,0} parameter(0)
  %w = f32[5,5,3,16]{3,2,1,0} parameter(1)
  %a = f32[64,32]{1,0} parameter(2)
  %b = f32[32,48]{1,0} parameter(3)
  %conv_fusion = f32[8,16,16,16]{3,2,1,0} fusion(%x, %w), kind=kOutput, calls=%fused_conv
  %cublas-gemm.1 = (f32[64,48]{1,0}, s8[4194304]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config=CONFIG
  %get-tuple-element = f32[64,48]{1,0} get-tuple-element(%cublas-gemm.1), index=0
  ROOT %tuple = (f32[8,16,16,16]{3,2,1,0}, f32[64,48]{1,0}) tuple(%conv_fusion, %get-tuple-element)
}
""".replace("CONFIG", '{"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],'
                       '"rhs_contracting_dimensions":["0"]}}}')
    ops = hlo_ops([hlo])
    conv, gemm = ops[("jit_net", "conv_fusion")], ops[("jit_net", "cublas-gemm.1")]
    assert (conv.type, conv.category, conv.flops) == ("output fusion", "matmul/conv", 2 * 8 * 16 * 16 * 16 * 5 * 5 * 3)
    assert conv.bytes == 4 * (8 * 32 * 32 * 3 + 5 * 5 * 3 * 16 + 8 * 16 * 16 * 16)
    assert (gemm.type, gemm.category, gemm.flops) == ("__cublas$gemm", "matmul/conv", 2 * 64 * 48 * 32)
    assert ("jit_net", "convolution.1") not in ops  # inside the fusion: never named in a trace


def test_an_op_whose_work_is_not_counted_has_unknown_flops_never_0():
    """A loop (and what it runs), a sort: FLOPs unknown (None), so no rate is made of them; a copy does none."""
    hlo = """HloModule jit_loop, is_scheduled=true

%body (p: (s32[], f32[64])) -> (s32[], f32[64]) {
  %p = (s32[], f32[64]) parameter(0)
  ROOT %t = (s32[], f32[64]) tuple(%p)
}

%cond (p: (s32[], f32[64])) -> pred[] {
  %p = (s32[], f32[64]) parameter(0)
  ROOT %c = pred[] constant(false)
}

ENTRY %main (x: f32[64], i: s32[]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  %i = s32[] parameter(1)
  %init = (s32[], f32[64]) tuple(%i, %x)
  %while.1 = (s32[], f32[64]) while(%init), condition=%cond, body=%body
  %sort.2 = f32[64]{0} sort(%x), dimensions={0}, to_apply=%cond
  ROOT %copy.3 = f32[64]{0} copy(%x)
}
"""
    ops = hlo_ops([hlo])
    assert ops[("jit_loop", "while.1")].flops is None and ops[("jit_loop", "sort.2")].flops is None
    assert ops[("jit_loop", "copy.3")].flops == 0


UNREADABLE = """HloModule jit_odd, is_scheduled=true

ENTRY %main (a: f32[64,32], b: f32[32,48], x: f32[8,32,32,3]) -> f32[64,48] {
  %a = f32[64,32]{1,0} parameter(0)
  %b = f32[32,48]{1,0} parameter(1)
  %x = f32[8,32,32,3]{3,2,1,0} parameter(2)
  %dot.1 = f32[64,48]{1,0} dot(%a, %b), rhs_contracting_dims={0}
  %outer.2 = f32[64,32,32,48]{3,2,1,0} dot(%a, %b), lhs_contracting_dims={}, rhs_contracting_dims={}
  %convolution.3 = f32[8,16,16,16]{3,2,1,0} convolution(%x, %w), window={size=5x5}, dim_labels=b01f_01io->b01f
  %convolution.4 = f32[8,16,16,16]{3,2,1,0} convolution(%x, %x), window={size=5x5}
  ROOT %add.5 = f32[64,48]{1,0} add(%dot.1, %dot.1)
}
"""


def test_a_dot_or_convolution_whose_shapes_cannot_be_read_has_unknown_flops_never_0():
    """A dot that does not say which dimensions it contracts; convolutions whose kernel is not in the module or
    whose dimension labels are missing: FLOPs unknown, and the bytes of one reading a value not in the module."""
    ops = hlo_ops([UNREADABLE])
    assert ops[("jit_odd", "dot.1")].flops is None
    assert ops[("jit_odd", "outer.2")].flops == 2 * 64 * 32 * 32 * 48  # contracts nothing: an outer product
    assert ops[("jit_odd", "convolution.3")].flops is None and ops[("jit_odd", "convolution.3")].bytes is None
    assert ops[("jit_odd", "convolution.4")].flops is None
    assert ops[("jit_odd", "convolution.4")].bytes == 4 * (2 * 8 * 32 * 32 * 3 + 8 * 16 * 16 * 16)
    assert ops[("jit_odd", "a")].bytes == 4 * 64 * 32  # a parameter: its "(0)" is no value read


def test_no_table_csv_or_verdict_shows_0_for_what_is_unknown(tmp_path):
    """The unreadable dot and convolution, traced and judged: '-' in the table, empty in the CSV, and the
    verdict on the op that takes the step says its distance to the ceiling is unknown."""
    from tpulab.base.ceilings import Sourced
    from tpulab.engine.profile_verdicts import Roof, judge
    from tpulab.views.profile import op_cells, op_line, write_csv

    tpu = TracePlane("/device:TPU:0", [TraceLine("XLA Ops", [
        event("dot.1", 0, 60), event("convolution.3", 60, 20), event("add.5", 80, 10)])])
    roof = Roof(Sourced(1e12, "a test"), Sourced(1e11, "a test"))
    profile = judge(build([host((0, 100)), tpu], by_name(hlo_ops([UNREADABLE]))), roof)
    rows = {op.name: op for op in profile.ops}
    for name in ("dot.1", "convolution.3"):
        op = rows[name]
        assert (op.flops, op.gflops_per_s, op.intensity, op.ceiling_fraction, op.bound) == (None,) * 5
        cells = dict(zip(("op", "category", "calls", "ms/step", "share", "GFLOP/s", "ceiling", "bound"),
                         op_cells(op)))
        assert (cells["GFLOP/s"], cells["ceiling"], cells["bound"]) == ("-", "-", "-")
        assert op_line(op).endswith(" ms")  # no fraction of a ceiling
    assert rows["add.5"].gflops_per_s == pytest.approx(64 * 48 / 10e-6 / 1e9)  # what is known is still rated
    write_csv(profile, tmp_path / "ops.csv")
    with (tmp_path / "ops.csv").open() as f:
        written = {row["name"]: row for row in csv.DictReader(f)}
    for field in ("flops", "gflops_per_s", "intensity", "ceiling_fraction", "bound"):
        assert written["dot.1"][field] == "" and written["convolution.3"][field] == ""
    assert written["dot.1"]["bytes"] != "" and written["convolution.3"]["bytes"] == ""
    dominates = next(v for v in profile.verdicts if v.code == "one-op-dominates")
    assert dominates.message.startswith("dot.1 (dot) takes 60% of the step; its FLOPs or bytes are unknown")


# --- real traces, taken here -------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_jax_trace_gives_the_matmuls_flops_and_the_hosts_sleep(tmp_path):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    profiler = reader("jax")
    a, b = jnp.ones((M, K)), jnp.ones((K, N))
    step = jax.jit(lambda a, b: jnp.exp(a @ b).T)
    jax.block_until_ready(step(a, b))
    with profiler.trace(tmp_path):
        for n in range(3):
            with profiler.step(n):
                jax.block_until_ready(step(a, b))
                time.sleep(0.02)
    profile = profiler.read(tmp_path, [step.lower(a, b).compile()])
    assert list(tmp_path.glob("**/perfetto_trace.json.gz"))  # opens in ui.perfetto.dev
    assert profile.steps == 3 and profile.host_gap >= 0.02
    adds_up(profile)
    matmuls = [op for op in profile.ops if op.category == "matmul/conv"]
    assert [(op.calls, op.flops) for op in matmuls] == [(1, 2 * M * N * K)]
    assert any(op.category == "elementwise" for op in profile.ops)


@pytest.mark.slow
def test_a_real_tensorflow_trace_gives_the_graphs_flops_and_the_hosts_sleep(tmp_path):
    tf = pytest.importorskip("tensorflow")
    profiler = reader("tf")

    @tf.function
    def step(a, b, c):  # noqa: ANN001, ANN202
        return tf.exp(tf.matmul(a, b)), tf.transpose(c)

    args = (tf.ones((M, K)), tf.ones((K, N)), tf.ones((N, M)))
    step(*args)
    with profiler.trace(tmp_path):
        for n in range(3):
            with profiler.step(n):
                [t.numpy() for t in step(*args)]
                time.sleep(0.02)
    profile = profiler.read(tmp_path, [step.get_concrete_function(*args)])
    assert profile.steps == 3 and profile.host_gap >= 0.02 and profile.no_flops is None
    adds_up(profile)
    rows = {op.name: op for op in profile.ops}
    assert {name: (op.category, op.calls) for name, op in rows.items()} == {
        "MatMul": ("matmul/conv", 1), "Exp": ("elementwise", 1), "transpose": ("data movement", 1)}
    assert (rows["MatMul"].flops, rows["Exp"].flops) == (2 * M * N * K, M * N)
    assert rows["transpose"].bytes == 2 * 4 * N * M + 2 * 4  # the matrix read and written, the permutation read


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_keras_steps_programs_give_its_matmuls_and_convolutions_flops(backend):
    """keras_programs: JAX's step compiled as fit compiles it (its HLO names are the trace's); TensorFlow's
    graph, through the kernels it fuses (a convolution with its bias runs as one, under the bias's name)."""
    pytest.importorskip(backend)
    out = subprocess.run([sys.executable, "-c", KERAS_STEP], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parent.parent,
                         env={**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    matmuls = [(name, kind, flops) for name, kind, category, flops in rows if category == "matmul/conv"]
    assert all(flops is not None for _, _, flops in matmuls), matmuls
    if backend == "jax":  # forward, the filter's gradient; the dense layer forward, its weights' and input's
        assert sorted(flops for _, _, flops in matmuls) == sorted([CONV, CONV, DENSE, DENSE, DENSE])
    else:  # each forward layer fused with its bias (its additions counted too), by oneDNN where the CPU has
        # AVX-512 (TensorFlow turns it on there) and by TensorFlow's own fused kernels elsewhere
        forward = {layer: (kind, flops) for name, kind, flops in matmuls if not name.startswith("gradient_tape")
                   for layer in ("conv2d", "dense") if f"/{layer}" in name}
        if "Fused" not in forward["conv2d"][0]:
            pytest.skip(f"this TensorFlow runs {forward['conv2d'][0]}: no fused kernel")
        fusions = {"conv2d": ("_MklNativeFusedConv2D", "_FusedConv2D"), "dense": ("_MklNativeFusedMatMul", "_FusedMatMul")}
        assert all(forward[layer][0] in kinds for layer, kinds in fusions.items()), forward
        assert {layer: flops for layer, (_, flops) in forward.items()} == {"conv2d": CONV + BATCH * CONV_OUT,
                                                                           "dense": DENSE + BATCH * CLASSES}
        fused = sorted(name.partition(": ")[2] for name, kind, _ in matmuls if "Fused" in kind)
        assert fused == ["Conv2D+BiasAdd, fused", "MatMul+BiasAdd, fused"]  # named by what each fuses
