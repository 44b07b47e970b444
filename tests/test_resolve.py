"""One resolve(): every `auto` decided once, with its reason; the worker runs the spec as given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tpulab
from tpulab.engine.spec import resolve
from tpulab.engine.store import Store
from tpulab.machine.detect import detect
from tpulab.workloads import registry
from tpulab.workloads.base import ParamError

from .helpers import HIDING, ROOT, json_events, run_cli

NEEDS = {"model": {"model": str(ROOT / "examples" / "models" / "mlp.py") + ":build"},  # no default there
         "fashion-mnist": {"dataset": "synthetic"}}  # no download in a test


def auto_left(params: dict) -> list[str]:
    return [name for name, value in params.items() if value == "auto"]


@pytest.mark.parametrize("name", list(registry()))
def test_resolve_leaves_no_auto_and_keeps_why(name):
    """Every workload's defaults on this CPU machine: the backend, the device and its own autos decided."""
    report = detect()
    spec = resolve(name, NEEDS.get(name, {}), report, "smoke" if "smoke" in registry()[name].presets else None)
    assert auto_left(spec.params) == []
    assert spec.backend != "auto" and spec.params["backend"] == spec.backend
    assert spec.device == report.default_device == spec.params["device"]
    assert spec.reasons["device"] == f"auto takes TPU, then GPU, then CPU: {spec.device.upper()} here"
    assert spec.reasons["backend"]  # the backends' own words (installed, drives the device)
    assert json.loads(json.dumps(spec.to_json()))["params"] == spec.params  # serialisable as it runs


def test_the_roofline_decides_its_dtypes_for_the_device(cpu_machine):
    spec = resolve("roofline", {"dtypes": "auto"}, cpu_machine)
    assert spec.params["dtypes"] == "float32"
    assert spec.reasons == {"backend": spec.backend_reason, "device": "auto takes TPU, then GPU, then CPU: CPU here",
                            "dtypes": "auto: those CPU has fast units for (float32)"}
    asked = resolve("roofline", {"dtypes": "float32+bfloat16", "device": "cpu"}, cpu_machine)
    assert asked.params["dtypes"] == "float32+bfloat16" and "dtypes" not in asked.reasons
    assert asked.reasons["device"] == "you chose cpu"


def test_an_asked_backend_is_the_users_and_auto_is_the_machines(cpu_machine):
    """On a machine with TensorFlow only, auto takes it (the article's framework), and says why."""
    auto = resolve("conv", {}, cpu_machine, "smoke")
    assert (auto.backend, auto.params["backend"]) == ("tensorflow", "tensorflow")
    assert auto.backend_reason == "TensorFlow is installed and drives this device (the article's framework)"
    chosen = resolve("conv", {"backend": "tensorflow"}, cpu_machine, "smoke")
    assert chosen.backend_reason == "you chose tensorflow" and chosen.params == auto.params


def test_a_value_the_decided_backend_cannot_take_is_refused_after_the_decision(cpu_machine):
    """batch-parallel needs a TPU on TensorFlow: with auto deciding TensorFlow on a CPU, resolve says so."""
    with pytest.raises(ParamError, match="--mode batch-parallel needs a TPU on TensorFlow"):
        resolve("conv", {"mode": "batch-parallel"}, cpu_machine, "smoke")


@pytest.mark.slow
def test_the_worker_runs_the_spec_without_deciding_again():
    """The worker, with the backends' decision made to fail in its process: the resolved spec runs."""
    spec = resolve("conv", {"batch_size": "2", "image_size": "8", "filters": "2", "iterations": "2",
                            "warmup": "0", "backend": "jax"}, detect(), "smoke")
    code = ("import sys; from tpulab import backends\n"
            "def refuse(*a, **k): raise AssertionError('the worker decided a backend again')\n"
            "backends.choose = refuse\n"
            "from tpulab.engine import worker; sys.exit(worker.main(sys.argv[1:]))")
    arg = json.dumps({"workload": "conv", "backend": spec.backend, "params": spec.params})
    out = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, **spec_env(spec)})
    events = json_events(out.stdout)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [e["event"] for e in events][0] == "started" and events[-1]["event"] == "finished"
    assert events[0]["backend"] == "jax" and events[0]["device"]["kind"] == "cpu"


