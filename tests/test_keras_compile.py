"""`--compile` on a Keras model (PyTorch's flag: eager or torch.compile): once per run, and what was asked for is
what runs, on a built-in workload as on a user's own compiled model."""

from __future__ import annotations

import pytest

from tpulab.workloads import registry

from .helpers import ROOT, run_cli


@pytest.mark.parametrize("workload", ["fashion-mnist", "resnet50", "transformer"])
def test_compile_both_on_a_keras_workload_is_one_line_before_any_worker(workload):
    r = run_cli("run", workload, "--backend", "torch", "--compile", "both", "--preset", "smoke", "--no-ui", "--no-save")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == ("tpulab: error: --compile both: a Keras model compiles once per run: run it with "
                                "--compile off, then --compile on, and compare the two (tpulab results compare)")


def test_a_users_file_may_hold_an_nn_module_so_compile_both_waits_for_the_worker():
    from tpulab.workloads.base import Limits

    w = registry()["model"]
    p = w.resolve({"model": "examples/models/torch_mlp.py:build", "backend": "torch", "compile": "both"},
                  Limits({"cpu": 8, "gpu": 0, "tpu": 0}), "smoke")  # resolved whole: no refusal, as a Keras workload's
    assert p["compile"] == "both" and p["backend"] == "torch"


def test_a_users_compiled_keras_model_gets_the_compiled_step_the_run_asked_for(monkeypatch):
    """Their compile chose eager ("auto" is eager on PyTorch): --compile on (or --xla) is what runs, and a run that
    asks for nothing leaves their choice."""
    monkeypatch.chdir(ROOT)
    w = registry()["model"]
    p = w.parse({"model": "examples/models/mlp.py:build"}, "smoke")
    asked, left = w.build_model(p), w.build_model(p)
    asked.jit_compile = left.jit_compile = False  # as their compile(jit_compile=False) would
    w.compile_model(asked, p, True)
    w.compile_model(left, p, False)
    assert asked.jit_compile is True and left.jit_compile is False
