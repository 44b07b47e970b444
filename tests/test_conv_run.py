"""The conv workload end to end: the real CLI, a real worker, real TensorFlow, tiny shapes."""

from __future__ import annotations

import math
import signal
import subprocess
import sys

import pytest

from tpulab.base.errors import EXIT_CANCELLED, EXIT_FAILED, EXIT_USAGE
from tpulab.base.events import Failed
from tpulab.base.timing import conv_flops
from tpulab.engine.runner import run_job
from tpulab.engine.spec import resolve
from tpulab.engine.worker import RunHandle
from tpulab.machine.detect import detect
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError

from .helpers import ROOT, json_events, rest_of, run_cli

pytestmark = pytest.mark.slow  # each test starts TensorFlow in a worker (JAX, the quicker, for the CLI's own output)

TINY = ["--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "4", "--warmup", "1"]


@pytest.fixture(scope="module")
def conv_run():
    """`--run conv --json` of TINY at a mode, shards and batch size: its events, each configuration run once for
    the tests that read it (in the home of the first test that asks)."""
    done: dict[tuple[str, int, int], tuple[subprocess.CompletedProcess, list[dict]]] = {}

    def run(mode: str, shards: int, batch: int) -> tuple[subprocess.CompletedProcess, list[dict]]:
        if (mode, shards, batch) not in done:
            out = run_cli("--run", "conv", "--no-ui", "--json", *TINY[2:], "--batch-size", str(batch), "--mode", mode,
                          "--shards", str(shards))
            done[mode, shards, batch] = out, json_events(out.stdout)
        return done[mode, shards, batch]
    return run


# Four shards of 32 images: each replica holds the 8 that one shard of 8 holds (the checksum test below). The naive
# mode runs once, on four shards: its loop over the shards' devices is the same for one, and a one-shard placement
# is the first run's.
@pytest.mark.parametrize("mode, shards, batch", [("sharded", 1, 8), ("sharded", 4, 32), ("naive", 4, 8)])
def test_conv_runs_and_reports_honest_figures(conv_run, mode, shards, batch):
    out, events = conv_run(mode, shards, batch)
    assert out.returncode == 0, out.stderr
    kinds = [e["event"] for e in events if e["event"] != "sample"]  # telemetry runs beside the steps
    assert kinds[0] == "started" and kinds[1] == "compiled" and kinds[-2:] == ["finished", "result"]
    steps = [e for e in events if e["event"] == "step"]
    assert [s["warmup"] for s in steps] == [True, False, False, False, False]
    assert all(s["seconds"] > 0 and math.isfinite(s["value"]) for s in steps)
    result = events[-1]
    assert result["status"] == "finished" and result["device"]["replicas"] == shards
    assert result["per_replica_batch"] == batch // shards
    s = result["summary"]
    assert s["step_seconds"]["count"] == 4
    assert s["flops_per_step"] == conv_flops(batch, 32, 32, 3, 16, 5, 2, "SAME")
    assert s["gflops_per_s"] == pytest.approx(s["flops_per_step"] / s["step_seconds"]["median"] / 1e9)
    assert 0 < s["peak_fraction"] < 1
    assert "beats-peak" not in [f["code"] for f in s["flags"]]
    assert result["versions"]["tensorflow"].startswith("2.") and result["backend"] == "tensorflow"
    assert result["backend_reason"]


def test_sharded_replicas_each_convolve_their_slice(conv_run):
    """The checksum of a 4-shard run equals the sum over its replicas' slices: each the one a 1-shard run holds
    (same seed, same slice). The runs are the sharded ones above."""
    one = conv_run("sharded", 1, 8)[1]
    four = conv_run("sharded", 4, 32)[1]
    v1 = next(e["value"] for e in one if e["event"] == "step")
    v4 = next(e["value"] for e in four if e["event"] == "step")
    assert v4 == pytest.approx(4 * v1, rel=1e-4)


def test_human_output_has_a_line_per_iteration_and_a_summary():
    out = run_cli("--run", "conv", "--no-ui", *TINY, "--no-save", "--backend", "jax")  # the CLI's, on any backend
    assert out.returncode == 0, out.stderr
    assert "first call (trace + compile" in out.stdout
    assert out.stdout.count("iteration ") >= 5
    for label in ("steady iteration time", "p10", "p90", "n=4", "fraction of spec peak", "GFLOP/s"):
        assert label in out.stdout


def test_batch_parallel_graph_consumes_every_shards_output():
    tf = pytest.importorskip("tensorflow")
    from tpulab.workloads import registry
    from tpulab.workloads.conv.tf import batch_parallel_graph

    params = {**registry()["conv"].defaults(), "batch_size": 8, "image_size": 16, "filters": 4, "shards": 8}
    graph, total = batch_parallel_graph(params)
    ops = {op.type for op in graph.get_operations()}
    assert {"TPUReplicateMetadata", "TPUReplicatedOutput", "Conv2D"} <= ops
    # The fetched value depends on every shard's output (the article's had none to depend on).
    seen, todo = set(), [total.op]
    while todo:
        op = todo.pop()
        if op.name not in seen:
            seen.add(op.name)
            todo += [t.op for t in op.inputs] + list(op.control_inputs)
    replicated = [op for op in graph.get_operations() if op.type == "TPUReplicatedOutput"]
    assert len(replicated) == 1 and replicated[0].name in seen
    assert len(replicated[0].outputs) == 8 and total.dtype == tf.float32


@pytest.mark.skipif(bool(detect().tpu), reason="asks for a TPU to see the failure: this host has one")
def test_a_device_this_machine_lacks_is_refused_before_any_worker_starts():
    params = {**registry()["conv"].defaults(), "batch_size": 8, "image_size": 16, "filters": 4, "iterations": 2,
              "device": "tpu", "backend": "tensorflow"}
    with pytest.raises(ParamError, match="--device tpu: no TPU was found on this machine") as refused:
        resolve("conv", params, detect())
    assert refused.value.exit_code == EXIT_USAGE


def test_worker_failure_is_reported_with_its_reason(tmp_path):
    """What only the worker can find out (here: the user's model cannot be built) fails the run, saying why."""
    broken = tmp_path / "broken.py"
    broken.write_text("def build():\n    raise RuntimeError('this model cannot be built here')\n")
    report = detect()
    run = run_job(resolve("model", {"model": f"{broken}:build", "backend": "jax"}, report, preset="smoke"), report)
    events = list(run.events())
    assert isinstance(events[-1], Failed)
    rec = run.recorder.record()
    assert rec.status == "failed" and "this model cannot be built here" in (rec.error or "")
    assert run.exit_code == EXIT_FAILED


def test_a_run_cancelled_before_it_starts_starts_no_worker_and_ends_cancelled():
    """Ctrl+C (or the lab's x, or a card's) as a run is being made: no worker to tell yet. It had been lost, and
    the run then went to its end; now the run starts none."""
    report = detect()
    params = {**registry()["conv"].defaults(), "batch_size": 2, "image_size": 8, "filters": 2, "iterations": 50,
              "backend": "jax"}
    run = run_job(resolve("conv", params, report), report)
    run.cancel()
    assert list(run.events()) == [] and run.handles == []
    rec = run.recorder.record()
    assert (rec.status, rec.error, rec.steps) == ("cancelled", "stopped by the user before it started", [])
    assert run.exit_code == EXIT_CANCELLED


def test_a_cancel_as_the_worker_starts_reaches_it_once(monkeypatch):
    """Ctrl+C between the worker's start and the run holding its handle (here: at that moment, always): the worker
    is asked once, as soon as the run holds it, and the run ends cancelled, not killed and not run to its end."""
    report = detect()
    params = {**registry()["conv"].defaults(), "batch_size": 2, "image_size": 8, "filters": 2, "iterations": 100_000,
              "backend": "jax"}  # more steps than a loaded machine reads its stdin in: only the cancel ends it
    run = run_job(resolve("conv", params, report), report)
    start = RunHandle.start

    def started_then_cancelled(*args, **kwargs) -> RunHandle:
        handle = start(*args, **kwargs)
        run.cancel()
        return handle

    monkeypatch.setattr(RunHandle, "start", started_then_cancelled)
    # Python's own Ctrl+C: a suite started in the background inherits SIGINT ignored, and so would the worker until
    # it sets its handler, losing a cancel sent as it starts
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        list(run.events())
    finally:
        signal.signal(signal.SIGINT, before)
    rec = run.recorder.record()
    assert (rec.status, rec.error) == ("cancelled", "stopped by the user")
    assert run.handle is not None and run.handle.cancel_requested and run.handle.returncode != -signal.SIGKILL


def test_ctrl_c_stops_after_the_current_step_and_keeps_the_measurements():
    proc = subprocess.Popen([sys.executable, "-m", "tpulab", "--run", "conv", "--no-ui", "--json",
                             "--batch-size", "8", "--image-size", "64", "--filters", "16", "--iterations", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    seen = 0
    for line in proc.stdout:
        if '"event": "step"' in line:
            seen += 1
            if seen == 3:
                proc.send_signal(signal.SIGINT)
                break
    rest, err = rest_of(proc, 120)
    assert proc.returncode == EXIT_CANCELLED, err
    events = json_events(rest)
    assert events[-2]["event"] == "cancelled"
    result = events[-1]
    assert result["status"] == "cancelled" and len(result["steps"]) >= 3
    assert result["summary"]["step_seconds"]["count"] >= 1
    assert "stopping after the current step" in err
    listing = run_cli("results", "list", "--json")
    assert '"status": "cancelled"' in listing.stdout
