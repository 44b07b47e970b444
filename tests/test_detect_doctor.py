"""Detection and the doctor on fake /proc, /sys, /dev trees and environments: every branch for real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tpulab import backends
from tpulab.engine.doctor import diagnose
from tpulab.machine.detect import detect
from tpulab.machine.peaks import cpu_peak, device_peak, gpu_peak, tpu_peak

from .helpers import HIDING, TF, gpu_tree, pci, run_cli, tree, v5e_tree


def verdict(report, device):
    return [v for v in diagnose(report) if v.device == device]


def test_no_accelerator(tmp_path):
    r = detect(tree(tmp_path, pci("0000:00:01.0", "0x8086", "0x7000", "0x060100")), {}, TF)
    assert r.cpu.model == "AMD EPYC 7B12" and r.cpu.logical_cores == 4
    assert r.cpu.features == ["sse4_2", "avx", "avx2", "fma"] and r.cpu.memory_bytes == 16384000 * 1024
    assert r.tpu is None and r.gpus == [] and not r.colab
    assert r.default_device == "cpu" and r.max_shards() == {"cpu": 8, "gpu": 0, "tpu": 0}
    [v] = diagnose(r)
    assert v.device == "cpu" and "runs will use the CPU" in v.message and v.fix is None


def test_no_accelerator_on_colab_points_at_the_runtime_menu(tmp_path):
    r = detect(tree(tmp_path), {"COLAB_RELEASE_TAG": "release-colab_20261101"}, TF)
    assert r.colab
    assert "Change runtime type" in diagnose(r)[0].fix


def test_gpu_found_through_the_driver(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TF)
    [g] = r.gpus
    assert g.name == "Tesla T4" and g.driver == "535.104.05" and "proc/driver/nvidia" in g.found_by
    assert r.default_device == "gpu" and r.max_shards()["gpu"] == 1


def test_doctor_gpu_without_cuda_libraries(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TF)
    [v] = verdict(r, "gpu")
    assert v.level == "warn" and v.fix == "pip install 'tensorflow[and-cuda]'"


def test_doctor_gpu_with_a_cpu_only_tensorflow(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TF)
    r.frameworks["tensorflow"] = {"gpus": [], "built_with_cuda": False, "tpu_cores": 0}
    [v] = verdict(r, "gpu")
    assert v.level == "error" and "CPU-only" in v.message and "tensorflow[and-cuda]" in v.fix
    assert r.default_device == "cpu"  # TensorFlow's view wins over the hardware's


def test_doctor_gpu_with_cuda_build_but_missing_libraries(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TF)
    r.frameworks["tensorflow"] = {"gpus": [], "built_with_cuda": True, "tpu_cores": 0}
    [v] = verdict(r, "gpu")
    assert v.level == "error" and "CUDA libraries are missing" in v.message


def test_doctor_gpu_in_use(tmp_path):
    r = detect(gpu_tree(tmp_path), {}, TF)
    r.frameworks["tensorflow"] = {"gpus": [{"name": "Tesla T4", "compute_capability": "7.5"}], "built_with_cuda": True}
    [v] = verdict(r, "gpu")
    assert v.level == "ok"


def test_gpu_on_the_bus_without_a_driver(tmp_path):
    r = detect(tree(tmp_path, pci("0000:00:04.0", "0x10de", "0x20b0", "0x030200")), {}, TF)
    assert r.gpus == [] and r.gpu_hardware == 1
    [v] = verdict(r, "gpu")
    assert "no NVIDIA driver" in v.message and "nvidia-driver" in v.fix


def test_tpu_vm_v5e(tmp_path):
    r = detect(v5e_tree(tmp_path), {"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, {**TF, "libtpu": "0.0.21"})
    t = r.tpu
    assert t.generation == "v5e" and t.chips == 1 and t.cores == 1
    assert any("0x1ae0" in f for f in t.found_by) and any("/dev/vfio" in f for f in t.found_by)
    assert r.default_device == "tpu" and r.max_shards()["tpu"] == 1


def test_doctor_tpu_without_tpu_runtime(tmp_path):
    r = detect(v5e_tree(tmp_path), {}, TF)
    [v] = verdict(r, "tpu")
    assert v.level == "error" and "no TPU runtime (libtpu)" in v.message
    assert "tensorflow-tpu stops at 2.20.0" in v.message
    # A pair that is published: tensorflow-tpu has no 2.21 wheel, so the fix takes the newest that exists.
    assert v.fix == "pip uninstall -y tensorflow && pip install tensorflow-tpu==2.20.0"
    assert r.default_device == "cpu"


def test_doctor_tpu_without_any_framework(tmp_path):
    r = detect(v5e_tree(tmp_path), {}, {})
    [v] = verdict(r, "tpu")
    assert v.level == "error" and "neither JAX nor TensorFlow" in v.message and v.fix == "pip install -U 'jax[tpu]'"


def test_doctor_colab_tpu_as_shipped_runs_on_jax(tmp_path):
    """Colab's TPU runtime: JAX and libtpu, no TensorFlow. JAX drives it; TensorFlow is only an option."""
    r = detect(v5e_tree(tmp_path), {"TPU_ACCELERATOR_TYPE": "v5litepod-1"}, {"jax": "0.10.2", "libtpu": "0.0.21"})
    r.frameworks["jax"] = {"jax": "0.10.2", "platform": "tpu", "tpu_cores": 1, "gpus": []}
    by_framework = {v.framework: v for v in verdict(r, "tpu")}
    assert by_framework["jax"].level == "ok"
    assert by_framework["tensorflow"].level == "info" and "runs on JAX here" in by_framework["tensorflow"].message
    assert by_framework["tensorflow"].fix == "pip install tensorflow-tpu==2.20.0"


