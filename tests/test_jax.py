"""The JAX backend on this CPU: N host devices stand in for TPU cores, running the very same code."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tpulab.backends import BackendError, choose, get
from tpulab.engine.store import Store
from tpulab.machine.detect import detect

from .helpers import (
    TF,
    gpu_tree,
    json_events,
    one_run_over_two_hosts,
    run_cli,
    tree,
    v5e_tree,
    watched,
    worker_imports,
    write_set,
)

TINY = ["--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "3", "--warmup", "1"]
JAX = {"jax": "0.10.2"}


# --- auto's choice, on fake machines ---------------------------------------------------------------
def test_auto_keeps_tensorflow_on_a_cpu_and_on_a_gpu(tmp_path):
    assert choose("auto", detect(tree(tmp_path / "cpu"), {}, {**TF, **JAX}))[0] == "tensorflow"
    gpu = detect(gpu_tree(tmp_path / "gpu"), {}, {**TF, **JAX})
    backend, why = choose("auto", gpu)
    assert backend == "tensorflow" and "TensorFlow is installed" in why


def test_auto_takes_jax_where_tensorflow_cannot_drive_the_tpu(tmp_path):
    # Colab's TPU runtime as shipped: JAX and libtpu, no TensorFlow.
    colab = detect(v5e_tree(tmp_path / "a"), {"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, {**JAX, "libtpu": "0.0.21"})
    backend, why = choose("auto", colab)
    assert backend == "jax" and "TensorFlow is not installed" in why
    # TensorFlow present but without a TPU runtime (tensorflow-tpu stops at 2.20).
    no_runtime = detect(v5e_tree(tmp_path / "b"), {}, {**TF, **JAX})
    backend, why = choose("auto", no_runtime)
    assert backend == "jax" and "no TPU runtime" in why
    # TensorFlow probed and failed to initialise the TPU.
    failed = detect(v5e_tree(tmp_path / "c"), {}, {**TF, **JAX, "tensorflow-tpu": "2.20.0", "libtpu": "0.0.14"})
    failed.frameworks["tensorflow"] = {"tpu_cores": 0, "tpu_error": "NotFoundError: No OpKernel registered"}
    assert choose("auto", failed)[0] == "jax"
    # ... and where TensorFlow does drive it, it stays the first backend.
    failed.frameworks["tensorflow"] = {"tpu_cores": 1}
    assert choose("auto", failed)[0] == "tensorflow"


def test_auto_takes_jax_when_tensorflow_is_absent_and_names_installs_when_nothing_is(tmp_path):
    assert choose("auto", detect(tree(tmp_path / "a"), {}, JAX)) == ("jax", "TensorFlow is not installed; JAX can")
    with pytest.raises(BackendError, match=r"neither TensorFlow nor JAX nor PyTorch is installed; install one with: "
                                           r"pip install"):
        choose("auto", detect(tree(tmp_path / "b"), {}, {}))
    with pytest.raises(BackendError, match=r"JAX is not installed; PyTorch drives no TPU here \(torch_xla is not "
                                           r"supported\); install it with: pip install -U 'jax\[tpu\]'"):
        choose("auto", detect(v5e_tree(tmp_path / "c"), {}, TF))


def test_worker_environment_sets_the_backend_and_host_devices_before_import():
    env = get("jax").worker_env("cpu", 4, os.environ)
    assert env["KERAS_BACKEND"] == "jax" and env["JAX_PLATFORMS"] == "cpu"
    assert "--xla_force_host_platform_device_count=4" in env["XLA_FLAGS"].split()
    assert "JAX_PLATFORMS" not in get("jax").worker_env("tpu", 4, os.environ)  # a TPU must not be hidden
    assert get("tensorflow").worker_env("cpu", 4, os.environ)["KERAS_BACKEND"] == "tensorflow"


# --- real runs ----------------------------------------------------------------------------------
pytest.importorskip("jax")

pytestmark = pytest.mark.usefixtures("quick_compiles", "shared_jax_cache")  # see conftest


CONV_RUNS = [("sharded", 1), ("sharded", 4), ("naive", 4), ("batch-parallel", 1), ("batch-parallel", 4)]


@pytest.fixture(scope="module")
def conv_run(tmp_path_factory):
    """One real run per (mode, shards), each in a tpulab home of its own, watched for TensorFlow: several tests
    read each run."""
    done: dict[tuple[str, int], tuple[subprocess.CompletedProcess, Path]] = {}

    def run(mode: str, shards: int) -> tuple[subprocess.CompletedProcess, Path]:
        if (mode, shards) not in done:
            home = tmp_path_factory.mktemp(f"conv-{mode}-{shards}")
            out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", *TINY,
                          "--mode", mode, "--shards", str(shards),
                          env={**watched(home), "JAX_COMPILATION_CACHE_DIR": None})  # its own, in its home
            assert out.returncode == 0, out.stderr
            done[mode, shards] = out, home
        return done[mode, shards]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("mode, shards", CONV_RUNS)
def test_conv_on_jax(conv_run, mode, shards):
    out, _ = conv_run(mode, shards)
    events = [e for e in json_events(out.stdout) if e["event"] != "sample"]  # telemetry runs beside the steps
    assert [e["event"] for e in events[:2]] == ["started", "compiled"] and events[-2]["event"] == "finished"
    result = events[-1]
    assert result["backend"] == "jax" and result["backend_reason"] == "you chose jax"
    assert result["device"]["replicas"] == shards and result["device"]["kind"] == "cpu"
    assert result["versions"]["jax"] and result["summary"]["step_seconds"]["count"] == 3
    assert 0 < result["summary"]["peak_fraction"] < 1


@pytest.mark.slow
def test_batch_parallel_agrees_with_sharded_on_the_same_data(conv_run):
    """shard_map over 4 host devices sums the same convolution as the partitioned program."""
    values = {mode: [e["value"] for e in json_events(conv_run(mode, 4)[0].stdout) if e["event"] == "step"]
              for mode in ("sharded", "batch-parallel")}
    assert values["sharded"][0] == pytest.approx(values["batch-parallel"][0], rel=1e-4, abs=1e-2)
    assert len(set(values["sharded"])) == 1  # the same work every iteration


FASHION_RUNS = {
    # the Fashion-MNIST files the test wrote, through the default pipeline (numpy batches on JAX), float32
    1: ["--batch-size", "16", "--precision", "float32"],
    # the article's Python generator of random slices (each process draws its own), over synthetic data, bfloat16
    # compute on 4 shards over two processes joined through JAX's distributed runtime
    4: ["--batch-size", "16", "--precision", "mixed_bfloat16", "--dataset", "synthetic", "--pipeline", "generator",
        "--processes", "2"],
}
PROCESSES = {1: 1, 4: 2}


@pytest.fixture(scope="module")
def fashion_run(tmp_path_factory):
    """The fashion-mnist runs on JAX, one per shard count, watched for TensorFlow; read by several tests."""
    data = tmp_path_factory.mktemp("fashion-mnist")
    write_set(data, n_train=256, n_test=64)
    done: dict[int, tuple[list[dict], Path]] = {}

    def run(shards: int) -> tuple[list[dict], Path]:
        if shards not in done:
            home = tmp_path_factory.mktemp(f"fashion-{shards}")
            out = run_cli("--run", "fashion-mnist", "--no-ui", "--json", "--backend", "jax", "--device", "cpu",
                          "--epochs", "2", "--steps-per-epoch", "3", "--validation-examples", "32",
                          "--shards", str(shards), *FASHION_RUNS[shards],
                          env={**watched(home), "TPULAB_DATA_DIR": str(data)})
            assert out.returncode == 0, out.stderr
            done[shards] = json_events(out.stdout), home
        return done[shards]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 4])
def test_fashion_mnist_on_jax(fashion_run, shards):
    events, _ = fashion_run(shards)
    result = events[-1]
    assert result["status"] == "finished" and result["backend"] == "jax"
    assert result["device"]["replicas"] == shards and result["per_replica_batch"] == 16 // shards
    assert result["dtype"] == ("bfloat16" if shards == 4 else "float32")
    assert len([e for e in events if e["event"] == "epoch"]) == 2
    assert "val_sparse_categorical_accuracy" in result["summary"]["validation"]
    assert all("loss" in s["metrics"] for s in result["steps"])
    s = result["summary"]  # XLA's count of the training step's bytes gives a Keras model its intensity on JAX
    assert s["bytes_per_step"] > 0 and s["intensity"] == pytest.approx(s["flops_per_step"] / s["bytes_per_step"])


@pytest.mark.slow
def test_the_articles_generator_feeds_jax_too(fashion_run):
    result = fashion_run(4)[0][-1]
    assert result["params"]["pipeline"] == "generator" and result["synthetic"]
    assert result["summary"]["step_seconds"]["count"] == 2 * 3 - 1  # every step but the first call


@pytest.mark.slow
def test_two_processes_make_one_fashion_mnist_record_with_per_host_times(fashion_run):
    """A Keras model over two processes (the conv case is test_multihost's): one record, each host's time per step
    and its own telemetry."""
    events, home = fashion_run(4)
    result = events[-1]
    one_run_over_two_hosts(result)
    db = str(home / "results.db")
    assert len(json.loads(run_cli("results", "--db", db, "list", "--json").stdout)) == 1  # one run, one record
    shown = run_cli("results", "--db", db, "show", result["id"][:8])
    assert "2 hosts x 2 devices" in shown.stdout and "slowest: host" in shown.stdout


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["conv", "fashion-mnist"])
def test_a_jax_worker_never_imports_tensorflow(conv_run, fashion_run, workload):
    """On a TPU the first framework to initialise it wins: a JAX worker must leave TensorFlow alone (conv in
    every mode; fashion-mnist through both pipelines, on files and on synthetic data, each of two processes)."""
    runs = ([(conv_run(*run)[1], 1) for run in CONV_RUNS] if workload == "conv"
            else [(fashion_run(shards)[1], PROCESSES[shards]) for shards in FASHION_RUNS])
    for home, processes in runs:
        assert [(r["code"], r["tensorflow"]) for r in worker_imports(home)] == [(0, [])] * processes, home


@pytest.mark.slow
def test_a_configuration_run_before_compiles_from_the_cache_and_says_so(conv_run):
    """JAX's persistent compilation cache lives in tpulab's home: the second run's first call loads it."""
    first, home = conv_run("sharded", 1)  # the first run of this configuration in its home
    [compiled] = [e for e in json_events(first.stdout) if e["event"] == "compiled"]
    assert compiled["cache_hit"] is False and json_events(first.stdout)[-1]["summary"]["cache_hit"] is False
    assert any((home / "jax-cache").iterdir())
    again = run_cli("--run", "conv", "--no-ui", "--backend", "jax", "--device", "cpu", *TINY, "--mode", "sharded",
                    "--shards", "1", env={"TPULAB_HOME": str(home), "JAX_COMPILATION_CACHE_DIR": None})
    assert again.returncode == 0, again.stderr[-2000:]
    assert "first call (compiled (cache), " in again.stdout  # the first call's event, as it is said
    assert "first call (compiled (cache))" in again.stdout  # the summary's row
    [kept] = [r for r in Store(home / "results.db").records() if r.id != json_events(first.stdout)[-1]["id"]]
    assert kept.summary.cache_hit is True
