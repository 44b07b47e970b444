"""ResNet-50, the transformer and the user's own model: FLOP formulas, the inference phase, MFU, the
user's file and each way it can be wrong, on tiny shapes in real workers."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tpulab.base.basis import EXAMPLES, GFLOPS, Work, basis
from tpulab.base.errors import out_of_memory
from tpulab.base.events import Compiled, Step
from tpulab.views.listing import list_row
from tpulab.engine.runindex import RunRow
from tpulab.engine.store import Store, compare, row
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError
from tpulab.workloads.resnet50 import forward_macs
from tpulab.workloads.transformer import TRANSFORMER, flops_per_token, matmul_parameters, parameters
from tpulab.workloads.user_model import MODEL_WORKLOAD, target

from .helpers import EIGHT_CPUS, ROOT, json_events, recorder, run_cli, watched, worker_imports

MLP = "examples/models/mlp.py:build"


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example paths are relative to it, as in the README


# --- declarations, without a framework --------------------------------------------------------
def test_resnet50_flops_are_the_papers():
    # He et al. (2015), table 1: 3.8 x 10^9 multiply-adds for ResNet-50 at 224x224.
    assert 3.8e9 < forward_macs(224, 1000) < 3.9e9
    p = registry()["resnet50"].preset("smoke")
    assert registry()["resnet50"].flops_per_step(p) == 3 * 2 * forward_macs(32, 10) * 2


def test_transformer_flops_follow_the_standard_formula():
    p = TRANSFORMER.preset("gpt2-small")
    n = matmul_parameters(p)
    assert flops_per_token(p) == 6 * n + 12 * 12 * 768 * 1024
    assert flops_per_token(p, training=False) == 2 * n + 4 * 12 * 768 * 1024
    assert TRANSFORMER.flops_per_step(p) == flops_per_token(p) * 1024 * p["batch_size"]
    with pytest.raises(ParamError, match="--heads must divide --width 64"):
        TRANSFORMER.resolve({"heads": "3"}, EIGHT_CPUS, "smoke")


def test_inference_is_kept_apart_from_training_and_mfu_is_the_model_flops_fraction():
    p = TRANSFORMER.preset("smoke")
    rec = recorder("transformer", p, TRANSFORMER.flops_per_step(p))
    rec.feed(Compiled(seconds=3.0, phase="train"))
    for i in (2, 3, 4):
        rec.feed(Step(step=i, seconds=0.1, phase="train"))
    rec.feed(Compiled(seconds=1.0, phase="predict"))
    rec.feed(Step(step=2, seconds=0.02, phase="predict"))
    s = rec.summary()
    assert s.compile_seconds == 3.0 and s.inference_compile_seconds == 1.0
    assert s.step_seconds.median == pytest.approx(0.1) and s.step_seconds.count == 3
    assert s.inference_step_seconds.median == pytest.approx(0.02) and s.inference_step_seconds.count == 1
    tokens = p["batch_size"] * p["seq_len"]
    assert s.throughput_unit == "tokens/s" and s.throughput == pytest.approx(tokens / 0.1)
    assert s.inference_throughput == pytest.approx(tokens / 0.02)
    assert s.mfu == s.peak_fraction and 0 < s.mfu < 1
    assert rec.steps_done() == 6  # both first calls and the four timed steps


def test_a_users_model_shows_no_mfu_and_keeps_its_identity():
    p = MODEL_WORKLOAD.resolve({"model": MLP}, EIGHT_CPUS, "smoke")
    rec = recorder("model", p, None, model={"parameters": 85002})
    rec.feed(Compiled(seconds=1.0))
    rec.feed(Step(step=2, seconds=0.01))
    rec.finish("finished")
    r = rec.record()
    assert r.summary.mfu is None and r.summary.peak_fraction is None and r.summary.examples_per_s == 3200  # 32 / 0.01 s
    assert r.model["name"] == "mlp:build" and r.model["parameters"] == 85002
    assert r.model["sha256"] == __import__("hashlib").sha256((ROOT / "examples/models/mlp.py").read_bytes()) \
        .hexdigest()[:16]
    assert list_row(RunRow.of(r))[2] == "mlp:build" and row(r)["model"] == "mlp:build"  # the listing's cell
    other = {**r.to_json(), "id": "f" * 32, "model": {**r.model, "sha256": "0" * 16}}
    cmp = compare([r, type(r).from_json(other)])
    assert cmp.by == EXAMPLES and any("the models differ" in w for w in cmp.warnings)


def test_another_model_is_never_the_same_work():
    assert basis([Work(1e9, 8, "a@1"), Work(1e9, 8, "b@2")]).by == GFLOPS
    assert basis([Work(None, 8, "a@1"), Work(None, 8, "a@2")]).by == EXAMPLES


def test_out_of_memory_is_recognised_in_each_frameworks_words():
    assert out_of_memory(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.2GiB"))
    assert out_of_memory(type("ResourceExhaustedError", (Exception,), {})("OOM when allocating tensor"))
    assert not out_of_memory(ValueError("shapes (2, 3) and (4,) are incompatible"))


@pytest.mark.parametrize("given, says", [
    ("", "--model is required"),
    ("mlp.py", "--model must be FILE.py:FUNCTION or module:function"),
    ("examples/models/nope.py:build", "no file examples/models/nope.py"),
    ("examples/models/mlp.py:make", "mlp.py has no top-level function 'make'"),
    ("no_such_module_anywhere:build", "no module no_such_module_anywhere"),
])
def test_a_wrong_model_is_one_line_before_any_worker(given, says):
    with pytest.raises(ParamError, match=says):
        target(given)


def test_a_wrong_model_on_the_command_line_exits_2_without_a_traceback():
    r = run_cli("--run", "model", "--model", "examples/models/mlp.py:make", "--no-ui", "--no-save", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["tpulab: error: --model examples/models/mlp.py:make: mlp.py has no "
                                             "top-level function 'make'"]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_transformers_file_on_a_keras_backend_is_refused_in_one_line_before_any_worker(backend, tpulab_home,
                                                                                         monkeypatch, capsys):
    """Its imports (transformers, torch, no Keras) say PyTorch: refused at once, exit 2, no worker started (on
    TensorFlow, transformers' triton loaded after TensorFlow killed it by SIGSEGV) and no failed run kept."""
    from tpulab.cli.main import main
    from tpulab.engine.worker import RunHandle

    monkeypatch.setattr(RunHandle, "__init__", lambda *a, **k: pytest.fail("a worker was started"))
    with pytest.raises(SystemExit) as e:
        main(["run", "model", "--model", "examples/models/hf_causal_lm.py:build", "--backend", backend, "--no-ui"])
    assert e.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["tpulab: error: --model hf_causal_lm:build imports PyTorch and "
                                                    "not Keras: run it with --backend torch (or leave --backend out)"]
    assert not (tpulab_home / "results.db").exists() or Store(tpulab_home / "results.db").count() == 0


def test_a_files_framework_is_read_from_its_imports_and_from_its_own_modules_beside_it(tmp_path):
    (tmp_path / "net.py").write_text("from transformers import GPT2LMHeadModel\n")
    (tmp_path / "lm.py").write_text("from net import GPT2LMHeadModel\n\ndef build():\n    pass\n")
    (tmp_path / "both.py").write_text("import keras\nimport torch\n\ndef build():\n    pass\n")
    w = registry()["model"]
    with pytest.raises(ParamError, match=r"^--model lm:build imports PyTorch and not Keras: run it with --backend torch"):
        w.validate(w.parse({"model": f"{tmp_path}/lm.py:build", "backend": "jax"}, "smoke"), EIGHT_CPUS)
    w.validate(w.parse({"model": f"{tmp_path}/both.py:build", "backend": "jax"}, "smoke"), EIGHT_CPUS)  # Keras: any


def test_a_module_function_is_found_without_importing_it(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text("raise SystemExit('imported!')\ndef build():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = target("mymodels:build")
    assert t.path == tmp_path / "mymodels.py" and t.label == "mymodels:build"


# --- in real workers --------------------------------------------------------------------------
def result(stdout: str) -> dict:
    return json_events(stdout)[-1]


pytestmark = pytest.mark.usefixtures("quick_compiles", "shared_jax_cache")  # see conftest


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_transformer_smoke_trains_then_prefills_in_80_columns_saying_its_data_is_tokens(backend, tmp_path):
    """What the run prints at 80 columns, and what it keeps (one run per backend: a Keras worker is seconds)."""
    db, home = tmp_path / "r.db", tmp_path / "home"
    r = run_cli("run", "transformer", "--preset", "smoke", "--backend", backend, "--no-ui", "--telemetry", "off",
                "--db", str(db), env={"COLUMNS": "80", **watched(home)})
    assert r.returncode == 0, r.stderr[-2000:]
    [worker] = worker_imports(home)  # TensorFlow's import leaves JAX out (only TFLite's converter from JAX uses it)
    assert worker["jax"] == (backend == "jax")
    assert find_spec("matplotlib") and worker["keras"] and not worker["matplotlib"]  # Keras's plots: no run draws
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "SYNTHETIC DATA: random tokens: the loss means nothing" in lines
    steps = [line for line in lines if line.startswith(("step ", "predict step "))]
    assert len(steps) == 5 and all(line.endswith("[synthetic]") for line in steps)
    assert not any(line.startswith("[synthetic") for line in lines)  # never a line of its own
    [kept] = Store(db).records()
    # each phase's first call was its compile, timed apart from its steps
    assert [s.phase for s in kept.steps] == ["train"] * 3 + ["predict"] * 2
    s = kept.summary
    assert s.compile_seconds and s.compile_seconds > 0 and s.inference_compile_seconds
    assert s.throughput_unit == "tokens/s" and s.throughput == pytest.approx(s.examples_per_s * 32)
    assert s.mfu is not None and 0 < s.mfu < 1 and s.mfu == s.peak_fraction
    assert s.inference_throughput and s.inference_throughput > 0
    assert s.inference_step_seconds is not None and s.inference_step_seconds.count == 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_resnet50_one_step_at_32x32(backend):
    r = run_cli("--run", "resnet50", "--preset", "smoke", "--steps-per-epoch", "1", "--predict-steps", "1",
                "--backend", backend, "--no-ui", "--json", "--no-save")
    assert r.returncode == 0, r.stderr[-2000:]
    started = json_events(r.stdout)[0]
    assert started["flops_per_step"] == 3 * 2 * forward_macs(32, 10) * 2 and started["synthetic"]
    assert started["model"]["parameters"] == 23_608_202  # ResNet-50's 25.6M less the 1000-class head, 10 classes
    out = result(r.stdout)
    assert out["status"] == "finished" and out["summary"]["throughput_unit"] == "images/s"
    assert out["summary"]["compile_seconds"] > 0 and out["summary"]["inference_compile_seconds"] > 0


@pytest.mark.slow
def test_the_transformer_is_the_model_its_formula_counts():
    keras = pytest.importorskip("keras")
    p = TRANSFORMER.preset("smoke")
    model = TRANSFORMER.build_model(p)
    assert model.count_params() == parameters(p)
    embeddings = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Embedding)]
    assert sum(layer.count_params() for layer in embeddings) == parameters(p) - matmul_parameters(p)


@pytest.mark.slow
def test_a_users_model_end_to_end_on_jax_with_2_shards(tmp_path):
    db = tmp_path / "runs.db"
    r = run_cli("--run", "model", "--model", MLP, "--preset", "smoke", "--backend", "jax", "--shards", "2",
                "--batch-size", "8", "--no-ui", "--json", "--db", str(db))
    assert r.returncode == 0, r.stderr[-2000:]
    out = result(r.stdout)
    assert out["device"]["replicas"] == 2 and out["model"]["parameters"] == 85_002
    # XLA's count of the whole step: at least the three passes over the dense layers, for the global batch.
    dense = 2 * (64 * 256 + 256 * 256 + 256 * 10) * 8
    assert 3 * dense <= out["summary"]["flops_per_step"] < 5 * dense
    assert out["summary"]["mfu"] is None and out["summary"]["peak_fraction"] > 0
    [kept] = Store(db).records()
    assert kept.model["name"] == "mlp:build" and kept.model["sha256"] and kept.model["parameters"] == 85_002
    listing = run_cli("results", "list", "--db", str(db), timeout=60)
    assert "mlp:build" in listing.stdout  # the model, by its name, in the workload column


@pytest.mark.slow
def test_a_users_model_with_its_data_on_tensorflow_has_unknown_flops():
    r = run_cli("--run", "model", "--model", "examples/models/cnn.py:build", "--preset", "smoke", "--backend",
                "tensorflow", "--no-ui", "--no-save")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "the function's data" in r.stdout and "SYNTHETIC" not in r.stdout
    assert "unavailable: FLOPs unknown" in r.stdout


BROKEN = {
    "raises.py": "import keras\n\ndef helper():\n    raise ValueError('my layer is wrong')\n\n"
                 "def build():\n    return helper()\n",
    "uncompiled.py": "import keras\n\ndef build():\n    return keras.Sequential([keras.Input((4,)), "
                     "keras.layers.Dense(2)])\n",
    "notamodel.py": "def build():\n    return 42\n",
    "usestf.py": "import tensorflow as tf\n\ndef build():\n    pass\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("name, says", [
    ("raises.py", ["raises:build raised ValueError: my layer is wrong", "Traceback (your code):",
                   "line 7, in build", "line 4, in helper"]),
    ("uncompiled.py", ["uncompiled:build returned a model that is not compiled: call model.compile("]),
    ("notamodel.py", ["notamodel:build returned int, not a Keras model"]),
    ("usestf.py", ["usestf:build imports tensorflow, which this worker never loads: on a TPU the first framework "
                   "to initialise it wins"]),
])
def test_a_users_failing_code_is_their_traceback_or_one_line(tmp_path, name, says):
    (tmp_path / name).write_text(BROKEN[name])
    r = run_cli("--run", "model", "--model", f"{tmp_path / name}:build", "--preset", "smoke", "--backend", "jax",
                "--no-ui", "--json", "--no-save")
    assert r.returncode == 1
    error = result(r.stdout)["error"]
    assert all(line in error for line in says), error
    assert "tpulab/" not in error  # their frames only


async def test_the_labs_form_takes_a_models_path(cpu_machine):
    from textual.widgets import Static

    from tpulab.lab.app import TpulabApp
    from tpulab.lab.widgets.param_form import ParamForm

    from .helpers import SIZE, paste_into, text

    app = TpulabApp(probe=False, workload="model", report=cpu_machine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        form = app.query_one(ParamForm)
        assert form.params is None and "--model is required" in text(app.query_one("#error-model", Static))
        await paste_into(pilot, app, "model", "examples/models/mlp.py:nope")
        await pilot.pause()
        assert form.params is None
        assert "has no top-level function 'nope'" in text(app.query_one("#error-model", Static))
        await paste_into(pilot, app, "model", MLP)
        await pilot.pause()
        assert form.params is not None and form.params["model"] == MLP
