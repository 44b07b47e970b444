"""PyTorch over several processes: DistributedDataParallel through torch.distributed (gloo on this CPU), its
processes started here and joined over loopback, as JAX's are (test_multihost); or started by torchrun."""

from __future__ import annotations

import json
import time
from importlib.util import find_spec

import pytest

from tpulab.backends import LAUNCHER_ENV, Cluster
from tpulab.backends.torch import physical_cores, threads_for
from tpulab.base.events import Step
from tpulab.base.figures import ALLREDUCE_BYTES
from tpulab.workloads import registry
from tpulab.workloads.base import Limits, ParamError

from .helpers import json_events, run_cli

CPU = Limits({"cpu": 8, "gpu": 0, "tpu": 0}, "cpu")
TORCH = {"backend": "torch", "device": "cpu", "processes": "2", "dataset": "synthetic"}


def test_a_bad_combination_is_refused_naming_its_parameter():
    fashion = registry()["fashion-mnist"]
    assert fashion.resolve(TORCH, CPU, "smoke")["shards"] == 2  # one device per process
    for values, param, said in [
        ({"compile": "on"}, "compile", "--compile on with --processes 2 on --backend torch: DistributedDataParallel's "
                                       "steps run eager here"),
        ({"shards": "4"}, "shards", "--shards means nothing on --backend torch: tpulab runs PyTorch on one device per "
                                    "process"),
        ({"batch_size": "63"}, "batch_size", "--batch-size must be divisible by --shards 2"),
    ]:
        with pytest.raises(ParamError, match=said) as refused:
            fashion.resolve({**TORCH, **values}, CPU, "smoke")
        assert refused.value.param == param
    with pytest.raises(ParamError, match="conv trains none: use --backend jax") as refused:
        registry()["conv"].resolve({**TORCH, "dataset": None}, CPU, "smoke")
    assert refused.value.param == "processes"
    r = run_cli("run", "fashion-mnist", "--backend", "torch", "--device", "cpu", "--processes", "2", "--compile", "on",
                "--preset", "smoke", "--dataset", "synthetic", "--no-ui", "--no-save", env={"COLUMNS": "400"})
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--compile on with --processes 2" in r.stderr


def test_torchruns_environment_is_a_cluster_joined_from_it():
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": "2",
           "LOCAL_RANK": "1"}
    cluster = Cluster.torchrun(env)
    assert cluster == Cluster(LAUNCHER_ENV, 2, 1, local=True)
    assert Cluster.from_env(cluster.env()) == cluster  # what the worker it starts reads
    assert Cluster.torchrun({**env, "LOCAL_WORLD_SIZE": "1"}) == Cluster(LAUNCHER_ENV, 2, 1)  # one per machine
    assert Cluster.torchrun({**env, "WORLD_SIZE": "1"}) is None and Cluster.torchrun({}) is None


def test_a_run_torchrun_started_is_checked_as_one_over_processes_is():
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    cluster, torch_cpu = Cluster(LAUNCHER_ENV, 2, 0, local=True), {"backend": "torch", "device": "cpu"}
    spec = resolve("fashion-mnist", {**torch_cpu, "dataset": "synthetic"}, detect(), "smoke", cluster)
    assert spec.params["shards"] == 2  # one device per process, whatever the flags said
    for workload, values, param in [("fashion-mnist", {"dataset": "synthetic", "compile": "on"}, "compile"),
                                    ("conv", {}, "processes")]:
        with pytest.raises(ParamError) as refused:
            resolve(workload, {**torch_cpu, **values}, detect(), "smoke", cluster)
        assert refused.value.param == param


