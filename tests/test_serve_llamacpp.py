"""serve on tpulab's engine, llama.cpp's server on 127.0.0.1 over decode's weights: the smoke preset keeps every figure;
the same server started by the test and driven through --endpoint gives the same latencies within noise, and its
record names no framework; what sizes the engine is refused beside --endpoint, in one line."""

from __future__ import annotations

import sys
from importlib.metadata import version

import pytest

from tpulab.engine.store import Store
from tpulab.machine.detect import detect
from tpulab.machine.fingerprint import physical_cores
from tpulab.workloads.serve.figures import FIGURES

from .helpers import kept_roofline, run_cli

pytest.importorskip("aiohttp")
pytest.importorskip("gguf")
xllamacpp = pytest.importorskip("xllamacpp")

LOAD = ("--preset", "smoke", "--requests", "24", "--no-ui")  # 24 requests at 20 a second: about 1.2 s of arrivals
NO_VALUE = ("concurrency",)  # a figure of a load at a concurrency: this one is at a rate


def serve(db, *flags: str):
    r = run_cli("--run", "serve", *LOAD, "--db", str(db), *flags, timeout=120)
    records = Store(db).records()
    return r, records[0] if records else None


@pytest.mark.slow
def test_the_smoke_preset_on_llamacpp_keeps_every_figure(db):
    """Its own server, started and stopped in the worker on 127.0.0.1; MBU against the kept bandwidth ceiling."""
    Store(db).save(kept_roofline("jax", None, sys.version.split()[0], cpu=detect().cpu.model))  # 20 GB/s
    r, record = serve(db)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert record.backend == "llamacpp" and "llama.cpp's server on 127.0.0.1, 4 slots" in record.device.strategy
    assert any("listens on http://127.0.0.1:" in line for line in record.logs)
    f = record.summary.figures
    missing = [x.name for x in FIGURES if f.get(x.name) is None and not x.name.endswith(("_low", "_high"))
               and x.name not in NO_VALUE]
    assert not missing and f["completed"] == f["sent"] == 24
    assert record.params["model"] == "smoke" and record.params["weight_format"] == "f32"  # auto: the smallest that fits
    assert 0 < f["steady_batch"] <= 4  # never more decoding at once than the slots
    assert f["mbu"] == pytest.approx(f["step_bytes"] / f["tpot_p50"] / 20e9)
    assert "MBU" in r.stdout and "steady batch" in r.stdout


@pytest.mark.slow
@pytest.mark.alone  # it times two servers against each other: another test beside it would be timed too
def test_llamacpps_server_through_endpoint_matches_the_engine_within_noise(tmp_path):
    """The same weights (the tiny decoder's: the smoke one's token costs less than the client's reading of it), slots,
    threads, rate, lengths and seed: TTFT and TPOT p50 within the noise of the engine's, and the record says your
    server served, not a framework. Each side's best of two runs taken in turn (other processes only ever slow a run);
    the noise is 2x, widened by the engine's own spread between its two runs (on a busy 2-core machine one engine run's
    p50 was 5x another's)."""
    from tpulab.workloads.shared.decoder_shapes import SHAPES
    from tpulab.workloads.shared.gguf_writer import cached

    path, _ = cached({**SHAPES["tiny"], "seed": 0}, "f32")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.hostnames, params.port = ["127.0.0.1"], 0  # loopback alone, a free port
    params.n_parallel, params.n_ctx = 4, 4 * SHAPES["tiny"]["context"]
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = max(1, physical_cores() - 1)  # as the engine's
    params.cache_type_k = params.cache_type_v = xllamacpp.ggml_type.GGML_TYPE_F16
    params.fit_params, params.verbosity = False, -1
    server = xllamacpp.Server(params)
    engine, yours = [], []
    try:
        server.handle_completions({"prompt": [100, 101], "n_predict": 2, "temperature": 0})  # the weights read
        for _ in range(2):
            for runs, flags in ((engine, ("--model", "tiny")), (yours, ("--endpoint", f"{server.listening_address}/v1"))):
                r, record = serve(tmp_path / f"{len(runs)}-{bool(runs is yours)}.db", *flags)
                assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
                runs.append(record)
    finally:
        del server
    assert all(y.backend == "server" and y.device.strategy.startswith("your server at http://127.0.0.1:") for y in yours)
    assert "aiohttp" in yours[0].versions and "xllamacpp" not in yours[0].versions  # no framework loaded
    assert "your server" in r.stdout
    assert [e.summary.figures["completed"] for e in engine + yours] == [24] * 4
    for name in ("ttft_p50", "tpot_p50"):
        mine = [x.summary.figures[name] for x in engine]
        theirs = min(x.summary.figures[name] for x in yours)
        noise = 2.0 * max(mine) / min(mine)
        assert 1 / noise < theirs / min(mine) < noise, (name, theirs, mine)


@pytest.mark.parametrize("flags, param", [
    (("--endpoint", "http://127.0.0.1:9/v1", "--slots", "8"), "--slots"),
    (("--endpoint", "http://127.0.0.1:9/v1", "--weight-format", "q4_0"), "--weight-format"),
    (("--endpoint", "http://127.0.0.1:9/v1", "--backend", "llamacpp"), "--endpoint"),
    (("--backend", "server",), "--endpoint"),
    (("--api", "chat",), "--api"),
    (("--model", "smoke", "--prompt-tokens", "64"), "--prompt-tokens"),
])
def test_what_sizes_the_engine_is_refused_where_it_means_nothing(flags, param):
    r = run_cli("--run", "serve", "--no-ui", "--no-save", *flags, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and param in r.stderr, r.stderr


def test_the_server_backend_is_no_framework():
    """Never auto's, never probed or listed as a framework, and its worker imports none."""
    from tpulab.backends import get

    b = get("server")
    assert not b.chosen_by_auto and not b.framework and b.installed({"aiohttp": version("aiohttp")})
    assert set(b.runtime().versions()) == {"aiohttp", "python"}
    detected = run_cli("detect", "--fast", timeout=60)
    assert detected.returncode == 0 and "llama.cpp" in detected.stdout and b.title not in detected.stdout
