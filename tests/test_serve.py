"""serve against stub OpenAI-compatible servers on 127.0.0.1 (a thread of http.server, port 0): the real command
line, the real worker, the record in a real store; each stub streams server-sent events as llama-server does."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tpulab.engine.store import Store
from tpulab.workloads.serve import SERVE
from tpulab.workloads.serve.figures import FIGURES
from tpulab.workloads.serve.quantiles import quantile, ranks
from tpulab.workloads.serve.workload import loopback

from .helpers import Behave, run_cli, tokens

pytest.importorskip("aiohttp")


def serve(db, url: str, *flags: str) -> tuple[Any, Any]:
    """`tpulab --run serve` against `url` at smoke sizes; (the finished command, its one record)."""
    r = run_cli("--run", "serve", "--preset", "smoke", "--no-ui", "--endpoint", url, "--db", str(db), *flags,
                timeout=60)
    records = Store(db).records()
    return r, records[0] if records else None


def test_a_run_at_a_rate_keeps_every_figure(stub, db):
    server = stub(lambda h, n, body, flight: tokens(h, body["max_tokens"], gap=0.002))
    r, record = serve(db, server.url, "--slo-ttft", "5", "--length-spread", "0.5")
    assert r.returncode == 0, r.stderr[-2000:]
    f = record.summary.figures
    missing = [x.name for x in FIGURES if f.get(x.name) is None and not x.name.endswith(("_low", "_high"))
               and x.name != "concurrency" and x.group != "engine"]
    assert not missing and server.asked == f["completed"] == f["sent"] == 16
    assert f.get("mbu") is None and record.backend == "server"  # your server's weights are unknown here: no MBU
    assert f["slo_attainment"] == 1.0 and f["goodput"] > 0 and f["asked_rate"] == 20.0
    assert f["ttft_p50"] <= f["ttft_p90"] <= f["ttft_p99"] and f["itl_p50"] >= 0.001  # the stub's gap, on our clock
    assert f["ttft_p50_low"] <= f["ttft_p50"] <= f["ttft_p50_high"]  # 16 requests: the median's interval, no p99's
    assert f["ttft_p99_low"] is None
    assert record.summary.throughput == pytest.approx(f["request_throughput"])
    assert "requests/s completed requests over the run's time" in r.stdout and "met the SLO" in r.stdout
    assert "FLOPs unknown" not in r.stdout and "fraction of spec peak" not in r.stdout  # no FLOPs describe a request


def test_latency_that_rises_with_load_gives_a_higher_ttft_at_a_higher_rate(stub, db, tmp_path):
    """A stub whose first token waits 10 ms per request in flight: at 60 requests/s more are in flight than at 4."""
    server = stub(lambda h, n, body, flight: (time.sleep(0.01 * flight), tokens(h, 4, gap=0.02)))
    ttft = {}
    for rate in ("4", "60"):
        r, record = serve(tmp_path / f"{rate}.db", server.url, "--rate", rate, "--requests", "8",
                          "--output-tokens", "4")
        assert r.returncode == 0, r.stderr[-2000:]
        ttft[rate] = record.summary.figures["ttft_p50"]
    assert ttft["60"] > ttft["4"]


def stop_at(k: int, how: str) -> Behave:
    """Whole streams until request `k`, which stops mid-stream or streams garbage."""
    def behave(h: BaseHTTPRequestHandler, n: int, body: dict[str, Any], flight: int) -> None:
        if n < k:
            return tokens(h, body["max_tokens"])
        tokens(h, 2, done=False)
        if how == "garbage":
            h.wfile.write(b"data: <html>oops</html>\n\n")
    return behave


@pytest.mark.parametrize("how, said", [("mid", "stopped request"), ("garbage", "streamed what is not")])
def test_a_server_that_fails_mid_run_fails_in_one_line_with_the_completed_requests_kept(stub, db, how, said):
    server = stub(stop_at(5, how))
    r, record = serve(db, server.url, "--rate", "5")
    assert r.returncode == 1 and "Traceback" not in r.stdout + r.stderr
    assert len([line for line in r.stdout.splitlines() if line.startswith("failed: ") and said in line]) == 1
    assert record.status == "failed" and record.summary.figures["completed"] == 4  # the four before it


def test_a_refused_connection_fails_in_one_line(db):
    import socket

    with socket.socket() as s:  # a port just free: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r, record = serve(db, f"http://127.0.0.1:{port}/v1")
    assert r.returncode == 1 and f"failed: could not reach http://127.0.0.1:{port}/v1" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr and record.status == "failed"


def test_a_redirect_is_never_followed(stub, db):
    """An address not given (here a second stub's) is never contacted, even where the given server points to it."""
    other = stub(lambda h, n, body, flight: tokens(h, 2))

    def redirect(h: BaseHTTPRequestHandler, n: int, body: dict[str, Any], flight: int) -> None:
        h.send_response(307)
        h.send_header("Location", other.url + "/completions")
        h.end_headers()

    server = stub(redirect)
    r, _ = serve(db, server.url)
    assert r.returncode == 1 and "with a redirect to" in r.stdout and "only the address given" in r.stdout
    assert other.asked == 0


def test_the_achieved_rate_is_the_asked_one_against_an_instant_server(stub, db):
    """Even arrivals (gamma shape 100) at 50 requests/s: the schedule's rate is the asked one within 2%, so the
    sends must be within a few % of it (the generator schedules by absolute times)."""
    server = stub(lambda h, n, body, flight: tokens(h, 1))
    r, record = serve(db, server.url, "--rate", "50", "--burstiness", "100", "--requests", "60",
                      "--output-tokens", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    f = record.summary.figures
    assert f["achieved_rate"] == pytest.approx(50, rel=0.05)
    assert not [x for x in record.summary.flags if x.code == "generator-behind"]


@pytest.mark.parametrize("flags, param", [
    (("--rate", "0"), "--rate"),
    (("--concurrency", "4", "--rate", "3"), "--rate"),
    (("--endpoint", "ftp://127.0.0.1/v1"), "--endpoint"),
    (("--requests", "0"), "--requests"),
])
def test_a_bad_parameter_is_one_line_and_exit_2(flags, param):
    r = run_cli("--run", "serve", "--no-ui", "--no-save", *flags, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and param in r.stderr, r.stderr


def test_the_default_and_every_preset_contact_only_this_machine():
    """Only an address the user gives (--endpoint) may be another machine's: the default and every preset give none,
    and start tpulab's engine on 127.0.0.1 (`test_serve_llamacpp`)."""
    assert SERVE.defaults()["endpoint"] == "" and all(SERVE.preset(name)["endpoint"] == "" for name in SERVE.presets)
    assert loopback("http://localhost:1/v1") and loopback("http://[::1]:1/v1") and not loopback("http://10.0.0.1/v1")


def test_order_statistic_intervals_hold_their_level():
    """The ranks cover the quantile with 95% at least, and none is given where the samples are too few."""
    assert ranks(100, 0.5) == (40, 61) and ranks(300, 0.99) is None and ranks(400, 0.99) is not None
    value, low, high = quantile([float(x) for x in range(1, 101)], 0.5)
    assert (value, low, high) == (50.5, 40.0, 61.0)