def test_doctor_tpu_version_mismatch(tmp_path):
    r = detect(v5e_tree(tmp_path), {}, {**TF, "tensorflow-tpu": "2.20.0"})
    [v] = verdict(r, "tpu")
    assert "differ" in v.message and v.fix == "pip uninstall -y tensorflow && pip install tensorflow-tpu==2.20.0"


def test_doctor_fixes_name_published_versions():
    from tpulab.backends.tensorflow import TF_TPU_LATEST, tf_tpu_install
    assert TF_TPU_LATEST == "2.20.0"  # the newest tensorflow-tpu on PyPI (see the table's note)
    assert tf_tpu_install("2.19.0").endswith("tensorflow-tpu==2.19.0")  # one that exists keeps its pair
    assert tf_tpu_install("2.21.0").endswith("tensorflow-tpu==2.20.0")
    assert tf_tpu_install("2.30.1").endswith("tensorflow-tpu==2.20.0")


def test_doctor_tpu_no_opkernel(tmp_path):
    r = detect(v5e_tree(tmp_path), {}, {**TF, "libtpu": "0.0.21"})
    r.frameworks["tensorflow"] = {"gpus": [], "tpu_cores": 0, "tpu_error": "NotFoundError: No OpKernel registered for "
                    "ConfigureDistributedTPU with these attrs"}
    [v] = verdict(r, "tpu")
    assert "no TPU kernels" in v.message and v.fix.startswith("pip uninstall -y tensorflow && pip install tensorflow-tpu")


def test_doctor_tpu_in_use(tmp_path):
    r = detect(v5e_tree(tmp_path), {}, {**TF, "libtpu": "0.0.21"})
    r.frameworks["tensorflow"] = {"gpus": [], "tpu_cores": 1}
    [v] = verdict(r, "tpu")
    assert v.level == "ok" and r.default_device == "tpu"


def test_tpu_v4_through_dev_accel(tmp_path):
    files = {}
    for i in range(4):
        files.update(pci(f"0000:00:0{i + 4}.0", "0x1ae0", "0x005e", "0x120000"))
    r = detect(tree(tmp_path, files, dirs=tuple(f"dev/accel{i}" for i in range(4))), {}, TF)
    assert r.tpu.generation == "v4" and r.tpu.chips == 4 and r.tpu.cores == 4
    assert any("/dev/accel" in f for f in r.tpu.found_by)


def test_legacy_colab_tpu_node(tmp_path):
    env = {"COLAB_TPU_ADDR": "10.0.0.2:8470", "COLAB_RELEASE_TAG": "x"}
    r = detect(tree(tmp_path), env, {**TF, "libtpu": "0.0.21"})
    assert r.colab and r.tpu.address == "grpc://10.0.0.2:8470"
    assert r.tpu.generation == "v2" and r.tpu.cores == 8
    v = verdict(r, "tpu")[0]
    assert v.level == "warn" and "legacy TPU Node" in v.message and "retired" in v.message


def test_vfio_alone_is_not_a_tpu(tmp_path):
    assert detect(tree(tmp_path, dirs=("dev/vfio/0",)), {}, TF).tpu is None


def test_peaks():
    r = detect(Path("/"), {}, TF)
    p = cpu_peak(r.cpu, "float32")
    assert p.value > 0 and "estimate" in p.source
    assert gpu_peak("NVIDIA A100-SXM4-40GB", "float32").value == 156e12  # TF32 is TF's default
    assert gpu_peak("Tesla T4", "float16").value == 65e12
    assert gpu_peak("Tesla K80", "float32").value == pytest.approx(4.37e12)
    assert gpu_peak("Mystery GPU", "float32") is None
    assert tpu_peak("v2").value == 22.5e12  # 45 per chip, 2 cores per chip
    assert tpu_peak("v5e").value == 197e12
    assert device_peak("tpu", "v2", "float32", 8, None).value == 180e12  # the article's v2-8
    assert device_peak("gpu", "Tesla T4", "float32", 2, None).value == pytest.approx(16.2e12)


