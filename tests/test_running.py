"""A workload's two sides: its declaration (`tpulab.workloads.base.Workload`) and the worker's
(`tpulab.workloads.running`), which every runner starts with; `Workload.begin` delegates to it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from tpulab.workloads import get_workload

from .helpers import ROOT

# Both ways a runner can start, on a plugin's NumPy runtime (Keras on NumPy: no framework to load),
# each followed by the first call, timed through the timer it was given (its time left out).
BEGIN = """
import json, sys
import numpy as np
from fake_numpy_backend import NumpyRuntime
from tpulab.workloads import get_workload
from tpulab.workloads.running import CancelToken, begin

conv = get_workload("conv")
p = conv.parse(json.loads(sys.argv[1]), "smoke")
said = {}
for how, start in (("helper", begin), ("delegate", type(conv).begin)):
    events = []
    _, timer = start(conv, p, events.append, CancelToken(), NumpyRuntime(), "random images",
                     synthetic=True, warmup=2)
    timer.on_predict_batch_begin(0)
    timer.on_predict_batch_end(0, {"outputs": np.zeros(1)})
    said[how] = {"events": [{k: v for k, v in e.to_json().items() if k not in ("t", "seconds")}
                            for e in events],
                 "batch_size": timer.batch_size, "warmup": timer.warmup}
print(json.dumps(said))
"""


@pytest.mark.slow  # Keras, on NumPy
def test_a_runner_starts_the_same_through_the_helper_and_the_workloads_delegate():
    values = {"shards": 2, "batch_size": 8}
    env = {**os.environ, "KERAS_BACKEND": "numpy",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "plugins")])}
    done = subprocess.run([sys.executable, "-c", BEGIN, json.dumps(values)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["delegate"] == said["helper"]
    conv = get_workload("conv")
    p = conv.parse(values, "smoke")
    started, compiled = said["helper"]["events"]
    assert started["event"] == "started" and compiled["event"] == "compiled"
    assert (started["workload"], started["per_replica_batch"], started["steps_total"]) == \
        ("conv", 4, conv.total_steps(p))
    assert started["device"]["kind"] == "cpu" and started["device"]["replicas"] == 2
    assert started["dataset"] == "random images" and started["flops_per_step"] == conv.flops_per_step(p)
    assert started["synthetic"] and compiled["synthetic"]  # every event of a synthetic run says so
    assert (said["helper"]["batch_size"], said["helper"]["warmup"]) == (8, 2)


def test_the_declaration_keeps_no_worker_side_method_but_the_delegate():
    """A method that takes what only a worker has (a sink, a runtime, a placement) is the worker's."""
    tree = ast.parse((ROOT / "tpulab" / "workloads" / "base.py").read_text())
    workload = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Workload")
    worker_side = [f.name for f in workload.body if isinstance(f, ast.FunctionDef)
                   and {"sink", "cancel", "runtime", "placement"} & {a.arg for a in f.args.args}]
    assert worker_side == ["begin"]
    begin = next(f for f in workload.body if isinstance(f, ast.FunctionDef) and f.name == "begin")
    *_, returned = begin.body
    assert len(begin.body) == 2 and isinstance(returned, ast.Return)  # a docstring and the call
    assert ast.unparse(returned.value).startswith("running.begin(self, ")
