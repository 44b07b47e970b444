"""The models people bring from a library: Hugging Face transformers and timm models built from configs with
random weights (real libraries, tiny shapes), their outputs understood, their loss said and whose, their batch and
where it came from; and the one-line refusals where a model cannot be built or called."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from tpulab.base.errors import TpulabError
from tpulab.base.events import Started, Step
from tpulab.workloads import registry
from tpulab.workloads.base import Limits, ParamError

from .helpers import ROOT, json_events, run_cli, run_model_here, watched

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)


def gpt2_folder(folder, **extra) -> str:
    """A tiny GPT-2's config.json, as save_pretrained writes it (its architecture named)."""
    from transformers import GPT2Config

    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=32, n_layer=1, n_head=2, bos_token_id=0,
                        eos_token_id=0, architectures=["GPT2LMHeadModel"], **extra)
    config.save_pretrained(folder)
    return str(folder)


def started_of(events: list) -> Started:
    [started] = [e for e in events if isinstance(e, Started)]
    return started


def trained(events: list) -> list[float]:
    return [e.metrics["loss"] for e in events if isinstance(e, Step) and e.phase == "train"]


def test_a_causal_lm_trains_on_its_own_loss_with_labels_made_from_its_input_ids():
    """transformers' GPT-2 (a CausalLMOutputWithCrossAttentions, from a dict batch without labels): its input ids
    are its labels, as transformers trains a causal LM; the example's batch of 8 is the run's, and said."""
    events = run_model_here("examples/models/hf_causal_lm.py:build")
    started = started_of(events)
    assert started.model["loss"] == "the module's own"
    assert started.model["loss_by"] == "its labels: the input ids, shifted by the model, as a causal LM trains"
    assert started.decided == {"batch_size": 8} and started.model["batch_from"] == "your example input's"
    assert started.flops_per_step and started.model["parameters"] == started.model["trainable_parameters"] > 0
    losses = trained(events)
    assert len(losses) == 2 and all(6 < x < 9 for x in losses)  # ~ln(2048) = 7.6: random weights, the LM's own loss


def test_an_image_classifier_without_labels_is_trained_on_its_logits_by_a_stated_choice():
    events = run_model_here("examples/models/hf_image_classifier.py:build", batch_size=4)
    started = started_of(events)
    assert started.model["loss"] == "cross-entropy"
    assert started.model["loss_by"] == "tpulab's: the output has no loss, and scores a class per example"
    assert started.decided == {} and started.model["batch_from"] == "--batch-size (your example input had 16)"
    assert started.per_replica_batch == 4 and all(x > 0 for x in trained(events))


def test_a_tuple_output_is_scored_on_its_first_tensor(tmp_path):
    (tmp_path / "pair.py").write_text(
        "import torch\n\nclass Pair(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.body = torch.nn.Linear(6, 3)\n    def forward(self, x):\n        h = self.body(x)\n"
        "        return h, h.detach() * 0\n\ndef build():\n    return Pair(), torch.randn(5, 6)\n")
    started = started_of(events := run_model_here(f"{tmp_path}/pair.py:build"))
    assert started.model["loss"] == "cross-entropy" and started.model["batch_from"] == "your example input's"
    assert started.per_replica_batch == 5 and len(trained(events)) == 2


def test_a_config_folder_builds_the_model_it_names(tmp_path):
    events = run_model_here(f"hf:{gpt2_folder(tmp_path / 'gpt2')}", batch_size=2, seq_len=16)
    started = started_of(events)
    assert started.dataset == "random token ids from its config (512 in its vocabulary, 16 per example)"
    assert started.synthetic and started.model["loss"] == "the module's own" and started.flops_per_step
    assert started.model["batch_from"] == "--batch-size" and len(trained(events)) == 2


def test_timm_by_name_on_images_of_its_configs_size():
    events = run_model_here("timm:test_vit", batch_size=2)
    started = started_of(events)
    assert started.dataset == "random images of its input size (3 x 160 x 160)"
    assert started.model["loss"] == "cross-entropy" and started.model["parameters"] > 100_000
    assert len(trained(events)) == 2


def test_a_timm_model_from_the_users_file():
    started = started_of(run_model_here("examples/models/timm_model.py:build", batch_size=2))
    assert started.model["loss"] == "cross-entropy" and started.flops_per_step


@pytest.mark.parametrize(("model", "said"), [
    ("hf:no-such-model-anywhere", "hf:no-such-model-anywhere: no config in that folder or the local Hugging Face "
                                  "cache"),
    ("timm:no_such_net", "timm:no_such_net: RuntimeError: Unknown model (no_such_net)"),
])
def test_a_model_a_library_cannot_build_offline_is_one_line(model, said):
    with pytest.raises(TpulabError) as caught:
        run_model_here(model)
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_a_config_without_its_class_or_weights_is_one_line(tmp_path):
    folder = tmp_path / "bare"
    gpt2_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    with pytest.raises(TpulabError, match=r"--weights pretrained: hf:.* has no weights on disk"):
        run_model_here(f"hf:{folder}", weights="pretrained", batch_size=2, seq_len=8)
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(TpulabError, match=r"names no model class transformers has \(none\): add \"architectures\""):
        run_model_here(f"hf:{folder}", batch_size=2, seq_len=8)
    with pytest.raises(TpulabError, match=r"--seq-len must be at most 64, hf:.*'s positions \(got 65\)"):
        gpt2_folder(folder)
        run_model_here(f"hf:{folder}", batch_size=2, seq_len=65)


