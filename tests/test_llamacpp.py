"""llama.cpp as a decode backend: the GGUF file holds the PyTorch decoder's weights and the bytes the arithmetic
counts, per format; llama.cpp's greedy tokens are the PyTorch decoder's on the same weights (GPT-2 and Llama
blocks); its token times are its own clock's; it is refused in one line where it cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tpulab.backends import BackendError, choose, get
from tpulab.machine.detect import detect
from tpulab.workloads.decode import DECODE
from tpulab.workloads.decode.arithmetic import (FORMAT_BYTES, FORMAT_TOLERANCE, decode_step_bytes, kv_cache_bytes, matmul_bytes,
                                                matmul_parameters, parameters, vector_parameters)

from .helpers import ROOT, json_events, run_cli, tree

gguf = pytest.importorskip("gguf")
pytest.importorskip("xllamacpp")

GPT2 = {"positions": "learned", "block": "gpt2", "kv_heads": 4}  # the smoke preset's shape with GPT-2's blocks


@pytest.mark.parametrize("kind", [{}, GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("fmt", ["f32", "f16", "q8_0", "q4_0"])
def test_the_gguf_file_holds_the_bytes_the_arithmetic_counts(tmp_path, kind, fmt):
    """A token reads every matrix in the format (the token table as the output projection) and the vectors in float32:
    the file holds those, and the position table, which a token reads one row of."""
    from tpulab.workloads.shared.gguf_writer import cached

    p = {**DECODE.preset("smoke"), **kind, "weight_format": fmt}
    path, wrote = cached(p, fmt)
    assert wrote and cached(p, fmt) == (path, False)  # kept in tpulab's home by shape, seed and format
    sizes = {t.name: int(t.n_bytes) for t in gguf.GGUFReader(path).tensors}
    table = sizes.pop("position_embd.weight", 0)
    assert table == (p["context"] * p["width"] * FORMAT_BYTES[fmt] if kind else 0)
    assert sum(sizes.values()) == matmul_bytes(p)
    assert decode_step_bytes(p) == matmul_bytes(p) + kv_cache_bytes(p)


def test_bytes_per_token_follow_the_weight_format():
    gpt2 = DECODE.preset("gpt2-small")
    n, vectors = matmul_parameters(gpt2), vector_parameters(gpt2)
    assert matmul_bytes(gpt2) == 4 * n  # --dtype's, as every backend holds them
    assert matmul_bytes({**gpt2, "weight_format": "f32"}) == 4 * n
    assert matmul_bytes({**gpt2, "weight_format": "f16"}) == 2 * (n - vectors) + 4 * vectors
    assert matmul_bytes({**gpt2, "weight_format": "q8_0"}) == 34 / 32 * (n - vectors) + 4 * vectors
    assert matmul_bytes({**gpt2, "weight_format": "q4_0"}) == 18 / 32 * (n - vectors) + 4 * vectors
    assert 0.265 < matmul_bytes({**gpt2, "weight_format": "q8_0"}) / (4 * n) < 0.267  # 8.5 bits of 32


def test_the_weights_are_the_pytorch_decoders_by_name_and_shape():
    torch = pytest.importorskip("torch")
    from tpulab.workloads.shared.gguf_writer import weights
    from tpulab.workloads.decode.torch_model import TorchDecoder
    from tpulab.workloads.shared.decoder_config import Config

    for kind in ({}, GPT2):
        p = {**DECODE.preset("smoke"), **kind}
        model = TorchDecoder(Config.of(p))
        model.load_state_dict({k: torch.from_numpy(v) for k, v in weights(p).items()})  # strict: every name, shape
        assert all((weights(p)[k] == v.numpy()).all() for k, v in model.state_dict().items())  # the seed's, again


def test_its_token_times_are_the_slowest_sequences_gains_on_llama_cpps_clock():
    from tpulab.workloads.decode.llamacpp import Timed

    timed = Timed(prompt=[0.020, 0.021], tokens=[[0.0, 0.004, 0.009], [0.0, 0.005, 0.009]])
    assert timed.prefill() == 0.021 and timed.steps() == pytest.approx([0.005, 0.005])


def test_it_runs_where_asked_for_and_is_refused_in_one_line_without_its_bindings(tmp_path):
    only = detect(tree(tmp_path), {}, {"xllamacpp": "2026.10.11549", "gguf": "0.19.0", "keras": "3.15.1"})
    assert choose("llamacpp", only) == ("llamacpp", "you chose llamacpp")
    with pytest.raises(BackendError, match=r"^neither TensorFlow nor JAX nor PyTorch is installed"):
        choose("auto", only)  # it runs decode alone: auto never takes it
    for packages in ({"keras": "3.15.1"}, {"xllamacpp": "2026.10.11549", "keras": "3.15.1"}):  # gguf writes its model
        with pytest.raises(BackendError) as missing:
            choose("llamacpp", detect(tree(tmp_path), {}, packages))
        assert str(missing.value) == ("--backend llamacpp: llama.cpp is not installed; install it with: "
                                      "pip install 'tpulab[llamacpp]'  # xllamacpp, llama.cpp's prebuilt CPU wheel, and gguf")


@pytest.mark.parametrize("flags, line", [
    (["--backend", "torch", "--weight-format", "q4_0"],
     "--weight-format means nothing on --backend torch: the weights are in --dtype on torch: use --backend llamacpp"),
    (["--backend", "jax", "--threads", "4"],
     "--threads means nothing on --backend jax: jax sizes its own thread pools: --threads is for --backend llamacpp"),
])
def test_its_parameters_are_refused_on_the_other_backends(flags, line):
    r = run_cli("--run", "decode", "--preset", "smoke", "--no-ui", "--no-save", *flags, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [f"tpulab: error: {line}"]


GREEDY_AGAINST_PYTORCH = """
import json
from tpulab.workloads.decode import DECODE, loop
from tpulab.workloads.shared.gguf_writer import cached
from tpulab.workloads.decode.llamacpp import serve, verify

