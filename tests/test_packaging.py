"""The backends are equals in packaging too: the core needs Keras, each framework is an extra, and a
machine with neither still detects, diagnoses and names the extra to install."""

from __future__ import annotations

import re

import pytest

from tpulab.backends import BackendError, choose
from tpulab.engine.doctor import diagnose
from tpulab.machine.detect import detect

from .helpers import ROOT, gpu_tree, tree

tomllib = pytest.importorskip("tomllib")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_core_depends_on_keras_and_on_no_framework():
    core = names(PROJECT["dependencies"])
    assert "keras" in core and not core & {"tensorflow", "tensorflow-cpu", "jax", "jaxlib", "torch"}


def test_each_framework_is_an_extra_and_all_is_every_one():
    extras = PROJECT["optional-dependencies"]
    assert all(name in names(extras[name]) for name in ("tensorflow", "jax", "torch"))
    # ray: `make test` runs a cluster; mlflow: an export's tests read a real store; serve: its client's streams
    assert extras["all"] == ["tpulab[tensorflow,jax,torch,hf,timm,keras-hub,llamacpp,ray,mlflow,serve]"]
    assert all(name in names(extras[extra]) for extra, name in (("hf", "transformers"), ("timm", "timm"),
                                                                ("keras-hub", "keras-hub"), ("llamacpp", "xllamacpp"),
                                                                ("ray", "ray"), ("mlflow", "mlflow-skinny"),
                                                                ("serve", "aiohttp")))


def test_make_installs_every_backend_with_pytorchs_cpu_build_where_no_nvidia_gpu_is():
    makefile = (ROOT / "Makefile").read_text()
    assert "-e '.[all,test,dev]'" in makefile
    cpu_first = makefile.index("pip install -q $(TORCH_CPU)")
    assert cpu_first < makefile.index("-e '.[all,test,dev]'") and "$(if $(GPU),," in makefile


def test_a_machine_without_a_backend_is_diagnosed_with_the_extras_to_install(tmp_path):
    """Detection takes the installed packages as data: here none, on a CPU box and on a GPU box."""
    for report in (detect(tree(tmp_path / "cpu"), {}, {}), detect(gpu_tree(tmp_path / "gpu"), {}, {})):
        [missing] = [v for v in diagnose(report) if v.level == "error" and "is installed" in v.message]
        assert missing.device == report.default_device
        assert missing.message == ("neither TensorFlow nor JAX nor PyTorch is installed: tpulab runs nothing here until "
                                   "one is (or pip install 'tpulab[jax]', or pip install 'tpulab[torch]').")
        assert missing.fix == "pip install 'tpulab[tensorflow]'"
        with pytest.raises(BackendError, match=re.escape("install one with: pip install 'tpulab[tensorflow]' "
                                                         "(or pip install 'tpulab[jax]', or pip install 'tpulab[torch]')")):
            choose("auto", report)


def test_a_jax_only_machine_needs_no_tensorflow(tmp_path):
    report = detect(tree(tmp_path), {}, {"jax": "0.10.2", "keras": "3.15.1"})
    assert choose("auto", report)[0] == "jax"
    assert not [v for v in diagnose(report) if v.level == "error"]