def test_what_the_declaration_refuses_before_a_worker_starts(tmp_path):
    w = registry()["model"]
    empty = tmp_path / "empty"
    empty.mkdir()
    for values, said in [({"model": f"hf:{empty}"}, "no config.json in"),
                         ({"model": "hf:"}, "needs a Hugging Face model's folder"),
                         ({"model": "timm:resnet18", "weights": "pretrained"}, "only an hf: model takes pretrained"),
                         ({"model": "timm:resnet18", "backend": "jax"}, "is a PyTorch model: run it with --backend "
                                                                         "torch")]:
        with pytest.raises(ParamError, match=said):
            w.validate(w.parse(values), Limits({"cpu": 8, "gpu": 0, "tpu": 0}))


@pytest.mark.slow
def test_a_module_whose_forward_needs_what_cannot_be_made_up_is_refused_in_one_line(tmp_path):
    """exit 1, one line naming what tpulab could not do and what to pass instead; no traceback."""
    (tmp_path / "needs.py").write_text(
        "import torch\n\nclass Needs(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.body = torch.nn.Linear(4, 2)\n    def forward(self, x, lengths):\n"
        "        return self.body(x)[: lengths.max()]\n\ndef build():\n    return Needs()\n")
    r = run_cli("run", "model", "--model", f"{tmp_path}/needs.py:build", "--input-shape", "4", "--preset", "smoke",
                "--no-ui", "--no-save", env=watched(tmp_path / "home"))
    assert r.returncode == 1, r.stderr[-2000:]
    said = " ".join(r.stdout.split())  # as the summary's table wraps it
    assert "failed: needs:build: tpulab cannot call its forward on input 1 (32, 4) float32: TypeError: " in said
    assert "missing 1 required positional argument: 'lengths'; return (module, example_inputs)" in said
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.slow
def test_a_hugging_face_folder_through_the_command_keeps_what_was_timed(tmp_path):
    """`--model hf:DIR` from a config a test wrote: the record keeps FLOPs, parameters, the loss and whose, the
    optimizer and the batch, and its worker never loads Keras."""
    env = watched(tmp_path / "home")
    r = run_cli("run", "model", "--model", f"hf:{gpt2_folder(tmp_path / 'gpt2')}", "--seq-len", "16", "--preset",
                "smoke", "--no-ui", "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json_events(r.stdout)[-1]
    model, s = out["model"], out["summary"]
    assert model["name"] == f"hf:{tmp_path / 'gpt2'}" and model["library"] == "transformers" and model["sha256"]
    assert model["loss"] == "the module's own" and "causal LM" in model["loss_by"]
    assert model["optimizer"] == "Adam(lr=0.001)" and model["parameters"] > 0
    assert out["params"]["batch_size"] == 32 and model["batch_from"] == "tpulab's default (--batch-size sets it)"
    assert s["flops_per_step"] > 0 and s["examples_per_s"] > 0
    shown = run_cli("results", "show", out["id"], env=env)
    assert "loss" in shown.stdout and "causal LM" in shown.stdout and "batch from" in shown.stdout


@pytest.mark.slow
def test_a_compiled_hugging_face_model_names_its_graphs_in_the_op_table(tmp_path):
    """The issue's command: transformers' GPT-2 through `--compile both --profile` at smoke size. The record keeps
    FLOPs, parameters, the loss and the optimizer; the op table names the compiled forward and backward graphs
    (never inductor's hash), and the compile log names the same graphs and the breaks' reasons.

    Inductor's cache is the one the torch tests share (test_torch_models.py says why)."""
    cache = Path(tempfile.gettempdir()) / "tpulab-tests-torch-cache"
    r = run_cli("run", "model", "--model", "examples/models/hf_causal_lm.py:build", "--compile", "both", "--profile",
                "--preset", "smoke", "--no-ui", "--no-save", "--json", timeout=600,
                env={**watched(tmp_path / "home"), "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json_events(r.stdout)[-1]
    model, s = out["model"], out["summary"]
    assert model["parameters"] > 0 and model["loss"] == "the module's own" and model["optimizer"] == "Adam(lr=0.001)"
    assert s["flops_per_step"] > 0 and set(s["compile_phases"]) == {"eager", "compiled"}
    names = [op["name"] for op in s["profile"]["ops"]]
    assert any(re.fullmatch(r"compiled forward, graph 1 of \d+ \(\d+ ops\)", n) for n in names), names
    assert "compiled backward, graph 1" in names and not any("CompiledFxGraph" in n for n in names)
    [log] = [line for line in out["logs"] if line.startswith("torch.compile:")]
    assert re.match(r"torch\.compile: compiled forward, graph 1 of \d+ \(\d+ ops\)", log)
