"""The user's own nn.Module: loaded, fed and trained by real torch on tiny shapes, in this process where no
worker is needed (the runner is called as a worker would), and through the real command for torch.compile."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from tpulab.base import fmt
from tpulab.base.errors import TpulabError, UsageError
from tpulab.base.events import Compiled, Epoch, Started, Step
from tpulab.engine.spec import resolve
from tpulab.machine.detect import detect
from tpulab.workloads import registry

from .helpers import ROOT, TF, json_events, run_cli, run_model_here, tree, watched, worker_imports

MLP = "examples/models/torch_mlp.py:build"
CNN = "examples/models/torch_cnn.py:build"
TWO = "examples/models/torch_two_inputs.py:build"
DICT = "examples/models/torch_dict_batch.py:build"


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_an_nn_module_picks_the_torch_backend_by_itself(tmp_path):
    both = detect(tree(tmp_path), {}, {**TF, "torch": "2.13.0+cpu"})
    spec = resolve("model", {"model": MLP}, both, "smoke")
    assert spec.backend == "torch" and spec.backend_reason == "torch_mlp:build imports PyTorch and not Keras: it runs on PyTorch"
    assert resolve("model", {"model": "examples/models/mlp.py:build"}, both, "smoke").backend == "tensorflow"


def test_the_mlp_trains_on_batches_like_its_example_with_a_stated_optimiser_and_counted_flops():
    """No --batch-size: the example input's batch (32 rows) is the run's, and the record says so."""
    events = run_model_here(MLP)
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.decided == {"batch_size": 32} and started.per_replica_batch == 32
    forward = 2 * 32 * (64 * 256 + 256 * 256 + 256 * 10)
    backward = 2 * 32 * (64 * 256 + 256 * 256 + 256 * 10) + 2 * 32 * (256 * 256 + 256 * 10)  # no grad of its input
    assert started.flops_per_step == forward + backward  # torch.utils.flop_counter's count
    assert started.model == {"parameters": 85_002, "trainable_parameters": 85_002, "optimizer": "Adam(lr=0.001)",
                             "loss": "cross-entropy",
                             "loss_by": "tpulab's: the output has no loss, and scores a class per example",
                             "example_read_as": "one positional input, module(x)",
                             "batch_from": "your example input's", "inference": "torch.inference_mode, module.eval()",
                             "compile": "off", "float32_matmul_precision": "highest", "autocast": None}
    assert started.synthetic and started.dataset == "synthetic inputs like the example inputs"
    assert [e.phase for e in events if isinstance(e, Compiled)] == ["train", "predict"]
    train = [e for e in events if isinstance(e, Step) and e.phase == "train"]
    assert len(train) == 2 and all(e.metrics["loss"] > 0 for e in train)  # smoke: 3 steps, the first apart
    assert [e.phase for e in events if isinstance(e, Step) and e.phase != "train"] == ["predict"]
    assert len([e for e in events if isinstance(e, Epoch)]) == 1


def test_the_cnn_trains_on_its_own_data():
    events = run_model_here(CNN, batch_size=64)
    [started] = [e for e in events if isinstance(e, Started)]
    assert not started.synthetic and started.dataset == "the function's data"
    assert started.model["example_read_as"] == ("inputs (x): one positional input, module(x); targets (y), as your "
                                                "forward cannot take both as inputs")
    assert started.model["loss"] == "cross-entropy" and started.flops_per_step > 0


def test_two_inputs_and_the_modules_own_loss():
    events = run_model_here(TWO, batch_size=16, precision="mixed_bfloat16")
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.model["loss"] == "the module's own" and started.model["autocast"] == "bfloat16"
    assert started.model["example_read_as"] == ("2 positional inputs, module(x1, x2): your forward takes both (for "
                                                "inputs and targets, return (module, ((x,), y)))")
    assert [e.metrics["loss"] >= 0 for e in events if isinstance(e, Step) and e.phase == "train"] == [True, True]


def test_a_dict_batch_is_passed_by_name_and_named_logits_are_trained_per_token():
    """`module(**batch)`, as a Hugging Face model takes it; its output's `logits` (8 x 32 tokens x 9 tags here)
    are scored by cross-entropy over their last dimension, a random tag per token, and the FLOPs are counted."""
    events = run_model_here(DICT, batch_size=4)
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.model["loss"] == "cross-entropy over the logits' last dimension" and started.synthetic
    forward = 2 * 4 * 32 * (64 * 64 + 64 * 9)  # the two linear layers; the embedding is a lookup
    assert started.flops_per_step is not None and started.flops_per_step > 2 * forward  # and the backward pass
    train = [e for e in events if isinstance(e, Step) and e.phase == "train"]
    assert len(train) == 2 and all(e.metrics["loss"] > 0 for e in train)
    assert [e.phase for e in events if isinstance(e, Step) and e.phase != "train"] == ["predict"]


BATCHES = """import dataclasses

