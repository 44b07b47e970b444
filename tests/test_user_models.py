"""Any Keras model a user can build: several inputs, named outputs, a subclassed model, embeddings,
a train_step of their own. The synthetic data is checked in this process against real Keras
models (backend-neutral code); each shape then trains in a real worker, on both backends where
their input pipelines differ."""

from __future__ import annotations

import numpy as np
import pytest

from tpulab.base.errors import EXIT_FAILED
from tpulab.base.events import Failed, RunRecord
from tpulab.engine.record import RunRecorder
from tpulab.engine.spec import RunSpec
from tpulab.machine.detect import detect
from tpulab.views.console import summary_rows
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError
from tpulab.workloads.user_model import input_shape, target

from .helpers import EIGHT_CPUS, ROOT, json_events, recorder, run_cli

TWO_HEADS = "examples/models/two_heads.py:build"
SUBCLASSED = "examples/models/subclassed.py:build"
JAX_STEP = "examples/models/jax_train_step.py:build"
SMOKE = ("--preset", "smoke", "--batch-size", "8", "--no-ui", "--no-save")


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example paths are relative to it, as in the README


# --- without a framework -----------------------------------------------------------------------
def test_an_input_shape_is_sizes_separated_by_commas():
    assert input_shape("") is None and input_shape("20") == (20,) and input_shape(" 32, 32,3") == (32, 32, 3)
    for bad in ("32x32", "0", "20,", "-1", "2.5"):
        with pytest.raises(ParamError, match="--input-shape must be one example's shape without the batch axis"):
            input_shape(bad)


def test_a_bad_input_shape_on_the_command_line_is_one_line_and_exit_2():
    r = run_cli("--run", "model", "--model", SUBCLASSED, "--input-shape", "32x32", "--no-ui", "--no-save", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["tpulab: error: --input-shape must be one example's shape without the "
                                             "batch axis: sizes separated by commas, e.g. 20 or 32,32,3 (got '32x32')"]


def test_a_run_that_fails_before_its_first_step_shows_what_ran_where_and_the_error():
    w = registry()["model"]
    p = w.resolve({"model": SUBCLASSED}, EIGHT_CPUS, "smoke")
    rec = RunRecorder(RunSpec(w, {**p, "device": "cpu"}, "jax", "asked for", "cpu"), detect())
    rec.feed(Failed(error="Keras cannot see the input"))
    rec.finish("failed", "Keras cannot see the input")
    rows = {name: value for name, value, _ in summary_rows(rec.record())}
    assert rows == {"model": "subclassed:build", "device": "cpu (asked for)", "backend": "jax: asked for",
                    "error": "Keras cannot see the input"}


def test_an_unknown_flop_count_on_jax_does_not_say_jax_has_no_cost_analysis():
    rec = recorder("model", {"model": SUBCLASSED, "batch_size": 8}, None)
    rec.finish("finished")
    achieved = dict((name, value) for name, value, _ in summary_rows(rec.record()))["achieved"]
    assert achieved == "unavailable: FLOPs unknown (XLA's cost analysis gave no count for this step)"


# --- the synthetic data, against real Keras models in this process -------------------------------
@pytest.fixture(scope="module")
def keras():
    return pytest.importorskip("keras")


def load(spec: str, shape: tuple[int, ...] | None = None):
    from tpulab.workloads.user_model.keras import load as load_model

    return load_model(target(spec), shape, seq_len=128, batch=32)


@pytest.mark.slow
def test_several_inputs_and_named_outputs_get_data_by_name_shape_dtype_and_loss(keras):
    from tpulab.workloads.user_model.data import synthetic

    x, y = synthetic(load(TWO_HEADS), None, 512, seed=0)
    assert sorted(x) == ["features", "words"] and sorted(y) == ["score", "topic"]
    assert x["features"].shape == (512, 16) and x["features"].dtype == np.float32
    assert x["words"].shape == (512, 20) and x["words"].dtype == np.int32
    assert x["words"].min() == 0 and x["words"].max() == 999  # the Embedding's 1000 words, all of them in reach
    assert y["topic"].shape == (512,) and set(np.unique(y["topic"])) == {0, 1, 2, 3, 4}  # sparse: class labels
    assert y["score"].shape == (512, 1) and y["score"].dtype == np.float32 and 0 < y["score"].mean() < 1  # mse


@pytest.mark.slow
def test_each_integer_input_stays_within_the_embedding_that_reads_it(keras):
    from tpulab.workloads.user_model.data import synthetic

    small, large = keras.Input((4,), dtype="int32", name="small"), keras.Input((4,), dtype="int32", name="large")
    pooled = [keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(n, 2)(i)) for n, i in ((7, small),
                                                                                                  (300, large))]
    model = keras.Model([small, large], [keras.layers.Dense(3)(keras.layers.Concatenate()(pooled)),
                                         keras.layers.Dense(2, activation="sigmoid")(pooled[0])])
    model.compile("adam", ["categorical_crossentropy", "binary_crossentropy"])
    x, y = synthetic(model, None, 512, seed=0)
    assert isinstance(x, tuple) and isinstance(y, tuple)  # lists in order, as tf.data takes several tensors
    assert x[0].max() == 6 and x[1].max() == 299  # each below its own table, not the smallest one
    assert y[0].shape == (512, 3) and (y[0].sum(axis=1) == 1).all() and set(np.unique(y[0])) == {0, 1}  # one-hot
    assert y[1].shape == (512, 2) and set(np.unique(y[1])) == {0, 1}  # binary


