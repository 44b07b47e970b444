"""The device check's own parts (benchmarks/device_check.py), without a GPU, a venv or PyPI: its
summary survives a step that fails and one that hangs, and the wheels it builds for the lent GPU
machine carry tags that machine's pip accepts, one version each."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "device_check.py"
_spec = importlib.util.spec_from_file_location("device_check", PATH)
assert _spec and _spec.loader
dc = importlib.util.module_from_spec(_spec)
sys.modules["device_check"] = dc  # dataclasses look their module up
_spec.loader.exec_module(dc)

PY = sys.executable


def test_summary_is_written_when_a_step_fails_or_hangs(tmp_path):
    marker = tmp_path / "outlived"
    child = f"import time; time.sleep(1.5); open({str(marker)!r}, 'w')"
    hang = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(60)"
    failed_run = json.dumps({"event": "result", "status": "failed", "error": "out of memory"})
    steps = [
        dc.Step("first", [PY, "-c", "print('noise'); print('42 things')"], 10, dc.last_line),
        dc.Step("broken", [PY, "-c", "import sys; sys.exit(3)"], 10, dc.last_line),
        dc.Step("hung", [PY, "-c", hang], 0.5, dc.last_line),
        dc.Step("run", [PY, "-c", f"print({failed_run!r})"], 10, dc.figures),
        dc.Step("last", [PY, "-c", "print('still ran')"], 10, dc.last_line),
    ]
    start = time.monotonic()
    dc.run_steps(steps, tmp_path, {}, "check")
    assert time.monotonic() - start < 8

    summary = json.loads((tmp_path / "summary.json").read_text())
    got = [(s["step"], s["status"], s["headline"]) for s in summary["steps"]]
    assert got == [("first", "ok", "42 things"),
                   ("broken", "failed", "exit 3; no output (its stderr is in steps.log)"),
                   ("hung", "timed out", "killed after 0.5 s"),
                   ("run", "failed", "run failed: out of memory"),
                   ("last", "ok", "still ran")]
    text = (tmp_path / "summary.txt").read_text().splitlines()
    assert text[0] == "check"
    assert text[4].split()[:2] == ["hung", "timed"]
    assert "=== broken" in (tmp_path / "steps.log").read_text()
    time.sleep(2)  # the hung step's own child would have written the marker by now
    assert not marker.exists()


def test_summary_keeps_each_step_as_it_ends(tmp_path):
    """Killed midway (the device's limit), the check leaves the steps it finished."""
    outcome = dc.Outcome("detect", "ok", 1.25, "jax 0.11.2 on gpu: NVIDIA H200")
    text = dc.write_summary(tmp_path, "title", [outcome])
    assert text.splitlines()[2].split() == ["detect", "ok", "1.2", "jax", "0.11.2", "on", "gpu:",
                                            "NVIDIA", "H200"]
    assert text.splitlines()[-1] == "1 of 1 steps ok in 1 s"
    assert (tmp_path / "summary.txt").read_text() == text


def test_gpu_plan_runs_every_workload_on_jax_torchs_paths_and_a_card_within_one_commands_ten_minutes(tmp_path):
    steps = dc.plan("gpu", "python3", tmp_path, tmp_path / "site", tmp_path, tmp_path / "db")
    assert [s.name for s in steps] == ["install", "detect", "top", "roofline", "conv", "resnet50",
                                       "transformer", "torch conv", "torch decode", "torch module",
                                       "bench", "export", "telemetry"]
    assert sum(s.timeout for s in steps) <= 600
    card = next(s.argv for s in steps if s.name == "bench")
    assert card[card.index("--backend") + 1] == "jax" and "--quick" in card
    assert card[card.index("-o") + 1] == str(tmp_path / "card.json")  # kept in $OUT
    torch = {s.name: s.argv for s in steps if s.name.startswith("torch")}
    assert all(a[a.index("--backend") + 1] == "torch" and a[a.index("--device") + 1] == "gpu" for a in torch.values())
    assert "--verify" in torch["torch decode"]
    module = torch["torch module"]
    assert Path(module[module.index("--model") + 1].split(":")[0]).is_file()  # the example, wherever it runs from
    assert module[module.index("--compile") + 1] == "both" and "--profile" in module
    assert not [s for s in dc.plan("cpu", "python3", tmp_path, tmp_path / "site", tmp_path, tmp_path / "db")
                if s.name.startswith("torch") or s.name == "bench"]  # no PyTorch there, and the card is the GPU's
    runs = {s.name: s.argv for s in steps if "--run" in s.argv and s.name in dc.PRESETS["gpu"]}
    assert {n: (a[a.index("--backend") + 1], a[a.index("--device") + 1], a[a.index("--preset") + 1])
            for n, a in runs.items()} == {"roofline": ("jax", "gpu", "default"),
                                          "conv": ("jax", "gpu", "article"),
                                          "resnet50": ("jax", "gpu", "smoke"),
                                          "transformer": ("jax", "gpu", "tiny")}


def test_install_without_a_wheelhouse_says_so(tmp_path):
    step = dc.install(tmp_path / "gpu", tmp_path / "site")
    assert dc.judge(step, 1, "") == ("failed", f"exit 1; no wheels in {tmp_path / 'gpu'}: build it, "
                                               "and carry it along")


GPU_TAGS = dc.supported_tags((3, 12), dc.GPU_PLATFORMS)


def test_wheels_for_the_gpu_machine_fit_its_python_and_platform():
    fits = ["keras-3.15.1-py3-none-any.whl",
            "optree-0.20.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
            "psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.whl"]
    assert dc.misfits(fits, GPU_TAGS) == []


@pytest.mark.parametrize("wheel", [
    "optree-0.20.0-cp311-cp311-manylinux_2_28_x86_64.whl",  # this machine's Python
    "optree-0.20.0-cp312-cp312-musllinux_1_2_x86_64.whl",
    "optree-0.20.0-cp312-cp312-manylinux_2_28_aarch64.whl",
    "optree-0.20.0-cp312-cp312-macosx_11_0_arm64.whl",
    "optree-0.20.0-cp312-cp312-manylinux_2_40_x86_64.whl",  # a newer glibc than the image's
])
def test_a_wheel_for_another_python_or_platform_is_refused(wheel):
    assert dc.misfits([wheel], GPU_TAGS) == [f"{wheel}: no tag the target accepts"]


def test_two_versions_of_one_project_are_refused():
    wheels = ["keras-3.15.1-py3-none-any.whl", "keras-3.14.0-py3-none-any.whl"]
    assert dc.misfits(wheels, GPU_TAGS) == ["keras: two versions, 3.15.1 and 3.14.0"]


def test_what_the_gpu_image_has_stays_behind():
    assert dc.image_has("ml_dtypes-0.7.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert dc.image_has("numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert not dc.image_has("keras-3.15.1-py3-none-any.whl")


def test_requirements_leave_tensorflow_out_and_bring_keras():
    gpu, cpu = dc.requirements(cpu=False), dc.requirements(cpu=True)
    assert not [r for r in gpu + cpu if r.startswith("tensorflow")]
    assert "keras>=3" in gpu and any(r.startswith("textual>=") for r in gpu)
    assert [r for r in cpu if r not in gpu] == ["jax>=0.5.1", "filelock"]


def gpu_record(util: float | None, mem: float | None) -> dict:
    device = {"kind": "gpu", "index": 0, "util": util, "mem_used": mem}
    return {"telemetry": [{"rss": 1.0, "devices": [device]}],
            "summary": {"telemetry": {"unavailable": {"gpu util": "NVML: not supported"}}}}


def test_telemetry_check_reads_the_gpu_figures_of_the_runs(tmp_path):
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"records": [gpu_record(87.0, 3 * 2**30), gpu_record(12.0, 2**30)]}))
    assert dc.telemetry_check(records, "gpu") == (
        "2 samples in 2 runs; GPU util peak 87%, memory peak 3.0 GiB")