import torch
from torch import nn


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor


class Net(nn.Module):  # forward(self, batch): its one argument, whatever its structure, and its own loss
    def __init__(self, get):
        super().__init__()
        self.get, self.linear = get, nn.Linear(4, 3)

    def forward(self, batch):
        x, y = self.get(batch)
        return nn.functional.cross_entropy(self.linear(x), y)


x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
positional_dict = lambda: (Net(lambda b: (b["x"], b["y"])), {"x": x, "y": y})
dict_in_a_tuple = lambda: (Net(lambda b: (b["x"], b["y"])), ({"x": x, "y": y},))
nested_dict = lambda: (Net(lambda b: (b["inputs"]["x"], b["labels"][0])), {"inputs": {"x": x}, "labels": (y,)})
dataclass = lambda: (Net(lambda b: (b.x, b.y)), Batch(x, y))


class Two(nn.Module):
    def forward(self, a, b):
        return a + b


two_named = lambda: (Two(), {"x": x, "y": y})
"""


@pytest.mark.parametrize("build, read_as", [
    ("positional_dict", "one positional dict input, module(batch) (keys x, y)"),
    ("dict_in_a_tuple", "one positional dict input, module(batch) (keys x, y)"),
    ("nested_dict", "one positional dict input, module(batch) (keys inputs, labels)"),
    ("dataclass", "one positional input, module(x) (a Batch)"),
])
def test_a_batch_of_any_nesting_is_the_forwards_one_argument(tmp_path, build, read_as):
    """`forward(self, batch)` given a dict, a dict in a tuple, a dict of a dict and a tuple, or a dataclass: random
    batches of the same structure (8 rows, like the example), trained, and the summary says how it was read."""
    from tpulab.views.console import model_rows

    (tmp_path / "batches.py").write_text(BATCHES)
    events = run_model_here(f"{tmp_path}/batches.py:{build}")
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.model["loss"] == "the module's own" and started.decided == {"batch_size": 8}
    assert ("example read as", read_as) in model_rows(started.model)
    assert [e.metrics["loss"] > 0 for e in events if isinstance(e, Step) and e.phase == "train"] == [True, True]


def test_a_dict_the_forward_takes_neither_by_name_nor_whole_is_one_line_saying_what_it_takes(tmp_path):
    (tmp_path / "batches.py").write_text(BATCHES)
    with pytest.raises(TpulabError) as e:
        run_model_here(f"{tmp_path}/batches.py:two_named")
    assert str(e.value) == ("batches:two_named: its forward(a, b) takes neither the dict's keys (x, y) by name nor the "
                            "dict as one argument: return (module, example_inputs) with what it takes (a tuple in "
                            "order, a dict by its parameters' names), or (module, (x, y)) for inputs and targets")


def test_an_output_with_its_own_loss_attribute_is_trained_on_it(tmp_path):
    """A `ModelOutput`-like object (not a dict: attributes `loss` and `logits`) from a dict batch with labels: the
    module's own loss is what is trained, as transformers' own training does."""
    (tmp_path / "own.py").write_text(
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n"
        "class Out:\n    def __init__(self, loss, logits):\n        self.loss, self.logits = loss, logits\n\n"
        "class LM(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)\n"
        "    def forward(self, input_ids, labels):\n        logits = self.head(self.embed(input_ids))\n"
        "        return Out(F.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1)), logits)\n\n"
        "def build():\n    ids = torch.randint(0, 50, (4, 10))\n"
        "    return LM(), {'input_ids': ids, 'labels': ids}\n")
    events = run_model_here(f"{tmp_path}/own.py:build", batch_size=4)
    [started] = [e for e in events if isinstance(e, Started)]
    assert started.model["loss"] == "the module's own" and started.flops_per_step
    assert [e.metrics["loss"] > 0 for e in events if isinstance(e, Step) and e.phase == "train"] == [True, True]


def test_a_module_alone_needs_its_input_shape(tmp_path):
    (tmp_path / "bare.py").write_text("import torch\n\ndef build():\n    return torch.nn.Linear(5, 1)\n")
    with pytest.raises(TpulabError, match="returned a module alone: pass --input-shape"):
        run_model_here(f"{tmp_path}/bare.py:build")
    [started] = [e for e in run_model_here(f"{tmp_path}/bare.py:build", input_shape="5") if isinstance(e, Started)]
    assert started.model["loss"] == "mean squared error" and started.model["parameters"] == 6


def test_something_else_than_a_module_is_one_line(tmp_path):
    (tmp_path / "nothing.py").write_text("import torch\n\ndef build():\n    return 42\n")
    with pytest.raises(TpulabError, match=r"nothing:build returned int, not a torch nn.Module"):
        run_model_here(f"{tmp_path}/nothing.py:build")


def test_compile_both_names_each_first_call_by_its_pass(monkeypatch):
    """--compile both: the summary's first calls read 'eager ..., compiled ...', never 'train' for the compiled
    pass; the log names each first call. (torch.compile is stubbed: the names are under test, not inductor.)"""
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec
    from tpulab.views.console import summary_rows
    from tpulab.views.narrate import describe

    monkeypatch.setattr("torch.compile", lambda module: module)
    monkeypatch.setattr("tpulab.workloads.user_model.torch.can_compile", lambda mode, device: None)
    monkeypatch.setattr("tpulab.workloads.user_model.torch.graph_breaks", lambda: "torch.compile: stubbed")
    events = run_model_here(MLP, compile="both", predict_steps=0)
    w = registry()["model"]
    rec = RunRecorder(RunSpec(w, w.parse({"model": MLP, "compile": "both", "device": "cpu"}, "smoke"), "torch",
                              "asked for", "cpu"), detect())
    said, steps = [], []
    for e in events:
        rec.feed(e)
        said.append(describe(e, rec) if isinstance(e, Compiled) else None)
        steps += [describe(e, rec).split("  ")[0]] if isinstance(e, Step) and e.phase != "predict" else []
    assert [line.split(" (")[0] for line in said if line] == ["first eager call", "first compiled call"]
    # issue 64, item 17: each pass counts its own steps, and says which it is ('step 3/8' was said twice)
    each = sum(isinstance(e, Step) and e.phase == "eager" for e in events) + 1  # its first call is step 1
    assert steps == [f"{side} step {i}/{each}" for side in ("eager", "compiled") for i in range(2, each + 1)], steps
    rec.finish("finished")
    rows = {name: value for name, value, _ in summary_rows(rec.record())}
    # the two first calls apart, never added; the run's own is the compiled pass's; each steady time named
    calls = rec.record().summary.compile_phases
    assert rows["first call (trace+compile)"] == (f"compiled {fmt.seconds(calls['compiled'])}, eager "
                                                  f"{fmt.seconds(calls['eager'])} (each pass's own)")
    assert rec.record().summary.compile_seconds == calls["compiled"]
    assert "steady step time" not in rows and rows["steady step time, compiled"].startswith(
        fmt.seconds(rec.record().summary.step_seconds.median)) and rows["steady step time, eager"] != "-"
    [flag] = [f.message for f in rec.record().summary.flags if f.code == "eager-vs-compiled"]
    assert "2 steady steps a side, too few for a verdict: 10 a side give one (--steps-per-epoch 11)" in flag


def test_eager_against_compiled_gives_a_verdict_from_ten_steps_a_side(monkeypatch):
    """The same module both ways (compile stubbed: the comparison is under test): with 10 steady steps a side, a
    verdict with its interval; the first calls apart."""
    from tpulab.engine.record import RunRecorder
    from tpulab.engine.spec import RunSpec

    monkeypatch.setattr("torch.compile", lambda module: module)
    monkeypatch.setattr("tpulab.workloads.user_model.torch.can_compile", lambda mode, device: None)
    monkeypatch.setattr("tpulab.workloads.user_model.torch.graph_breaks", lambda: "torch.compile: stubbed")
    events = run_model_here(MLP, compile="both", predict_steps=0, steps_per_epoch=11)
    w = registry()["model"]
    rec = RunRecorder(RunSpec(w, w.parse({"model": MLP, "compile": "both", "device": "cpu", "steps_per_epoch": 11},
                                         "smoke"), "torch", "asked for", "cpu"), detect())
    for e in events:
        rec.feed(e)
    rec.finish("finished")
    [flag] = [f.message for f in rec.record().summary.flags if f.code == "eager-vs-compiled"]
    assert "compiled against eager" in flag and "too few" not in flag and "%" in flag


@pytest.mark.slow
def test_an_nn_module_whose_imports_hide_torch_run_on_a_keras_backend_is_told_to_run_on_torch(tmp_path):
    """Where its imports do not say (a file that imports torch by name at run time), the worker that loaded it
    knows its class's framework: the line names it and the --backend that runs it."""
    (tmp_path / "hidden.py").write_text("import importlib\n\n\ndef build():\n"
                                        "    return importlib.import_module('torch').nn.Linear(4, 2)\n")
    r = run_cli("run", "model", "--model", f"{tmp_path}/hidden.py:build", "--backend", "tensorflow", "--preset",
                "smoke", "--no-ui", "--no-save", "--json", "--telemetry", "off")
    assert r.returncode == 1, r.stderr[-2000:]
    assert json_events(r.stdout)[-1]["error"] == ("hidden:build returned a PyTorch Linear, not a Keras "
                                                  "model: run it with --backend torch")


