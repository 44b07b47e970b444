"""`--processes N --ray`: a run's processes started by Ray on a real local cluster (a head with no CPUs, so the other
process lands on the worker node): one record with the figures `--processes N` gives, and a node that dies mid-run
fails the run naming its process, in bounded time."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tpulab.base.errors import EXIT_CANCELLED
from tpulab.base.events import Step
from tpulab.engine.runner import run_job
from tpulab.engine.spec import resolve
from tpulab.machine.detect import detect

from .helpers import cancel_after, json_events, one_run_over_two_hosts, run_cli

ray = pytest.importorskip("ray")
CONV = ["--batch-size", "8", "--image-size", "32", "--filters", "8", "--mode", "batch-parallel"]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    worker = made.add_node(num_cpus=1)
    made.wait_for_nodes()
    yield made, worker
    ray.shutdown()
    made.shutdown()


@pytest.mark.slow
def test_two_processes_ray_starts_make_the_record_processes_2_makes(cluster):
    made, _ = cluster
    out = run_cli("--run", "conv", "--no-ui", "--json", "--backend", "jax", "--device", "cpu", "--processes", "2",
                  "--shards", "4", "--ray", made.address, "--no-save", "--iterations", "6", *CONV, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json_events(out.stdout)[-1]
    assert result["status"] == "finished"
    one_run_over_two_hosts(result)  # per-host step times, the slowest's, each host's telemetry: as --processes 2


def test_ray_needs_processes_and_says_so_in_one_line():
    out = run_cli("--run", "conv", "--no-ui", "--backend", "jax", "--ray", "--no-save", timeout=60)
    assert out.returncode == 2 and "--ray starts --processes N's processes as Ray tasks" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_cancel_stops_the_processes_ray_started_after_the_same_step(cluster):
    made, _ = cluster
    values = {"backend": "jax", "device": "cpu", "processes": 2, "shards": 4, "batch_size": 8, "image_size": 32,
              "filters": 8, "iterations": 100000}
    run = run_job(dataclasses.replace(resolve("conv", values, detect()), ray=made.address), detect())
    record = cancel_after(run)
    assert record.status == "cancelled" and run.exit_code == EXIT_CANCELLED
    assert [h.returncode for h in run.handles] == [EXIT_CANCELLED, EXIT_CANCELLED]  # each ended by itself


@pytest.mark.slow
def test_a_gpu_runs_processes_reserve_their_gpus_and_per_host_puts_each_on_its_own_node(cluster):
    """A node that declares a GPU to Ray (faked at the edge: Ray's own resource count): a GPU run's process is
    placed where the GPU is, its bundle holding it; `--per-host` spreads strictly, and asks for more nodes than the
    cluster has in one line, at once."""
    from ray.util.placement_group import placement_group_table, remove_placement_group

    from tpulab.base.errors import UsageError
    from tpulab.engine.ray_processes import connect, reserve

    made, worker = cluster
    gpu = made.add_node(num_cpus=1, num_gpus=1)
    made.wait_for_nodes()
    try:
        ray_ = connect(made.address)
        group = reserve(ray_, 2, "gpu", 1, per_host=False)
        table = placement_group_table(group)
        assert list(table["bundles"].values()) == [{"CPU": 1.0, "GPU": 1.0}] and table["strategy"] == "SPREAD"
        assert list(table["bundles_to_node_id"].values()) == [gpu.node_id]
        remove_placement_group(group)
        group = reserve(ray_, 3, "cpu", 1, per_host=True)  # the worker's CPU and the GPU node's: one each
        table = placement_group_table(group)
        assert table["strategy"] == "STRICT_SPREAD"
        assert sorted(table["bundles_to_node_id"].values()) == sorted([gpu.node_id, worker.node_id])
        remove_placement_group(group)
        began = time.monotonic()
        with pytest.raises(UsageError) as refused:
            reserve(ray_, 3, "gpu", 1, per_host=True)
        assert time.monotonic() - began < 5
        assert str(refused.value) == ("--processes 3 --ray --per-host: 2 process(es) other than 0 each on its own "
                                      "node, of 1 CPU, 1 GPU each, but 1 node(s) have that (`ray status` shows them)")
    finally:
        made.remove_node(gpu)


@pytest.mark.slow
def test_a_node_that_dies_mid_run_fails_the_run_naming_its_process(cluster):
    made, worker = cluster
    values = {"backend": "jax", "device": "cpu", "processes": 2, "shards": 4, "batch_size": 8, "image_size": 32,
              "filters": 8, "iterations": 100000}
    spec = dataclasses.replace(resolve("conv", values, detect()), ray=made.address)
    run = run_job(spec, detect())
    t0 = None
    for event in run.events():
        if isinstance(event, Step) and t0 is None:
            t0 = time.monotonic()
            made.remove_node(worker)  # its raylet and its workers go: process 1 with them
    assert t0 is not None and time.monotonic() - t0 < 60
    record = run.recorder.record()
    assert record.status == "failed" and record.error and record.error.startswith("process 1: its Ray task on ")
    assert "SIGKILL" not in record.error  # its node went: not a worker the kernel killed