def test_a_worker_imports_the_parents_tpulab():
    """Its path comes first: a checkout run from another folder is not shadowed by an installed tpulab."""
    from tpulab.engine.worker import child_env

    first = Path(child_env({"PYTHONPATH": "elsewhere"})["PYTHONPATH"].split(os.pathsep)[0])
    assert first / "tpulab" / "__init__.py" == Path(tpulab.__file__).resolve()


def spec_env(spec) -> dict[str, str]:
    from tpulab.engine.worker import child_env, worker_env

    return child_env(worker_env(spec.backend, spec.device, spec.workload.replicas(spec.params)))


@pytest.mark.slow
def test_a_run_says_the_backend_it_resolved_and_why(tpulab_home):
    out = run_cli("--run", "conv", "--no-ui", "--json", "--preset", "smoke", "--batch-size", "2", "--image-size", "8",
                  "--filters", "2", "--iterations", "2", "--warmup", "0", "--no-save")
    assert out.returncode == 0, out.stderr[-2000:]
    events = json_events(out.stdout)
    started, result = events[0], events[-1]
    expected = resolve("conv", {}, detect(), "smoke")
    assert started["event"] == "started" and started["backend"] == expected.backend
    assert result["params"]["backend"] == expected.backend and result["params"]["device"] == expected.device
    assert result["backend_reason"] == expected.backend_reason


def without_tensorflow(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """This machine without TensorFlow, its distributions' metadata hidden at the edge (as test_detect_doctor hides
    a backend), in this process and, through the environment returned, in a child: auto then decides another
    backend (JAX where installed, whose workers start fastest), still by the backends' own preferences."""
    from importlib import metadata

    from tpulab.backends import get

    hidden = get("tensorflow").distributions
    (tmp_path / "sitecustomize.py").write_text(HIDING)
    real = metadata.version

    def version(name: str) -> str:
        if name in hidden:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    return {"PYTHONPATH": str(tmp_path), "HIDDEN_DISTRIBUTIONS": ",".join(hidden)}


@pytest.mark.slow
def test_the_cli_and_the_notebook_sweep_the_same_points(tpulab_home, tmp_path, monkeypatch):
    env = without_tensorflow(tmp_path, monkeypatch)
    expected = resolve("conv", {"device": "cpu"}, detect(), "smoke")  # what auto decides on this machine
    grid = ["--preset", "smoke", "--batch-size", "2,4", "--image-size", "8", "--filters", "2", "--steps", "2",
            "--warmup", "0", "--device", "cpu"]
    out = run_cli("sweep", "conv", *grid, "--json", "--db", str(tpulab_home / "cli.db"), env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    cli = json_events(out.stdout)[-1]
    nb = tpulab.sweep("conv", preset="smoke", batch_size=[2, 4], image_size=8, filters=2, steps=2, warmup=0,
                      device="cpu", live=False, db=tpulab_home / "nb.db")
    assert sorted(p["values"]["batch_size"] for p in cli["points"]) == [2, 4]
    assert [p.values for p in nb.sweep.points] == [{"batch_size": 2}, {"batch_size": 4}]
    kept = Store(tpulab_home / "cli.db")
    cli_records = sorted((kept.get(p["runs"][0]) for p in cli["points"]), key=lambda r: r.params["batch_size"])
    cli_params = [r.params for r in cli_records]
    nb_params = [nb.records[p.runs[0]].params for p in nb.sweep.points]
    assert cli_params == nb_params and auto_left(nb_params[0]) == []
    assert nb_params[0]["iterations"] == 2 and nb_params[0]["backend"] != "auto"
    assert expected.backend != "tensorflow" and nb_params[0]["backend"] == expected.backend
    assert {r.backend_reason for r in [*cli_records, *(nb.records[p.runs[0]] for p in nb.sweep.points)]} == \
        {expected.backend_reason}  # decided by auto in both, for the same reason


def test_where_conv_runs_batch_parallel_is_its_runners_declaration(cpu_machine):
    """TensorFlow's runner on a TPU only, JAX's anywhere (shard_map), PyTorch's nowhere: each said with the way out."""
    from tpulab.backends import get
    from tpulab.workloads.conv import batch_parallel_devices, batch_parallel_refused

    assert [batch_parallel_devices(get(b)) for b in ("tensorflow", "jax", "torch")] == [("tpu",), ("cpu", "gpu", "tpu"), ()]
    assert batch_parallel_refused("torch", "cpu") == ("--mode batch-parallel does not run on PyTorch; use --backend jax "
                                                      "or --mode sharded")
    assert batch_parallel_refused("jax", "cpu") is None