out = {}
for kind in ({}, {"positions": "learned", "block": "gpt2", "kv_heads": 4}):  # Llama's GQA and RoPE; GPT-2's
    for fmt in ("f32", "q8_0", "q4_0"):
        p = {**DECODE.preset("smoke"), **kind, "gen_len": 16, "context": 32, "weight_format": fmt, "threads": 0}
        path, _ = cached(p, fmt)
        logs = []
        kept = verify(p, serve(path, p, 2), loop.prompt(p), logs.append, fmt)
        out[f"{p['block']} {fmt}"] = [logs[0].text, kept]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_llama_cpps_greedy_tokens_are_the_pytorch_decoders_on_the_same_weights():
    """The GGUF file, written from the seed, run by llama.cpp: at f32 every greedy token is the PyTorch decoder's and
    the log-probabilities agree to rounding; quantized, each format is judged by its own tolerance (q8_0's ten times
    tighter than q4_0's), and the verdict and its bound are kept."""
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", GREEDY_AGAINST_PYTORCH], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env={**os.environ, **get("llamacpp").worker_env("cpu", 1, os.environ)})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for block in ("llama", "gpt2"):
        line, kept = out[f"{block} f32"]
        assert "greedy tokens are the PyTorch decoder's: all 16 of each of 2 sequence(s)" in line
        assert kept["verified_logprob"] < 1e-3  # float32 both sides: rounding, and llama.cpp's GELU table (GPT-2)
        assert line.endswith(f"within the f32 tolerance {FORMAT_TOLERANCE['f32']:g}") and kept["verified_differ"] == 0
        for fmt in ("q8_0", "q4_0"):
            line, kept = out[f"{block} {fmt}"]
            assert line.startswith(f"verify: {fmt} weights, float32 cache")
            assert line.endswith(f"within the {fmt} tolerance {FORMAT_TOLERANCE[fmt]:g}")
            assert kept["verified_tolerance"] == FORMAT_TOLERANCE[fmt] and kept["verified_tokens"] == 32
            assert kept["verified_logprob"] <= FORMAT_TOLERANCE[fmt] * kept["verified_scale"]
        assert out[f"{block} f32"][1]["verified_logprob"] < out[f"{block} q8_0"][1]["verified_logprob"] \
            < out[f"{block} q4_0"][1]["verified_logprob"]  # the coarser the format, the further apart