def test_cpu_peak_uses_the_max_clock_when_known(tmp_path):
    root = tree(tmp_path, {"sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3300000\n"})
    cpu = detect(root, {}, TF).cpu
    assert cpu.max_mhz == 3300.0
    assert cpu_peak(cpu, "float32").value == pytest.approx(4 * 3.3e9 * 32)


def test_core_never_imports_a_framework_or_textual():
    code = ("import sys; import tpulab.cli.main, tpulab.machine.detect, tpulab.engine.doctor, tpulab.machine.peaks, "
            "tpulab.workloads, tpulab.engine.record, tpulab.engine.store, tpulab.cli.results, tpulab.engine.runner, tpulab.engine.worker, "
            "tpulab.views.console, tpulab.workloads.data, tpulab.base.timing, tpulab.base.events, tpulab.engine.estimate, "
            "tpulab.views.narrate, tpulab.engine.runindex, "
            "tpulab.backends, tpulab.base.plugins; from tpulab.machine.detect import detect; detect(); "
            "from tpulab.workloads import registry; from tpulab.backends import registry as b; registry(); b(); "
            "bad = [m for m in ('tensorflow', 'keras', 'jax', 'textual') if m in sys.modules]; print(bad); "
            "sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_listing_the_kept_runs_loads_no_numpy(tmp_path):
    """`tpulab results` and `tpulab cards` are answered in a third of a second: numpy (0.1-0.2 s of a start here) is
    for the workers and the front ends that compute, not for a command that reads the store."""
    code = ("import runpy, sys; sys.argv = ['tpulab', 'results', '--db', sys.argv[1], 'list']\n"
            "try:\n    runpy.run_module('tpulab', run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.db")], capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "exit 0 False", out.stdout + out.stderr


def test_fast_detect_and_doctor_commands():
    fast = run_cli("detect", "--fast", "--json")
    assert fast.returncode == 0
    report = json.loads(fast.stdout)
    here = detect()
    assert report["frameworks"] == {} and report["default_device"] == here.default_device
    assert report["cpu"]["logical_cores"] == here.cpu.logical_cores
    assert [v["message"] for v in report["verdicts"]] == [v.message for v in diagnose(here)]
    human = run_cli("doctor", "--fast")
    assert human.returncode == 0
    for v in diagnose(here):
        assert v.message.split(":")[0] in " ".join(human.stdout.split())


@pytest.mark.skipif(detect().accelerated, reason="asserts the view of a machine without accelerators")
def test_detect_on_a_cpu_alone_asks_no_framework_unless_deep():
    """Each framework's probe is seconds of imports (here TensorFlow 2.4 s, PyTorch 1.2 s, JAX 0.6 s: `detect` took
    4.9 s, 0.3 s without them) that on a CPU alone see the CPU the fast probes saw, and no verdict reads them:
    `detect` leaves them out there, and says how to ask."""
    shown = run_cli("detect", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["frameworks"] == {}
    assert not [line for line in shown.stderr.splitlines() if line.startswith("probing ")]
    human = run_cli("detect")
    assert "not asked for their own views: with no GPU or TPU found they see this CPU alone (seconds each to ask). " \
        "tpulab detect --deep asks them." in " ".join(human.stdout.split())
    both = run_cli("detect", "--fast", "--deep")
    assert both.returncode == 2 and both.stderr.count("\n") == 1 and "--deep" in both.stderr


def test_a_tensorflow_build_flag_reads_as_a_build_not_as_a_gpu(tmp_path):
    """'built with CUDA: True' on a machine with no GPU read as 'CUDA is available': the build is said as one."""
    from tpulab.views.console import framework_view

    r = detect(tree(tmp_path), {}, TF)
    r.frameworks["tensorflow"] = {"tensorflow": "2.21.0", "keras": "3.15.1", "gpus": [], "built_with_cuda": True,
                                  "tpu_cores": 0}
    shown = framework_view("tensorflow", r, False)
    assert shown == "2.21.0 (Keras 3.15.1), a build that supports CUDA; no GPU visible here, TPU cores: 0"
    r.frameworks["tensorflow"].update(gpus=[{"name": "Tesla T4", "compute_capability": "7.5"}])
    assert "a build that supports CUDA; GPUs: Tesla T4 (cc 7.5)," in framework_view("tensorflow", r, False)
    r.frameworks["tensorflow"].update(gpus=[], built_with_cuda=False)
    assert "a CPU-only build; no GPU visible here" in framework_view("tensorflow", r, False)


def test_llama_cpp_is_shown_by_its_own_version_and_without_keras(tmp_path):
    """Issue 64, item 14: `detect` said 'llama.cpp | 2026.10.11549 (Keras 3.15.1)' (llama.cpp uses no Keras), and
    once probed 'None (Keras -)' (its view names its version by its package, xllamacpp). A framework Keras runs on
    keeps its Keras."""
    from tpulab.views.console import framework_view

    r = detect(tree(tmp_path), {}, {**TF, "xllamacpp": "2026.10.11549", "gguf": "0.19.0", "torch": "2.14.1"})
    assert framework_view("llamacpp", r, False) == "2026.10.11549; its own view not probed"
    assert framework_view("torch", r, False) == "2.14.1 (Keras 3.15.1); its own view not probed"
    r.frameworks["llamacpp"] = {"xllamacpp": "2026.10.11549", "gguf": "0.19.0", "devices": ["a CPU"], "gpus": [],
                                "tpu_cores": 0, "also": "ggml built for AVX2"}
    assert framework_view("llamacpp", r, False) == ("2026.10.11549, GPUs: none, TPU cores: 0; ggml built for "
                                                    "AVX2")
    here = detect().packages
    if not backends.get("llamacpp").installed(here):
        return
    shown = run_cli("detect", "--fast")  # the real command, as a user reads it
    assert shown.returncode == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if "llama.cpp" in line]
    assert f"{here['xllamacpp']};" in line and "Keras" not in line, line


