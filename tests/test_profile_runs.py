"""--profile end to end: real workers, real frameworks, tiny shapes. The steps are traced after the
timed ones (never timed), read in the worker, judged by the recorder, kept with the run and its trace
under tpulab's home, and the trace goes when the run is pruned."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tpulab.base.home import traces
from tpulab.engine.store import Store, default_path

from .helpers import ROOT, json_events, run_cli

pytestmark = pytest.mark.slow  # each test starts a framework in a worker

TINY = ("--batch-size", "8", "--image-size", "32", "--filters", "16", "--iterations", "4", "--warmup", "1")
# Two epochs of 3 steps of 8 images: the step's size and count change nothing of where the profiled ones go
CNN = ("--preset", "smoke", "--dataset", "synthetic", "--no-validation", "--batch-size", "8", "--steps-per-epoch", "3")


def profiled(*args: str, env: dict | None = None) -> tuple[list[dict], dict]:
    """A run with --profile, its events and its result."""
    out = run_cli("--no-ui", "--json", "--profile", *args, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    events = json_events(out.stdout)
    return events, events[-1]


def check_profile(result: dict, steps: int = 3) -> dict:
    """What every profile holds: its ops, which with the host gap make the traced step (never more), and its
    trace, kept under tpulab's home by the run's id."""
    p = result["summary"]["profile"]
    assert p["steps"] == steps and p["ops"] and p["profiler"]
    assert sum(o["seconds"] for o in p["ops"]) <= p["step_seconds"] * (1 + 1e-9)
    assert sum(o["seconds"] for o in p["ops"]) + p["host_gap"] == pytest.approx(p["step_seconds"], rel=1e-6)
    assert p["trace_path"] == str(traces() / result["id"]) and list(Path(p["trace_path"]).rglob("*.xplane.pb"))
    return p


@pytest.fixture(scope="module")
def jax_conv(tmp_path_factory) -> tuple[Path, list[dict], dict]:
    """A profiled conv on JAX, kept in a home of its own: the home, its events and its result. The conv test reads
    it, then the pruning test after it prunes it."""
    home = tmp_path_factory.mktemp("jax-conv") / "tpulab-home"
    return (home, *profiled("--run", "conv", *TINY, "--backend", "jax", env={"TPULAB_HOME": str(home)}))


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_conv_profiles_after_its_timed_steps_which_stay_as_they_were(request, monkeypatch, backend):
    if backend == "jax":  # the run the pruning test prunes next
        home, events, result = request.getfixturevalue("jax_conv")
        monkeypatch.setenv("TPULAB_HOME", str(home))
    else:
        events, result = profiled("--run", "conv", *TINY, "--backend", backend)
    kinds = [e["event"] for e in events if e["event"] != "sample"]
    assert kinds[-3:] == ["profiled", "finished", "result"]  # after every timed step
    assert [s["warmup"] for s in events if s["event"] == "step"] == [True, False, False, False, False]
    assert result["summary"]["step_seconds"]["count"] == 4
    p = check_profile(result)
    conv = next(o for o in p["ops"] if o["category"] == "matmul/conv")
    assert conv["flops"] == result["summary"]["flops_per_step"] and conv["gflops_per_s"] > 0


def test_pruning_a_profiled_run_removes_its_trace(jax_conv, monkeypatch):
    """The JAX conv the conv test read just before."""
    home, _, result = jax_conv
    monkeypatch.setenv("TPULAB_HOME", str(home))
    trace = Path(result["summary"]["profile"]["trace_path"])
    assert trace.is_dir()
    pruned = run_cli("results", "prune", "--all", "--yes")
    assert pruned.returncode == 0, pruned.stderr
    assert not trace.exists() and Store(default_path()).count() == 0


def test_a_run_that_is_not_kept_leaves_its_trace_in_the_temporary_folder():
    """Nothing would ever prune the trace of a run --no-save did not keep: it is not put under tpulab's home."""
    _, result = profiled("--run", "conv", *TINY, "--backend", "jax", "--no-save")
    trace = Path(result["summary"]["profile"]["trace_path"])
    try:
        assert trace == Path(tempfile.gettempdir()) / "tpulab-traces" / result["id"]
        assert list(trace.rglob("*.xplane.pb")) and not (traces() / result["id"]).exists()
    finally:
        shutil.rmtree(trace, ignore_errors=True)


def test_the_cnn_profiles_extra_steps_at_the_end_of_fit():
    """In a fit workload the profiled steps are extra steps: the timed ones are as many as without. On TensorFlow
    (its graph runs the CNN at once; XLA compiles it for longer than the run takes): a user's model is profiled on
    JAX below, so that the shared Keras runner's profiled fit runs on both."""
    events, result = profiled("--run", "fashion-mnist", *CNN, "--backend", "tensorflow")
    assert result["summary"]["step_seconds"]["count"] == 2 * 3 - 1  # two epochs of 3, less the first call
    assert len([e for e in events if e["event"] == "step"]) == 5
    p = check_profile(result)
    assert any(o["category"] == "matmul/conv" and o["flops"] for o in p["ops"])


def test_a_users_model_is_profiled():
    _, result = profiled("--run", "model", "--model", "examples/models/two_heads.py:build", "--preset", "smoke",
                         "--backend", "jax", "--profile-steps", "2")
    check_profile(result, steps=2)


def test_a_sweep_with_profile_profiles_each_point():
    out = run_cli("sweep", "conv", *TINY[2:6], "--batch-size", "4,8", "--steps", "2", "--backend", "jax",
                  "--profile", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    points = [e for e in json_events(out.stdout) if e.get("event") == "point"]
    assert len(points) == 2
    records = Store(default_path()).records()
    assert sorted(r.batch for r in records) == [4, 8]
    assert all(r.summary.profile is not None and r.summary.profile.ops and r.summary.step_seconds.count == 2
               for r in records)
    assert {Path(r.summary.profile.trace_path).name for r in records} == {r.id for r in records}


@pytest.fixture(autouse=True)
def in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)  # the example model's path is relative to it, as in the README