def test_compiling_on_a_cpu_without_a_cpp_compiler_is_refused_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no g++, clang++ or c++ there
    with pytest.raises(UsageError) as e:
        run_model_here(MLP, compile="on")
    assert str(e.value) == ("--compile on: torch.compile on a CPU needs a C++ compiler and none was found (g++, "
                            "clang++ or $CXX): install one (sudo apt-get install g++; on a Mac, xcode-select "
                            "--install), or use --compile off")


def test_compile_means_nothing_on_another_backend():
    w = registry()["model"]
    with pytest.raises(UsageError, match="--compile means nothing on --backend jax: JAX always compiles with XLA"):
        w.validate(w.parse({"model": MLP, "backend": "jax", "compile": "on"}, "smoke"), _limits())


def _limits():
    from tpulab.workloads.base import Limits

    return Limits({"cpu": 8, "gpu": 0, "tpu": 0})


@pytest.mark.slow
def test_eager_against_compiled_with_the_profile_in_one_command(tmp_path):
    """The issue's own command, at smoke size: both timed, the compile apart, graph breaks said, the op table;
    its worker never loads Keras (an nn.Module needs none: seconds of imports saved).

    Inductor's cache is the one runs of this test share (as torch's default is shared by a user's processes),
    not this test's fresh home: cold, inductor first compiles and runs six probes of the CPU's vector
    instructions, 10 s here, then the step's kernels; from its cache, 2 s in all. Hit or missed, it is recorded."""
    cache = Path(tempfile.gettempdir()) / "tpulab-tests-torch-cache"
    r = run_cli("run", "model", "--model", MLP, "--compile", "both", "--profile", "--preset", "smoke",
                "--steps-per-epoch", "11", "--no-ui", "--no-save", "--json", timeout=600,  # 10 steady steps a side
                env={**watched(tmp_path / "home"), "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert [(w["code"], w["keras"], w["tensorflow"]) for w in worker_imports(tmp_path / "home")] == [(0, False, [])]
    out = json_events(r.stdout)[-1]
    s = out["summary"]
    assert out["backend"] == "torch" and out["model"]["compile"] == "both"
    assert set(s["compile_phases"]) == {"eager", "compiled"}
    assert s["compile_phases"]["compiled"] > s["compile_phases"]["eager"]
    [flag] = [f for f in s["flags"] if f["code"] == "eager-vs-compiled"]
    assert "compiled against eager" in flag["message"] and "noise threshold" in flag["message"]
    assert any(w in flag["message"] for w in ("faster", "slower", "no difference detected"))
    assert s["cache_hit"] is not None  # inductor's cache was asked: hit or missed, recorded
    profile = s["profile"]
    assert profile["profiler"] == "torch.profiler" and profile["ops"]
    assert any(op["flops"] for op in profile["ops"]) and all(op["bytes"] is None for op in profile["ops"])
    assert (Path(profile["trace_path"]) / "torch_trace.json").is_file()  # the Chrome trace Perfetto opens
    assert "torch.compile: compiled forward, graph 1 of 1 (5 ops); no graph break (the module compiled whole)" \
        in out["logs"]  # the MLP's three linear layers and two ReLUs, as the op table names the graph


@pytest.mark.slow
def test_a_graph_break_is_named_where_torch_compile_reports_it(tmp_path):
    (tmp_path / "breaks.py").write_text(
        "import torch\n\n\nclass Breaks(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n"
        "        h = self.a(x)\n        if h.sum().item() > 1e9:  # data-dependent: dynamo breaks the graph here\n"
        "            h = h * 2\n        return self.b(h)\n\n\ndef build():\n    return Breaks(), torch.randn(8, 4)\n")
    from tpulab.base.events import Log

    events = run_model_here(f"{tmp_path}/breaks.py:build", compile="on", predict_steps=0)
    [said] = [e.text for e in events if isinstance(e, Log) and e.text.startswith("torch.compile")]
    assert "graph break" in said and "no graph break" not in said and "item" in said.lower()
    assert re.match(r"torch.compile: compiled forward, graph 1 of [2-9] \(\d+ ops\)", said)  # the break: two or more


@pytest.mark.slow
def test_a_keras_model_runs_on_keras_torch_backend_with_torchs_flop_count():
    """A file that imports Keras stays a Keras model on --backend torch: the shared Keras runner, eager; its
    step's FLOPs as torch.utils.flop_counter counts its matmuls (forward, and backward but for the input's)."""
    r = run_cli("run", "model", "--model", "examples/models/mlp.py:build", "--backend", "torch", "--preset", "smoke",
                "--no-ui", "--no-save", "--json")  # no --batch-size: tpulab's 32, decided and said
    assert r.returncode == 0, r.stderr[-3000:]
    out = json_events(r.stdout)[-1]
    layers = 64 * 256 + 256 * 256 + 256 * 10
    assert out["summary"]["flops_per_step"] == 2 * 32 * (2 * layers + 256 * 256 + 256 * 10)  # batch 32
    assert out["params"]["batch_size"] == 32 and out["model"]["batch_from"] == "tpulab's default (--batch-size sets it)"
    assert out["summary"]["final_metrics"]["loss"] > 0
