"""The JAX backend on this CPU: N host devices stand in for TPU cores, running the very same code."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tpulab.backends import BackendError, choose, get
from tpulab.machine.detect import detect

from .helpers import ROOT, TF, gpu_tree, json_events, run_cli, tree, v5e_tree

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


@pytest.mark.slow
@pytest.mark.parametrize("mode, shards", [("sharded", 1), ("sharded", 4), ("naive", 4), ("batch-parallel", 1),
                                          ("batch-parallel", 4)])
def test_conv_on_jax(mode, shards):
    out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", *TINY,
                  "--mode", mode, "--shards", str(shards))
    assert out.returncode == 0, out.stderr
    events = [e for e in json_events(out.stdout) if e["event"] != "sample"]  # telemetry runs beside the steps
    assert [e["event"] for e in events[:2]] == ["started", "compiled"] and events[-2]["event"] == "finished"
    result = events[-1]
    assert result["backend"] == "jax" and result["backend_reason"] == "you chose jax"
    assert result["device"]["replicas"] == shards and result["device"]["kind"] == "cpu"
    assert result["versions"]["jax"] and result["summary"]["step_seconds"]["count"] == 3
    assert 0 < result["summary"]["peak_fraction"] < 1


@pytest.mark.slow
def test_batch_parallel_agrees_with_sharded_on_the_same_data():
    """shard_map over 4 host devices sums the same convolution as the partitioned program."""
    values = {}
    for mode in ("sharded", "batch-parallel"):
        out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", *TINY,
                      "--mode", mode, "--shards", "4", "--no-save")
        assert out.returncode == 0, out.stderr
        values[mode] = [e["value"] for e in json_events(out.stdout) if e["event"] == "step"]
    assert values["sharded"][0] == pytest.approx(values["batch-parallel"][0], rel=1e-4, abs=1e-2)
    assert len(set(values["sharded"])) == 1  # the same work every iteration


@pytest.mark.slow
@pytest.mark.parametrize("shards", [1, 4])
def test_fashion_mnist_on_jax(fashion_data, shards):
    out = run_cli("--run", "fashion-mnist", "--no-ui", "--json", "--backend", "jax", "--device", "cpu",
                  "--batch-size", "32", "--epochs", "2", "--steps-per-epoch", "3", "--validation-examples", "64",
                  "--shards", str(shards), "--precision", "mixed_bfloat16" if shards == 4 else "float32")
    assert out.returncode == 0, out.stderr
    events = json_events(out.stdout)
    result = events[-1]
    assert result["status"] == "finished" and result["backend"] == "jax"
    assert result["device"]["replicas"] == shards and result["per_replica_batch"] == 32 // shards
    assert result["dtype"] == ("bfloat16" if shards == 4 else "float32")
    assert len([e for e in events if e["event"] == "epoch"]) == 2
    assert "val_sparse_categorical_accuracy" in result["summary"]["validation"]
    assert all("loss" in s["metrics"] for s in result["steps"])
    s = result["summary"]  # XLA's count of the training step's bytes gives a Keras model its intensity on JAX
    assert s["bytes_per_step"] > 0 and s["intensity"] == pytest.approx(s["flops_per_step"] / s["bytes_per_step"])


@pytest.mark.slow
def test_the_articles_generator_feeds_jax_too():
    out = run_cli("--run", "fashion-mnist", "--no-ui", "--json", "--backend", "jax", "--device", "cpu",
                  "--dataset", "synthetic", "--pipeline", "generator", "--batch-size", "16", "--epochs", "1",
                  "--steps-per-epoch", "3", "--no-validation", "--no-save")
    assert out.returncode == 0, out.stderr
    assert json_events(out.stdout)[-1]["summary"]["step_seconds"]["count"] == 2


NO_TENSORFLOW = """
import json, sys
from tpulab.engine import worker
code = worker.main([sys.argv[1]])
imported = sorted(m for m in sys.modules if (m == "tensorflow" or m.startswith("tensorflow."))
                  and sys.modules[m] is not None)
print(json.dumps({"code": code, "tensorflow": imported}), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.parametrize("workload, params", [
    ("conv", {"batch_size": 8, "image_size": 16, "filters": 4, "iterations": 2, "mode": "batch-parallel"}),
    ("fashion-mnist", {"batch_size": 16, "epochs": 1, "steps_per_epoch": 2, "dataset": "synthetic",
                       "validation_examples": 32}),
])
def test_a_jax_worker_never_imports_tensorflow(workload, params):
    """On a TPU the first framework to initialise it wins: a JAX worker must leave TensorFlow alone."""
    from tpulab.workloads import registry

    full = {**registry()[workload].defaults(), **params, "device": "cpu", "shards": 2, "backend": "jax"}
    spec = json.dumps({"workload": workload, "backend": "jax", "params": full})
    env = {**get("jax").worker_env("cpu", 2, os.environ), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, spec], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, **env}, timeout=300)
    verdict = json.loads(out.stderr.strip().splitlines()[-1])
    assert verdict == {"code": 0, "tensorflow": []}, out.stderr[-2000:]
    assert '"event": "finished"' in out.stdout


@pytest.mark.slow
def test_a_configuration_run_before_compiles_from_the_cache_and_says_so(tmp_path):
    """JAX's persistent compilation cache lives in tpulab's home: the second run's first call loads it."""
    env = {"TPULAB_HOME": str(tmp_path)}
    runs = [run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", *TINY, env=env)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    first, again = ([e for e in json_events(r.stdout) if e["event"] == "compiled"][0] for r in runs)
    assert first["cache_hit"] is False and again["cache_hit"] is True
    assert json_events(runs[1].stdout)[-1]["summary"]["cache_hit"] is True
    assert any((tmp_path / "jax-cache").iterdir())
    human = run_cli("--run", "conv", "--no-ui", "--backend", "jax", "--device", "cpu", *TINY, env=env)
    assert "first call (compiled (cache)" in human.stdout