@pytest.mark.slow
def test_a_smoke_run_times_each_token_on_llama_cpps_clock_and_verifies():
    from tpulab.machine.fingerprint import physical_cores

    r = run_cli("--run", "decode", "--preset", "smoke", "--backend", "llamacpp", "--verify", "--weight-format", "q8_0",
                "--no-ui", "--json", "--no-save", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = json_events(r.stdout)
    started, result = events[0], events[-1]
    p = {**DECODE.preset("smoke"), "weight_format": "q8_0"}
    cores = physical_cores()
    assert started["device"]["strategy"] == f"llama.cpp on {cores} threads: the physical cores it may use"
    assert started["model"] == {"parameters": parameters(p), "weight_format": "q8_0", "threads": cores}
    assert started["bytes_per_step"] == decode_step_bytes(p) < decode_step_bytes(DECODE.preset("smoke"))
    compiled = [e["phase"] for e in events if e["event"] == "compiled"]
    tokens = [(e["phase"], e["step"]) for e in events if e["event"] == "step" and e["phase"] in ("prefill", "decode")]
    assert compiled == ["prefill", "decode"]
    assert tokens == [("prefill", 0)] + [("decode", i) for i in range(1, p["gen_len"])]
    assert any(e["event"] == "log" and e["text"].startswith("verify: q8_0 weights") for e in events)
    assert result["status"] == "finished" and result["summary"]["figures"]["bytes_per_token_step"] == decode_step_bytes(p)


Q4 = ("run", "decode", "--preset", "smoke", "--backend", "llamacpp", "--verify", "--weight-format", "q4_0", "--no-ui")


@pytest.mark.slow
def test_a_q4_0_run_verifies_within_its_tolerance_keeps_the_verdict_and_names_its_formats(db):
    """Issue 64, items 4 and 5, from the command line: the verify's verdict and its tolerance said and kept (a
    `verified` row); the summary names the weights' format and the cache's, the GGUF file's size in KiB, the first
    call as what llama.cpp does (nothing is traced or compiled), and no ceiling of another dtype."""
    from tpulab.engine.store import Store, compare
    from tpulab.views.console import comparison_columns, summary_rows
    from tpulab.workloads.shared.gguf_writer import cached

    r = run_cli(*Q4, "--db", str(db), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    [record] = Store(db).records()
    verified = next(line for line in record.logs if line.startswith("verify: q4_0 weights, float32 cache"))
    assert verified.endswith(f"within the q4_0 tolerance {FORMAT_TOLERANCE['q4_0']:g}")
    path, wrote = cached({**DECODE.preset("smoke"), "weight_format": "q4_0"}, "q4_0")
    assert not wrote and 2**10 < path.stat().st_size < 2**20  # the run wrote it: under a MiB, said in KiB
    assert f"wrote the weights as GGUF (q4_0, {path.stat().st_size / 2**10:.1f} KiB): {path}" in record.logs
    rows = {name: value for name, value, _ in summary_rows(record)}
    assert rows["dtype"] == "q4_0 weights, float32 cache"
    assert dict(comparison_columns(compare([record, record])))["dtype"] == ["q4_0 weights, float32 cache"] * 2
    assert "│ dtype " in r.stdout and "q4_0 weights, float32 cache" in r.stdout  # the printed summary's row
    assert "first call (load+warm-up)" in rows and not [name for name in rows if "trace" in name]
    assert rows["fraction of ceiling"].startswith("no measured ceiling for q4_0 weights, float32 cache: a roofline "
                                                  "measures float matmuls")
    f = record.summary.figures
    assert f["verified_tolerance"] == FORMAT_TOLERANCE["q4_0"] and f["verified_tokens"] == 2 * 8
    assert rows["verified"] == (
        "against the PyTorch decoder in float32 on the same weights: the chosen tokens' log-probabilities differ by at "
        f"most {f['verified_logprob']:.3g}, within the tolerance {0.4 * f['verified_scale']:.3g} (0.4 of the largest "
        f"logit {f['verified_scale']:.3g})" + (f"; {f['verified_differ']:.0f} of 16 greedy tokens differ, each a near "
                                               "tie" if f["verified_differ"] else "; all 16 greedy tokens the decoder's"))


@pytest.mark.slow
def test_a_verify_above_its_tolerance_says_so_and_fails_the_run(db):
    """The GGUF file tpulab keeps for the smoke shape, replaced by another seed's (a stale or corrupt file): llama.cpp's
    log-probabilities part from the decoder's far beyond q4_0's tolerance, and the run fails as a float verify does."""
    import shutil

    from tpulab.engine.store import Store
    from tpulab.workloads.shared.gguf_writer import cached

    p = {**DECODE.preset("smoke"), "weight_format": "q4_0"}
    shutil.copyfile(cached({**p, "seed": 1}, "q4_0")[0], cached(p, "q4_0")[0])
    r = run_cli(*Q4, "--db", str(db), timeout=180)
    assert r.returncode == 1
    [record] = Store(db).records()
    assert record.status == "failed" and record.error.startswith("verify: q4_0 weights, float32 cache"), record.error
    assert record.error.endswith(f"ABOVE the q4_0 tolerance {FORMAT_TOLERANCE['q4_0']:g}")
    assert "verified_logprob" not in {k for k, v in record.summary.figures.items() if v is not None}


@pytest.mark.parametrize(("values", "param", "said"), [
    ({"block": "gpt2", "positions": "rope"}, "block", "llama.cpp has no architecture for --block gpt2 with --positions "
                                                      "rope: use --block gpt2 --positions learned"),
    ({"weight_format": "q4_0", "width": 48, "heads": 4, "kv_heads": 4}, "weight_format",
     "--weight-format q4_0: q4_0 packs each row in blocks of 32 weights: got --width 48"),
])
def test_what_llamacpp_cannot_hold_is_refused_before_a_worker_starts(values, param, said):
    """A model llama.cpp has no architecture for, or a quantized format whose blocks do not fit its rows: a
    ParamError naming the parameter when the run is resolved (exit 2), where PyTorch runs the same model."""
    from tpulab.engine.spec import resolve
    from tpulab.workloads.base import ParamError

    report = detect()
    with pytest.raises(ParamError) as refused:
        resolve("decode", {**values, "backend": "llamacpp", "device": "cpu"}, report, "smoke")
    assert refused.value.param == param and str(refused.value).startswith(said)
    shape = {k: v for k, v in values.items() if k != "weight_format"}
    assert resolve("decode", {**shape, "backend": "torch", "device": "cpu"}, report, "smoke").backend == "torch"


def users_file(tmp_path, fmt="q4_0"):
    """A GGUF file of the user's: the smoke preset's Llama model, written where a user keeps theirs."""
    from tpulab.workloads.shared.gguf_writer import write

    p = {**DECODE.preset("smoke"), "weight_format": fmt, "seed": 7}
    path = tmp_path / "my model.gguf"
    write(p, fmt, path)
    return p, path


def test_a_users_gguf_file_sets_the_shape_and_its_stored_bytes_set_what_a_token_reads(tmp_path):
    """Its metadata gives the shape (auto takes llama.cpp, the backend that reads GGUF); a token reads its tensors as
    stored (the token table whole: it is the output projection here, no output.weight), the parameters are all it
    holds."""
    from tpulab.engine.spec import resolve

    p, path = users_file(tmp_path)
    spec = resolve("decode", {"model": f"gguf:{path}", "device": "cpu", "prompt_len": 4, "gen_len": 4}, detect())
    shape = ("layers", "width", "heads", "kv_heads", "mlp_width", "vocab", "context", "positions", "block")
    assert spec.backend == "llamacpp" and {k: spec.params[k] for k in shape} == {k: p[k] for k in shape}
    stored = {t.name: t for t in gguf.GGUFReader(path).tensors}
    assert matmul_bytes(spec.params) == sum(int(t.n_bytes) for t in stored.values()) == matmul_bytes(p)
    assert parameters(spec.params) == sum(int(t.n_elements) for t in stored.values())
    assert spec.params["weight_format"] == "dtype" and "q4_0" in DECODE.describe_data(spec.params)


@pytest.mark.parametrize(("values", "param", "said"), [
    ({"backend": "torch"}, "model", "--model gguf:"),
    ({"weight_format": "q8_0"}, "weight_format", "--weight-format q8_0: gguf:"),
    ({"verify": True}, "verify", "--verify sets llama.cpp's tokens against tpulab's decoder on the weights tpulab"),
    ({"width": 128}, "width", "--width 128: gguf:"),
])
def test_what_a_users_gguf_file_cannot_do_is_one_line(tmp_path, values, param, said):
    from tpulab.engine.spec import resolve
    from tpulab.workloads.base import ParamError

    _, path = users_file(tmp_path)
    with pytest.raises(ParamError) as refused:
        resolve("decode", {"model": f"gguf:{path}", "device": "cpu", "backend": "llamacpp", **values}, detect(),
                "smoke")
    assert refused.value.param == param and str(refused.value).startswith(said), str(refused.value)
    (tmp_path / "not.gguf").write_text("a text file")
    with pytest.raises(ParamError, match="not a GGUF file llama.cpp reads"):
        resolve("decode", {"model": f"gguf:{tmp_path / 'not.gguf'}", "backend": "llamacpp"}, detect())


@pytest.mark.slow
def test_a_users_gguf_file_decodes_on_llama_cpp_with_its_own_bytes_per_token(tmp_path):
    p, path = users_file(tmp_path, "q8_0")
    r = run_cli("--run", "decode", "--model", f"gguf:{path}", "--prompt-len", "4", "--gen-len", "6", "--no-ui",
                "--json", "--no-save", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    events = json_events(r.stdout)
    started, result = events[0], events[-1]
    run = {**p, "prompt_len": 4, "gen_len": 6, "batch_size": 1}  # (the file sets no batch: the default)
    assert started["model"]["weight_format"] == "q8_0" and started["backend"] == "llamacpp"
    assert result["status"] == "finished"
    assert result["summary"]["figures"]["bytes_per_token_step"] == matmul_bytes(p) + kv_cache_bytes(run)
    assert any(e["event"] == "log" and e["text"].startswith(f"the weights: {path} (q8_0") for e in events)
