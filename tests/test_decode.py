"""The decode workload: its model's arithmetic, its refusals, the cache against a full forward pass on
each backend (a real model, and a step fed the wrong position, which --verify must catch), and a real
run that says one step per generated token."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tpulab.backends import get
from tpulab.workloads.decode import DECODE
from tpulab.workloads.decode.arithmetic import kv_cache_bytes, parameters, weight_bytes

from .helpers import ROOT, json_events, run_cli


def test_the_presets_are_gpt2_small_and_llama_3_2_1b():
    # The published counts: GPT-2 small 124,439,808 (tied embeddings); Llama 3.2 1B 1,235,814,400.
    gpt2, llama = DECODE.preset("gpt2-small"), DECODE.preset("llama-1b")
    assert parameters(gpt2) == 124_439_808 and weight_bytes(gpt2) == 4 * 124_439_808
    assert parameters(llama) == 1_235_814_400 and weight_bytes(llama) == 2 * 1_235_814_400  # bfloat16
    # keys and values, 16 layers, 8 KV heads of 64, 2 bytes, at the positions its work needs (128 + 128), or those given
    assert kv_cache_bytes(llama) == 2 * 16 * 8 * 256 * 64 * 2
    assert kv_cache_bytes({**llama, "kv_cache": 2048}) == 2 * 16 * 8 * 2048 * 64 * 2


def test_a_card_entrys_cache_holds_its_prompt_and_generated_tokens_and_a_step_reads_no_more():
    """The card's decode entries at their quick and full sizes: the cache holds the prompt and the generated tokens,
    rounded up to 64 positions, not GPT-2's 1024 (at batch 8, a 576 MiB cache read every token measured the
    padding); a token step reads the weights it multiplies by and that cache."""
    from tpulab.engine.bench import SUITE
    from tpulab.workloads.decode.arithmetic import cache_len, decode_step_bytes, matmul_parameters

    entries = [e for e in SUITE.entries if e.workload == "decode"]
    assert [e.values(quick)["batch_size"] for e in entries for quick in (True, False)] == [1, 1, 8, 8]
    for entry in entries:
        for quick, positions in ((True, 64), (False, 128)):  # 16 + 32, and 16 + 64 tokens
            p = {**DECODE.preset("gpt2-small"), **{k: v for k, v in entry.values(quick).items() if k in DECODE.defaults()}}
            assert cache_len(p) == positions
            cache = 2 * 12 * p["batch_size"] * 12 * positions * 64 * 4  # keys and values, 12 layers and heads of 64
            assert kv_cache_bytes(p) == cache and decode_step_bytes(p) == matmul_parameters(p) * 4 + cache


@pytest.mark.parametrize("flags, line", [
    (["--prompt-len", "30"], "--prompt-len 30 plus --gen-len 8 must fit --context 32 (got 38)"),
    (["--kv-heads", "3"], "--kv-heads must divide --heads 4 (got 3)"),
    (["--heads", "3"], "--heads must divide --width 64 (got 3)"),
])
def test_a_model_that_cannot_be_built_is_refused_in_one_line(flags, line):
    r = run_cli("--run", "decode", "--preset", "smoke", "--no-ui", "--no-save", *flags, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"tpulab: error: {line}"]


pytestmark = pytest.mark.usefixtures("quick_compiles")  # see conftest


CACHE_AGAINST_FORWARD = """
import json, sys
from tpulab.backends import get
from tpulab.base.errors import TpulabError
from tpulab.workloads.decode import loop as decode_loop
from tpulab.workloads.decode import DECODE
from tpulab.workloads.{backend} import build

runtime = get("{name}").runtime()
placement = runtime.place("cpu", 1)
out = {{}}
for kind in ({{}}, {{"positions": "learned", "block": "gpt2", "kv_heads": 4}}):  # Llama's GQA and RoPE; GPT-2's
    p = {{**DECODE.preset("smoke"), **kind, "gen_len": 6}}
    count, model = build(p, placement)
    logs = []
    out[p["block"]] = decode_loop.verify(p, model, decode_loop.prompt(p), logs.append)["verified"]
    shifted = decode_loop.Model(model.prefill, lambda t, at: model.step(t, at + 1), model.forward)
    try:  # each token's keys and values written one position on: a cache bug --verify must catch
        decode_loop.verify(p, shifted, decode_loop.prompt(p), logs.append)
    except TpulabError as e:
        out[p["block"] + " shifted"] = str(e)
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name, backend", [("jax", "decode.jax"), ("tensorflow", "decode.tf"), ("torch", "decode.torch")])
def test_decoding_with_the_cache_gives_the_full_forward_passs_logits(name, backend):
    env = {**os.environ, **get(name).worker_env("cpu", 1, os.environ)}
    r = subprocess.run([sys.executable, "-c", CACHE_AGAINST_FORWARD.format(name=name, backend=backend)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["llama"] < 1e-5 and out["gpt2"] < 1e-5  # float32 on a CPU: rounding only
    for block in ("llama", "gpt2"):
        assert "ABOVE the float32 tolerance" in out[f"{block} shifted"]


@pytest.fixture(scope="module")
def smoke_run():
    """A smoke decode run per backend, verified; on JAX also profiled (the traced steps come after the timed ones):
    several tests read each run."""
    done: dict[str, list[dict]] = {}

    def run(backend: str) -> list[dict]:
        if backend not in done:
            profiled = ["--profile"] if backend == "jax" else []
            r = run_cli("--run", "decode", "--preset", "smoke", "--verify", *profiled, "--backend", backend, "--no-ui",
                        "--json", "--no-save")
            assert r.returncode == 0, r.stderr[-2000:]
            done[backend] = json_events(r.stdout)
        return done[backend]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_smoke_run_says_a_step_per_generated_token_and_verifies(smoke_run, backend):
    events = smoke_run(backend)
    started, result = events[0], events[-1]
    p = DECODE.preset("smoke")
    assert started["synthetic"] and started["model"]["parameters"] == parameters(p)  # the formula's model
    compiled = [e["phase"] for e in events if e["event"] == "compiled"]
    tokens = [(e["phase"], e["step"]) for e in events if e["event"] == "step" and e["phase"] in ("prefill", "decode")]
    assert compiled == ["prefill", "decode"]
    assert tokens == [("prefill", 0)] + [("decode", i) for i in range(1, p["gen_len"])]  # one per token
    assert started["steps_total"] == len(compiled) + len(tokens)  # what progress counts
    assert result["status"] == "finished" and result["summary"]["step_seconds"]["count"] == p["gen_len"] - 1
    assert 0 <= result["summary"]["figures"]["verified"] < 1e-5
    assert any(line.startswith("verify: cached against full-forward logits") for line in result["logs"])


@pytest.mark.slow
def test_a_profiled_decode_run_traces_steps_it_never_times(smoke_run):
    events = smoke_run("jax")
    [profiled] = [e for e in events if e["event"] == "profiled"]
    assert profiled["profile"]["steps"] == 3 and profiled["profile"]["ops"]
    tokens = [e for e in events if e["event"] == "step" and e["phase"] == "decode"]
    assert len(tokens) == DECODE.preset("smoke")["gen_len"] - 1  # the traced steps are no Step