def test_threads_per_process_are_the_cores_shared_unless_omp_num_threads_says():
    local = Cluster("127.0.0.1:1", 2, 0, local=True)
    assert threads_for(local, {}) == (max(1, physical_cores() // 2),
                                      f"{physical_cores()} physical core(s) / 2 process(es) on this machine")
    assert threads_for(Cluster(LAUNCHER_ENV, 4, 0), {"OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": "4"}) == \
        (1, "OMP_NUM_THREADS=1 in the environment (torchrun sets 1 unless you set it)")  # taken, and said where from
    assert threads_for(local, {"OMP_NUM_THREADS": "3"})[0] == 3


# find_spec, not importorskip: every process that collects the tests imported PyTorch (seconds of CPU each)
pytestmark = pytest.mark.skipif(find_spec("torch") is None, reason="needs PyTorch")


@pytest.mark.slow
def test_two_processes_make_one_record_with_the_scaling_and_the_all_reduce(fashion_data, tmp_path):
    db = str(tmp_path / "r.db")
    out = run_cli("run", "fashion-mnist", "--no-ui", "--json", "--backend", "torch", "--device", "cpu", "--processes",
                  "2", "--preset", "smoke", "--epochs", "1", "--steps-per-epoch", "3", "--db", db)  # its first call, 2 timed
    assert out.returncode == 0, out.stderr[-3000:]
    result = json_events(out.stdout)[-1]
    assert result["status"] == "finished"
    device, summary = result["device"], result["summary"]
    assert (device["hosts"], device["replicas"], device["machines"]) == (2, 2, 1)  # two processes, one device each
    assert device["strategy"].startswith("DistributedDataParallel(2 processes") and "gloo" in device["strategy"]
    assert result["per_replica_batch"] == 32  # each process its share of the global 64
    steady = [s for s in result["steps"] if not s["warmup"]]
    assert steady and all(len(s["host_seconds"]) == 2 and s["seconds"] == max(s["host_seconds"]) for s in steady)
    assert len(summary["host_seconds"]) == 2 and summary["examples_per_s"] > 0  # each process's step; global rate
    f = summary["figures"]
    assert f["threads_per_process"] == max(1, physical_cores() // 2) and "physical core" in f["threads_from"]
    assert f["allreduce_bytes"] == ALLREDUCE_BYTES and f["allreduce_s"] > 0
    assert f["allreduce_algbw"] == pytest.approx(ALLREDUCE_BYTES / f["allreduce_s"])
    assert f["allreduce_busbw"] == pytest.approx(f["allreduce_algbw"] * 2 * (2 - 1) / 2)
    assert f["one_process_step_s"] > 0 and "64 examples" in f["one_process"]
    assert f["scaling_efficiency"] == pytest.approx(f["one_process_step_s"] / summary["step_seconds"]["median"])
    assert len(json.loads(run_cli("results", "--db", db, "list", "--json").stdout)) == 1  # one run, one record
    shown = run_cli("results", "--db", db, "show", result["id"][:8]).stdout
    for said in ("2 hosts x 1 devices", "slowest: host", "threads", "all-reduce", "busbw", "scaling", "efficiency"):
        assert said in shown, said


@pytest.mark.slow
def test_a_process_killed_mid_run_fails_the_run_naming_it(fashion_data):
    from tpulab.engine.runner import run_job
    from tpulab.engine.spec import resolve
    from tpulab.machine.detect import detect

    params = registry()["fashion-mnist"].resolve({**TORCH, "dataset": None, "steps_per_epoch": "100000",
                                                  "validation": "off"}, CPU, "smoke")
    run = run_job(resolve("fashion-mnist", params, detect()), detect())
    t0 = None
    for event in run.events():
        if isinstance(event, Step) and t0 is None:
            t0 = time.monotonic()
            run.handles[1].proc.kill()  # the follower dies; process 0 waits for it in the gradients' all-reduce
    assert t0 is not None and time.monotonic() - t0 < 60
    record = run.recorder.record()
    assert record.status == "failed" and record.error and record.error.startswith("process 1: ")
    assert "SIGKILL" in record.error
    assert all(h.returncode is not None for h in run.handles)  # nothing left behind