@pytest.mark.slow
def test_a_subclassed_model_is_built_from_its_input_shape_or_says_how_in_one_line(keras):
    from tpulab.base.errors import TpulabError
    from tpulab.workloads.user_model.data import synthetic

    with pytest.raises(TpulabError) as e:
        load(SUBCLASSED)
    assert str(e.value) == ("Keras cannot see the input of this Classifier (a subclassed model, or one without "
                            "keras.Input): pass --input-shape with one example's shape (e.g. --input-shape 20), "
                            "or return (model, (x, y)) with your data")
    model = load(SUBCLASSED, (64,))
    assert model.built and model.count_params() == 64 * 256 + 256 + 256 * 10 + 10
    x, y = synthetic(model, (64,), 16, seed=0)
    assert x.shape == (16, 64) and x.dtype == np.float32 and y.shape == (16,) and y.max() < 10


@pytest.mark.slow
def test_the_users_own_data_keeps_its_structure(keras):
    from tpulab.workloads.user_model.data import arrays

    several = arrays([np.zeros((4, 2)), np.ones((4, 3))])  # a list of arrays: one per input
    assert isinstance(several, tuple) and [a.shape for a in several] == [(4, 2), (4, 3)]
    assert arrays([0, 1, 2]).shape == (3,)  # a list of labels: one array
    assert arrays({"words": [[1, 2]]})["words"].shape == (1, 2)


# --- in real workers ------------------------------------------------------------------------------
def result(stdout: str) -> dict:
    return json_events(stdout)[-1]


