"""The article's CNN: the model itself, the callback's events, real training, shards, cancel."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import numpy as np
import pytest

from tpulab.base.errors import EXIT_CANCELLED
from tpulab.engine.runner import run_job
from tpulab.engine.spec import resolve
from tpulab.engine.store import Store
from tpulab.machine.detect import detect
from tpulab.workloads import registry
from tpulab.workloads.base import Limits
from tpulab.workloads.data import DEBIAN_DIR, FILES, find
from tpulab.workloads.fashion_mnist import build_model, forward_flops_per_example

from .helpers import cancel_after, json_events, run_cli


CPU = Limits({"cpu": 8, "gpu": 0, "tpu": 0}, "cpu")


def test_the_articles_model_layer_for_layer(keras):
    model = build_model()
    assert model.count_params() == 1_619_470
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds == ["BatchNormalization", "Conv2D", "MaxPooling2D", "Dropout"] * 3 + \
        ["Flatten", "Dense", "Activation", "Dropout", "Dense", "Activation"]
    # The FLOP count used for GFLOP/s matches the real layers' shapes.
    counted = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            _, h, w, c = layer.output.shape
            kh, kw, cin, _ = layer.kernel.shape
            counted += 2 * h * w * c * kh * kw * cin
        elif isinstance(layer, keras.layers.Dense):
            counted += 2 * layer.kernel.shape[0] * layer.kernel.shape[1]
    assert counted == forward_flops_per_example()


def tiny_fit(spe: int, steps: int, epochs: int = 1, cancel=None, validation: bool = False):
    import keras
    import tensorflow as tf

    from tpulab.callbacks import StepTimer
    events = []
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["sparse_categorical_accuracy"],
                  steps_per_execution=spe)
    x = np.random.default_rng(0).random((64, 4), dtype=np.float32)
    y = (x[:, 0] * 3).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    timer = StepTimer(events.append, batch_size=8, cancel=cancel)
    model.fit(ds, epochs=epochs, steps_per_epoch=steps, callbacks=[timer], verbose=0,
              validation_data=(x, y) if validation else None, shuffle=False)
    return events, timer


def test_callback_events_in_order_with_compile_apart(tf):
    events, timer = tiny_fit(spe=1, steps=5, epochs=2, validation=True)
    kinds = [e["event"] for e in events]
    assert kinds == ["compiled"] + ["step"] * 4 + ["epoch"] + ["step"] * 5 + ["epoch"]
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(2, 11))
    for e in steps:
        assert e["steps"] == 1 and e["seconds"] > 0 and e["examples_per_s"] == pytest.approx(8 / e["seconds"])
        assert set(e["metrics"]) >= {"loss", "sparse_categorical_accuracy"}
    assert "val_sparse_categorical_accuracy" in events[5]["metrics"] and events[5]["epoch"] == 1
    assert timer.compile_seconds == events[0]["seconds"] and len(timer.step_seconds) == 9


def test_callback_keeps_timings_per_step_with_steps_per_execution(tf):
    events, timer = tiny_fit(spe=2, steps=6)
    assert events[0] == {**events[0], "event": "compiled", "steps": 2}
    steps = [e for e in events if e["event"] == "step"]
    assert [(e["step"], e["steps"]) for e in steps] == [(4, 2), (6, 2)]
    assert len(timer.step_seconds) == 4  # two executions of two steps each


def test_callback_cancel_stops_after_the_current_step(keras, tf):
    class StopAfter:
        def __init__(self, events):
            self.events = events

        def is_set(self):
            return sum(e["event"] == "step" for e in self.events) >= 2

    events = []
    from tpulab.callbacks import StepTimer
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("adam", "mse")
    timer = StepTimer(events.append)
    timer.cancel = StopAfter(events)
    x = np.zeros((8, 4), np.float32)
    model.fit(tf.data.Dataset.from_tensors((x, np.zeros((8, 3), np.float32))).repeat(), epochs=3,
              steps_per_epoch=50, callbacks=[timer], verbose=0, shuffle=False)
    assert [e["event"] for e in events] == ["compiled", "step", "step", "epoch"]


@pytest.mark.slow
@pytest.mark.skipif(not (DEBIAN_DIR / FILES["x_train"]).exists(),
                    reason="needs Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
def test_trains_on_the_real_data():
    out = run_cli("--run", "fashion-mnist", "--no-ui", "--json", "--batch-size", "64", "--epochs", "1",
                  "--steps-per-epoch", "20", "--validation-examples", "1000")
    assert out.returncode == 0, out.stderr
    events = json_events(out.stdout)
    result = events[-1]
    assert result["status"] == "finished" and not result["synthetic"]
    folder, origin = find()  # the Keras cache before Debian's package: the copy this host has
    assert result["dataset"] == f"{origin}: {folder}"
    losses = [s["metrics"]["loss"] for s in result["steps"]]
    assert losses[-1] < 0.7 * losses[0]  # (seeded: 4.48 to 2.15 in 20 steps, validation accuracy 0.69)
    val = result["summary"]["validation"]["val_sparse_categorical_accuracy"]
    assert val > 0.5  # chance is 0.1
    assert result["summary"]["step_seconds"]["count"] == 19
    assert 0 < result["summary"]["peak_fraction"] < 1


@pytest.mark.slow
def test_trains_on_idx_files_the_test_wrote(fashion_data):
    """The whole path from IDX files through the search order to fit and validation, on any machine."""
    out = run_cli("--run", "fashion-mnist", "--no-ui", "--json", "--batch-size", "32", "--epochs", "1",
                  "--steps-per-epoch", "3", "--validation-examples", "64")
    assert out.returncode == 0, out.stderr
    result = json_events(out.stdout)[-1]
    assert result["status"] == "finished" and not result["synthetic"]
    assert result["dataset"] == f"$TPULAB_DATA_DIR: {fashion_data}"
    assert "val_sparse_categorical_accuracy" in result["summary"]["validation"]


@pytest.mark.slow
def test_two_shards_on_synthetic_data_are_labelled(tpulab_home):
    """Every step printed, and the record kept, say the data was synthetic (one run: a TensorFlow worker is seconds)."""
    human = run_cli("--run", "fashion-mnist", "--no-ui", "--dataset", "synthetic", "--batch-size", "32",
                    "--shards", "2", "--epochs", "1", "--steps-per-epoch", "5", "--no-validation",
                    "--pipeline", "generator")
    assert human.returncode == 0, human.stderr
    assert "SYNTHETIC DATA" in human.stdout and "synthetic-data" in human.stdout
    step_lines = [line for line in human.stdout.splitlines() if line.startswith("step ")]
    assert len(step_lines) == 4 and all(line.endswith("[synthetic]") for line in step_lines)  # the first, compiled
    assert "estimate: about" in human.stdout
    [result] = Store(tpulab_home / "results.db").records()
    assert result.device is not None and (result.device.replicas, result.device.strategy) == (2, "MirroredStrategy")
    assert result.per_replica_batch == 16 and result.synthetic and result.dataset == "synthetic"
    assert "synthetic-data" in [f.code for f in result.summary.flags]


@pytest.mark.slow
def test_cancel_mid_run_keeps_partial_results():
    params = registry()["fashion-mnist"].resolve(
        {"dataset": "synthetic", "batch_size": "16", "epochs": "3", "steps_per_epoch": "1000", "device": "cpu"}, CPU)
    run = run_job(resolve("fashion-mnist", params, detect()), detect())
    rec = cancel_after(run)
    assert rec.status == "cancelled" and run.exit_code == EXIT_CANCELLED
    assert 3 <= len(rec.steps) < 50 and rec.summary.step_seconds and rec.summary.step_seconds.count >= 3


@pytest.mark.parametrize("argv, expected", [
    (["--steps-per-execution", "20", "--steps-per-epoch", "10"],
     "--steps-per-execution must be an integer from 1 to --steps-per-epoch 10 (got 20)"),
    (["--learning-rate", "0"], "--learning-rate must be a number from 1e-06 to 1 (got '0')"),
    (["--precision", "fp8"], "--precision must be one of float32, mixed_bfloat16, mixed_float16 (got 'fp8')"),
    (["--data-dir", "/nonexistent"], "--data-dir /nonexistent lacks train-images-idx3-ubyte.gz"),
])
def test_bad_training_values(argv, expected):
    out = run_cli("--run", "fashion-mnist", "--no-ui", *argv)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and expected in out.stderr


LARGE_TENSORS = """
import resource
import tensorflow as tf
n = 16 << 20  # 64 MiB of float32
for _ in range(2):  # the first ones: whatever pool there is grows
    float(tf.reduce_sum(tf.fill([n], 1.0)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    float(tf.reduce_sum(tf.fill([n], 1.0)))
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(find_spec("tensorflow") is None, reason="needs TensorFlow")
def test_a_tensorflow_worker_reuses_its_large_tensors_memory_unless_the_user_says_otherwise(monkeypatch):
    """TensorFlow's default CPU allocator handed each 64 MiB tensor back and faulted it in again (81,925 page faults
    for five of them here); pooled, the five take none."""
    from tpulab.engine.worker import child_env, worker_env

    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    env = worker_env("tensorflow", "cpu", 1)
    out = subprocess.run([sys.executable, "-c", LARGE_TENSORS], env=child_env(env), capture_output=True, text=True,
                         check=True)
    assert int(out.stdout) < 5 * (64 << 20) // 4096 // 10, out.stdout  # under a tenth of a page fault per 4 KiB
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "false")
    assert worker_env("tensorflow", "cpu", 1)["TF_CPU_ALLOCATOR_USE_BFC"] == "false"  # the user's own stays