@pytest.mark.slow
@pytest.mark.skipif(detect().accelerated, reason="asserts the view of a machine without accelerators")
def test_detect_probes_each_installed_framework(tmp_path):
    deep = run_cli("detect", "--json", "--deep")
    from tpulab.backends import registry

    here = {name: b for name, b in registry().items() if b.framework and b.installed(detect().packages)}  # no `server`
    shown = json.loads(deep.stdout)
    views = shown["frameworks"]
    assert set(views) == set(here)  # each one here
    tf_view = views["tensorflow"]
    assert tf_view["tensorflow"].startswith("2.") and tf_view["gpus"] == [] and tf_view["tpu_cores"] == 0
    if "jax" in views:  # installed here (checked above): it sees this host's CPU
        assert views["jax"]["platform"] == "cpu" and views["jax"]["tpu_cores"] == 0
    # seconds each: said while it happens, one line per framework
    assert [line for line in deep.stderr.splitlines() if line.startswith("probing ")] == \
        [f"probing {b.title}..." for b in here.values()]
    assert any("runs will use the CPU" in v["message"] for v in shown["verdicts"])  # the doctor's, on what was probed
    # The doctor probes too, and prints its verdicts: probed here with one framework left visible (the quickest to
    # probe), the others hidden at the edge (their distributions' metadata), as the missing-backend test does.
    kept = "jax" if "jax" in here else "tensorflow"
    (tmp_path / "sitecustomize.py").write_text(HIDING)
    hidden = [d for name, b in here.items() if name != kept for d in b.distributions]
    human = run_cli("doctor", "--deep", env={"PYTHONPATH": str(tmp_path), "HIDDEN_DISTRIBUTIONS": ",".join(hidden)})
    assert human.returncode == 0 and "runs will use the CPU" in human.stdout
    assert [line for line in human.stderr.splitlines() if line.startswith("probing ")] == \
        [f"probing {here[kept].title}..."]


@pytest.mark.parametrize("missing", [name for name, b in backends.registry().items() if b.framework])
def test_detect_and_doctor_give_the_install_command_beside_a_missing_backend(tmp_path, missing):
    """A backend whose packages this Python cannot find (hidden at the edge: its distributions' metadata) is
    named with the command its registration gives, by the real `detect` and `doctor`."""
    (tmp_path / "sitecustomize.py").write_text(HIDING)
    b = backends.get(missing)
    env = {"PYTHONPATH": str(tmp_path), "HIDDEN_DISTRIBUTIONS": ",".join(b.distributions), "COLUMNS": "300"}
    detected = run_cli("detect", "--fast", env=env)
    doctor = run_cli("doctor", "--fast", env=env)
    assert detected.returncode == doctor.returncode == 0, detected.stderr + doctor.stderr
    assert f"{b.title}" in detected.stdout and f"not installed: {b.install}" in detected.stdout
    assert f"{b.title}: not installed: {b.install}\n" in doctor.stdout
    here = detect().packages
    others = [o for o in backends.registry().values() if o is not b and o.installed(here)]
    assert not any(f"{o.title}: not installed" in doctor.stdout for o in others)  # installed: not named