def test_telemetry_check_fails_without_gpu_utilisation(tmp_path):
    records = tmp_path / "records.json"
    records.write_text(json.dumps({"records": [gpu_record(None, 2**30)]}))
    with pytest.raises(dc.StepFailed, match="1 GPU readings without util or memory: "
                                            "{'gpu util': 'NVML: not supported'}"):
        dc.telemetry_check(records, "gpu")


def test_the_bench_step_reads_its_card_and_fails_without_one(tmp_path):
    from tpulab.engine.card import Card, CardEntry, CardSuite

    path = tmp_path / "card.json"
    step = dc.Step("bench", ["tpulab", "bench"], 1, dc.card(path))
    assert dc.judge(step, 1, "") == ("failed", f"exit 1; no card at {path} (its stderr is in steps.log)")
    made = Card(id="c0ffee00" * 4, created_at="2026-12-02T00:00:00+00:00", suite=CardSuite(name="tpulab-card", version=1,
                quick=True), machine={}, ceilings=[], entries=[
        CardEntry(name="conv", workload="conv", backend="jax", status="ok", unit="GFLOP/s", median=50.0, n=10),
        CardEntry(name="decode-b8", workload="decode", backend="jax", status="failed", reason="out of memory")])
    path.write_text(json.dumps(made.to_json()))
    assert dc.judge(step, 1, "") == ("failed", "exit 1; card c0ffee00: 1 of 2 entries ok; decode-b8: out of memory")
