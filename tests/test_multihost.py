"""Multi-host runs through JAX's distributed runtime, as local processes joined over loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tpulab.backends import Cluster
from tpulab.base.errors import EXIT_CANCELLED, EXIT_FAILED
from tpulab.base.events import Step
from tpulab.engine.runner import Run, run_job
from tpulab.engine.worker import free_port
from tpulab.engine.spec import resolve
from tpulab.machine.detect import detect
from tpulab.workloads import registry
from tpulab.workloads.base import Limits, ParamError

from .helpers import ROOT, cancel_after, cpu_only, json_events, one_run_over_two_hosts, run_cli

CPU = Limits({"cpu": 8, "gpu": 0, "tpu": 0}, "cpu")
TINY = ["--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "3", "--warmup", "1"]


def test_processes_are_jax_only_and_share_the_devices_evenly(capsys, monkeypatch, tmp_path):
    conv = registry()["conv"]
    with pytest.raises(ParamError, match=r"--shards must be a multiple of --processes 2"):
        conv.resolve({"processes": "2", "shards": "3", "batch_size": "6", "backend": "jax"}, CPU)
    with pytest.raises(ParamError, match="--mode naive runs one device after another on one host"):
        conv.resolve({"processes": "2", "shards": "2", "mode": "naive", "backend": "jax"}, CPU)
    from tpulab.cli.main import main
    monkeypatch.setattr("tpulab.cli.run.fast_report", lambda: cpu_only(tmp_path, {"jax": "0.10.2"}))
    with pytest.raises(SystemExit) as exc:
        main(["--run", "conv", "--no-ui", "--processes", "2", "--shards", "2", "--backend", "tensorflow"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--processes means nothing on --backend tensorflow: multi-host runs go through JAX's distributed " \
           "runtime" in err and "use --backend jax" in err


def test_a_tpu_pod_slice_is_joined_by_its_own_discovery():
    pod = Cluster.tpu_pod({"TPU_WORKER_HOSTNAMES": "t1k-w-0,t1k-w-1,t1k-w-2,t1k-w-3", "TPU_WORKER_ID": "2"})
    assert pod == Cluster("auto", 4, 2)
    assert Cluster.tpu_pod({"TPU_WORKER_HOSTNAMES": "localhost"}) is None  # one host: nothing to join
    assert Cluster.from_env(pod.env()) == pod


pytest.importorskip("jax")


pytestmark = pytest.mark.usefixtures("quick_compiles")  # see conftest


def local_run(workload: str, **values: str) -> Run:
    params = registry()[workload].resolve({"backend": "jax", "device": "cpu", "processes": "2", "shards": "4",
                                          **values}, CPU)
    return run_job(resolve(workload, params, detect()), detect())


@pytest.mark.slow
@pytest.mark.parametrize("workload, argv", [
    # (a Keras model's, fashion-mnist over two processes, is test_jax's two-process fashion-mnist run: that run
    # carries the other fashion-mnist checks on JAX too)
    ("conv", [*TINY, "--mode", "batch-parallel"]),
])
def test_two_processes_make_one_record_with_per_host_times(workload, argv, tmp_path):
    db = str(tmp_path / "r.db")
    out = run_cli("--run", workload, "--no-ui", "--json", "--backend", "jax", "--device", "cpu", "--processes", "2",
                  "--shards", "4", "--db", db, *argv)
    assert out.returncode == 0, out.stderr
    result = json_events(out.stdout)[-1]
    assert result["status"] == "finished"
    one_run_over_two_hosts(result)
    assert len(json.loads(run_cli("results", "--db", db, "list", "--json").stdout)) == 1  # one run, one record
    shown = run_cli("results", "--db", db, "show", result["id"][:8])
    assert "2 hosts x 2 devices" in shown.stdout and "slowest: host" in shown.stdout


@pytest.mark.slow
def test_a_process_killed_mid_run_fails_the_run_naming_it():
    run = local_run("conv", batch_size="8", image_size="64", filters="16", iterations="100000")
    t0 = None
    for event in run.events():
        if isinstance(event, Step) and t0 is None:
            t0 = time.monotonic()
            run.handles[1].proc.kill()  # the follower dies; process 0 would wait for it forever
    assert t0 is not None and time.monotonic() - t0 < 60
    record = run.recorder.record()
    assert record.status == "failed" and record.error and record.error.startswith("process 1: ")
    assert "SIGKILL" in record.error
    assert all(h.returncode is not None for h in run.handles)  # nothing left behind


@pytest.mark.slow
def test_cancel_stops_every_process_after_the_same_step():
    run = local_run("conv", batch_size="8", image_size="64", filters="16", iterations="100000")
    record = cancel_after(run)
    assert record.status == "cancelled" and run.exit_code == EXIT_CANCELLED
    assert [h.proc.wait(30) for h in run.handles] == [EXIT_CANCELLED] * 2  # both stopped by agreement, none killed
    assert 3 <= len(record.steps) < 20 and all(len(s.host_seconds or []) == 2 for s in record.steps)


@pytest.mark.slow
def test_joining_with_an_explicit_coordinator():
    """The form for clusters JAX does not detect: the same command on each process, its id apart."""
    coordinator = f"127.0.0.1:{free_port()}"
    common = ["-m", "tpulab", "--run", "conv", "--no-ui", "--backend", "jax", "--device", "cpu", "--shards", "2",
              *TINY, "--coordinator", coordinator, "--num-processes", "2", "--no-save"]
    follower = subprocess.Popen([sys.executable, *common, "--process-id", "1"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    leader = subprocess.run([sys.executable, *common, "--process-id", "0", "--json"], cwd=ROOT, text=True,
                            capture_output=True, timeout=300)
    out, _ = follower.communicate(timeout=60)
    assert leader.returncode == 0 and follower.returncode == 0, leader.stderr[-2000:]
    result = json_events(leader.stdout)[-1]
    assert result["device"]["hosts"] == 2 and result["device"]["machines"] == 2
    assert "process 1 of 2: following process 0" in out


@pytest.mark.slow
def test_a_sweep_over_processes_shows_the_scaling():
    out = run_cli("sweep", "conv", "--backend", "jax", "--device", "cpu", "--preset", "smoke", "--steps", "3",
                  "--shards", "2", "--processes", "1,2", "--no-save", "--json")
    assert out.returncode == 0, out.stderr
    summary = json_events(out.stdout)[-1]
    [scaling] = summary["scaling"]
    assert scaling["processes"] == 2 and scaling["ratio"] > 0
    assert scaling["ideal"] == 1  # local processes share one machine: the ideal is to lose nothing


@pytest.mark.slow
def test_a_process_that_never_joins_fails_the_run_in_bounded_time():
    t0 = time.monotonic()
    out = run_cli("--run", "conv", "--no-ui", "--backend", "jax", "--device", "cpu", "--shards", "2", *TINY,
                  "--coordinator", f"127.0.0.1:{free_port()}", "--num-processes", "2", "--process-id", "0",
                  "--join-timeout", "2", "--no-save", timeout=120)
    assert out.returncode == EXIT_FAILED and time.monotonic() - t0 < 90
    assert "process 0 could not join the other 1 process(es) in time" in out.stdout
    assert "DEADLINE_EXCEEDED" in out.stdout and "nanobind" not in out.stdout  # the cause, not a native stack