pytestmark = pytest.mark.usefixtures("quick_compiles", "shared_jax_cache")  # see conftest


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_two_inputs_and_two_named_outputs_train_on_synthetic_data(backend):
    r = run_cli("--run", "model", "--model", TWO_HEADS, *SMOKE, "--backend", backend, "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = result(r.stdout)
    assert out["status"] == "finished" and out["synthetic"]
    assert {"loss", "topic_loss", "score_loss"} <= set(out["summary"]["final_metrics"])
    # what was trained, and how: kept in the record, said in the summary
    model = out["model"]
    assert model["trainable_parameters"] == model["parameters"] > 0
    assert model["loss"] == "topic: sparse_categorical_crossentropy, score: mse" and model["loss_by"] == "your compile's"
    assert model["optimizer"] == "Adam(lr=0.001)" and model["inference"] == "model.predict (training=False)"
    said = dict((name, value) for name, value, _ in summary_rows(RunRecord.from_json(out)))
    assert said["loss"] == f"{model['loss']} (your compile's)" and said["optimizer"] == "Adam(lr=0.001)"
    assert said["model"].startswith(f"two_heads:build, {model['parameters']:,} parameters (all trained), sha256 ")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_subclassed_model_trains_from_its_input_shape(backend):
    r = run_cli("--run", "model", "--model", SUBCLASSED, "--input-shape", "64", *SMOKE, "--backend", backend,
                "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    out = result(r.stdout)
    assert out["status"] == "finished" and out["model"]["parameters"] == 64 * 256 + 256 + 256 * 10 + 10
    assert out["params"]["input_shape"] == "64"


@pytest.mark.slow
def test_a_subclassed_model_without_its_shape_fails_in_one_line_and_a_short_summary():
    r = run_cli("--run", "model", "--model", SUBCLASSED, *SMOKE, "--backend", "jax", env={"COLUMNS": "400"})
    assert r.returncode == EXIT_FAILED
    assert r.stdout.splitlines()[0] == ("failed: Keras cannot see the input of this Classifier (a "
                                        "subclassed model, or one without keras.Input): pass --input-shape with one "
                                        "example's shape (e.g. --input-shape 20), or return (model, (x, y)) with "
                                        "your data")
    for never in ("dtype", "versions", "FLOPs unknown", "steady step time", "no-samples"):
        assert never not in r.stdout  # no table of what a run that never stepped could not measure


@pytest.mark.slow
def test_a_train_step_of_ones_own_runs_and_is_counted_on_jax():
    r = run_cli("--run", "model", "--model", JAX_STEP, *SMOKE, "--backend", "jax", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    s = result(r.stdout)["summary"]
    dense = 2 * (64 * 256 + 256 * 10) * 8  # one forward pass of the batch of 8
    assert 2 * dense < s["flops_per_step"] < 4 * dense  # XLA's count of the user's own step
    assert s["final_metrics"]["loss"] > 0


@pytest.mark.slow
def test_a_jax_train_step_on_tensorflow_is_one_line():
    r = run_cli("--run", "model", "--model", JAX_STEP, *SMOKE, "--backend", "tensorflow", "--json")
    assert r.returncode == EXIT_FAILED
    assert result(r.stdout)["error"] == ("jax_train_step:build: its train_step(state, data) is written "
                                         "for another backend: on tensorflow Keras calls train_step(data); run it "
                                         "with --backend jax")


@pytest.mark.slow
def test_an_output_without_a_class_axis_under_a_sparse_loss_gets_labels_not_an_index_error(keras):
    from tpulab.workloads.user_model.data import synthetic

    inputs = keras.Input((4,), name="x")
    model = keras.Model(inputs, keras.layers.Reshape(())(keras.layers.Dense(1)(inputs)))
    model.compile(loss="sparse_categorical_crossentropy")
    x, y = synthetic(model, None, 8, seed=0)
    assert x.shape == (8, 4) and y.shape == (8,) and set(np.unique(y)) == {0}  # one class: nothing else to draw


@pytest.mark.slow
def test_a_train_step_with_optional_arguments_is_not_taken_for_another_backends(keras):
    from tpulab.workloads.user_model.keras import foreign_train_step

    class Own(keras.Model):
        def train_step(self, data, extra=None, **kwargs):  # Keras passes `data` alone, as on every backend but JAX
            return super().train_step(data)

    class Jaxish(keras.Model):
        def train_step(self, state, data):  # JAX's signature
            return super().train_step(state, data)

    on_jax = keras.backend.backend() == "jax"  # this process's Keras: decided by its environment, not by chance
    assert (foreign_train_step(Own()) is None) is not on_jax
    assert (foreign_train_step(Jaxish()) is None) is on_jax
