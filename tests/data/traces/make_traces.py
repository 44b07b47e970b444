"""Writes the tiny traces tests/test_profile_read.py parses on every machine: one by JAX, one by TensorFlow.

Each traces three steps of the same small program (a 64x32 by 32x48 matmul, the exp of it summed over its
rows, and a 48x64 input transposed) through tpulab's own profilers, each step in its annotation with a
5 ms host sleep inside it (the host gap), and keeps only the XSpace (`<framework>/host.xplane.pb`); for
JAX also the optimized HLO of the step (`jax/step.hlo.txt`), which gives its ops' FLOPs and bytes.

    .venv/bin/python tests/data/traces/make_traces.py          # both, each framework in its own process
    .venv/bin/python tests/data/traces/make_traces.py jax      # one

Each framework runs alone on the CPU, as in a worker. The files are a few KB; a new one changes the
exact tables the tests expect (times differ on every run; names, categories and calls do not).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from tpulab.backends import Profiler

HERE = Path(__file__).resolve().parent
SLEEP_S = 0.005  # the host's own time inside each step
STEPS = 3


def trace_jax(out: Path) -> None:
    import jax
    import jax.numpy as jnp

    from tpulab.backends.jax import JaxProfiler

    def step(a: jax.Array, b: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.exp(a @ b).sum(axis=0), c.T

    args = (jnp.ones((64, 32)), jnp.ones((32, 48)), jnp.ones((48, 64)))
    jitted = jax.jit(step)
    jax.block_until_ready(jitted(*args))
    (out / "step.hlo.txt").write_text(str(jitted.lower(*args).compile().as_text()))
    traced(JaxProfiler(), lambda: jax.block_until_ready(jitted(*args)), out)


def trace_tf(out: Path) -> None:
    import tensorflow as tf

    from tpulab.backends.tensorflow import TensorFlowProfiler

    @tf.function
    def step(a: tf.Tensor, b: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.reduce_sum(tf.exp(tf.matmul(a, b)), axis=0), tf.transpose(c)

    args = (tf.ones((64, 32)), tf.ones((32, 48)), tf.ones((48, 64)))
    step(*args)
    traced(TensorFlowProfiler(), lambda: [t.numpy() for t in step(*args)], out)


def traced(profiler: Profiler, call: Callable[[], object], out: Path) -> None:
    """Trace STEPS annotated calls into a scratch folder; keep its XSpace as out/host.xplane.pb."""
    with tempfile.TemporaryDirectory() as scratch:
        with profiler.trace(Path(scratch)):
            for n in range(STEPS):
                with profiler.step(n):
                    call()
                    time.sleep(SLEEP_S)
        found = next(Path(scratch).glob("**/*.xplane.pb"))
        shutil.copyfile(found, out / "host.xplane.pb")


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["jax", "tf"]
    if len(chosen) > 1:
        for name in chosen:
            subprocess.run([sys.executable, __file__, name], check=True)
    else:
        name = chosen[0]
        out = HERE / name
        out.mkdir(exist_ok=True)
        if name == "jax":
            os.environ["JAX_PLATFORMS"] = "cpu"
            sys.modules["tensorflow"] = None  # type: ignore[assignment]  # as a JAX worker: never TensorFlow
            trace_jax(out)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
            trace_tf(out)
        print(f"{name}: {', '.join(f'{p.name} {p.stat().st_size} B' for p in sorted(out.iterdir()))}")
