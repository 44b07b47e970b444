"""decode of the user's own language model (`--model hf:DIR` or `hf:NAME`): a transformers causal LM whose
config.json sets decode's shape (so its parameters, bytes per token and KV cache follow the model), run on
PyTorch over a transformers static cache, timed per token and verified like tpulab's own decoder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpulab.workloads.base import ParamError
from tpulab.workloads.decode import DECODE
from tpulab.workloads.decode.arithmetic import kv_cache_bytes, matmul_bytes, parameters
from tpulab.workloads.decode.hf_shape import shape_of
from tpulab.workloads.shared.model_source import hf_config

from .helpers import json_events, run_cli

TINY = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 256, "max_position_embeddings": 128, "num_hidden_layers": 2}
SHAPE = {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2, "mlp_width": 128, "vocab": 256, "context": 128,
         "positions": "rope", "block": "llama"}


def llama(folder: Path, tied: bool = False) -> Path:
    """A 2-layer Llama's config in `folder`, as transformers writes it (random weights: no weights file)."""
    from transformers import LlamaConfig

    LlamaConfig(**TINY, tie_word_embeddings=tied, architectures=["LlamaForCausalLM"]).save_pretrained(folder)
    return folder


def cached(hub: Path, name: str, folder: Path) -> None:
    """`folder`'s config.json as the Hugging Face cache in `hub` holds `name`'s (a snapshot that refs/main names)."""
    repo = hub / f"models--{name.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text((folder / "config.json").read_text())


def test_a_llama_and_a_gpt2_config_give_decodes_shape():
    # GPT-2 small's config: its 124,439,808 weights (tied embeddings), as the gpt2-small preset counts them
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}
    assert parameters({**DECODE.defaults(), **shape_of("gpt2", gpt2)}) == 124_439_808
    assert shape_of("tiny", {"model_type": "llama", **TINY}) == SHAPE
    no_kv = {k: v for k, v in TINY.items() if k != "num_key_value_heads"}
    assert shape_of("tiny", {"model_type": "mistral", **no_kv})["kv_heads"] == 4  # absent: every head its own
    with pytest.raises(ParamError, match="its heads are 32 wide, not its width / heads"):
        shape_of("wide", {"model_type": "qwen2", **TINY, "head_dim": 32})


def test_a_name_is_read_from_the_local_hugging_face_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    cached(tmp_path / "hub", "org/tiny-llama", llama(tmp_path / "model"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    source, config = hf_config("hf:org/tiny-llama", "model")
    assert source == "org/tiny-llama" and config["num_hidden_layers"] == 2
    with pytest.raises(ParamError, match="no config.json for it in the local Hugging Face cache"):
        hf_config("hf:not-cached", "model")


@pytest.mark.parametrize("flags, line", [
    (["--backend", "jax"], "--model means nothing on --backend jax: a transformers model runs on PyTorch, a GGUF "
                           "file on llama.cpp: use --backend torch or llamacpp"),
    (["--layers", "4"], "--layers 4: hf:{dir}'s config.json says 2 (with --model, the shape is the model's)"),
    (["--prompt-len", "100", "--gen-len", "100"], "--prompt-len 100 plus --gen-len 100 must fit --context 128 "
                                                  "(got 200)"),
])
def test_what_cannot_run_is_refused_in_one_line(tmp_path, flags, line):
    folder = llama(tmp_path)
    r = run_cli("run", "decode", "--model", f"hf:{folder}", *flags, "--no-ui", "--no-save", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"tpulab: error: {line.format(dir=folder)}"]


def test_a_model_type_decode_cannot_count_is_refused_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    r = run_cli("run", "decode", "--model", f"hf:{tmp_path}", "--no-ui", "--no-save", timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"tpulab: error: --model hf:{tmp_path}: its model_type is bert; decode "
                                             "knows llama, mistral, qwen2, gpt2 (their shapes give its figures)"]


@pytest.mark.slow
@pytest.mark.parametrize("tied, by_name", [(False, False), (True, True)], ids=["folder-untied", "cached-name-tied"])
def test_a_transformers_llama_decodes_a_token_per_step_verified(tmp_path, tied, by_name):
    """The real command on a 2-layer Llama: its config's shape in the record, a step per token, verified."""
    folder = llama(tmp_path / "model", tied)
    spec, env = f"hf:{folder}", {}
    if by_name:  # a name in the local cache, which the worker loads offline too
        cached(tmp_path / "hub", "org/tiny-llama", folder)
        spec, env = "hf:org/tiny-llama", {"HF_HUB_CACHE": str(tmp_path / "hub")}
    r = run_cli("run", "decode", "--model", spec, "--prompt-len", "8", "--gen-len", "8", "--batch-size", "2",
                "--no-ui", "--no-save", "--json", "--verify", timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    events = json_events(r.stdout)
    started, result = events[0], events[-1]
    p = result["params"]
    assert {k: p[k] for k in SHAPE} == SHAPE and p["backend"] == "torch" and p["model"] == spec
    # the module's own count; an untied output projection is a second vocab x width matrix, which decode's arithmetic
    # counts once (a token reads one row of the token table and the whole projection: its bytes per token are right)
    untied = 0 if tied else p["vocab"] * p["width"]
    assert started["model"]["parameters"] == parameters(p) + untied
    assert started["bytes_per_step"] == matmul_bytes(p) + kv_cache_bytes(p)  # the weights a token reads, the cache
    tokens = [(e["phase"], e["step"]) for e in events if e["event"] == "step" and e["phase"] in ("prefill", "decode")]
    assert tokens == [("prefill", 0)] + [("decode", i) for i in range(1, 8)]
    figures = result["summary"]["figures"]
    assert result["status"] == "finished" and figures["decode_tokens_per_s"] > 0
    assert 0 <= figures["verified"] < 1e-5


@pytest.mark.slow
def test_a_transformers_config_decodes_on_llama_cpp_as_a_gguf_file_of_its_shape(tmp_path):
    """Its random weights, written as GGUF in its config's shape: llama.cpp's figures beside PyTorch's, like for
    like; its pretrained weights are refused there, with what to do instead."""
    folder = llama(tmp_path / "model")
    args = ("run", "decode", "--model", f"hf:{folder}", "--backend", "llamacpp", "--prompt-len", "8", "--gen-len", "8",
            "--no-ui", "--no-save", "--json")
    r = run_cli(*args, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = json_events(r.stdout)
    started, result = events[0], events[-1]
    p = result["params"]
    assert {k: p[k] for k in SHAPE} == SHAPE and p["backend"] == "llamacpp" and result["status"] == "finished"
    assert started["bytes_per_step"] == matmul_bytes(p) + kv_cache_bytes(p)
    refused = run_cli(*args, "--weights", "pretrained", timeout=60)
    assert refused.returncode == 2 and "convert it to GGUF" in refused.stderr and "Traceback" not in refused.stderr
