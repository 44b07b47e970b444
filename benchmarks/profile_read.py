"""How long reading a trace takes: ResNet-50's smoke step, traced and read by each backend's profiler.

For each framework, in its own process (as a worker): build the resnet50 workload's model at its smoke
preset, compile its step with one `train_on_batch`, trace 3 more (each in the profiler's step annotation),
then time `Profiler.read` of the trace (the median of 3 reads; JAX with the step's optimized HLO, which
`keras_programs` compiles once, timed apart: from JAX's compilation cache, as in a worker, once a run
compiled the step). The goal (issue 24): reading under 2 s.

    python benchmarks/profile_read.py [jax tensorflow]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STEPS, READS = 3, 3


def measure(backend: str) -> None:
    import numpy as np

    from tpulab.backends import get
    from tpulab.workloads import registry

    runtime = get(backend).load()
    workload = registry()["resnet50"]
    p = {**workload.defaults(), **workload.preset("smoke")}
    model = workload.build_model(p)
    workload.compile_model(model, p, runtime.keras_jit(False))
    rng = np.random.default_rng(0)
    x = rng.random((p["batch_size"], p["image_size"], p["image_size"], 3), dtype=np.float32)
    y = rng.integers(0, p["classes"], size=(p["batch_size"],), dtype=np.int32)
    model.train_on_batch(x, y)
    profiler = runtime.profiler()
    assert profiler is not None
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        with profiler.trace(folder):
            for n in range(STEPS):
                with profiler.step(n):
                    model.train_on_batch(x, y)
        start = time.perf_counter()
        programs = profiler.keras_programs(model, x, y)
        compiled = time.perf_counter() - start
        reads = []
        for _ in range(READS):
            start = time.perf_counter()
            profile = profiler.read(folder, programs)
            reads.append(time.perf_counter() - start)
        size = sum(f.stat().st_size for f in folder.glob("**/*.xplane.pb"))
    flops = sum(1 for op in profile.ops if op.flops is not None)
    print(f"{backend}: read {statistics.median(reads):.3f} s (reads {', '.join(f'{r:.3f}' for r in reads)}); "
          f"xplane.pb {size / 1e6:.2f} MB; step {profile.step_seconds * 1e3:.1f} ms, host gap "
          f"{profile.host_gap_share:.0%}; {len(profile.ops)} rows, {flops} with FLOPs; "
          f"keras_programs {compiled:.2f} s")
    for op in profile.ops[:5]:
        print(f"  {op.name[:40]:40} {op.category:14} {op.calls:4.0f} {op.share:6.1%}")


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["jax", "tensorflow"]
    if len(chosen) > 1:
        for name in chosen:
            subprocess.run([sys.executable, __file__, name], check=True)
    else:
        from tpulab.backends import get

        os.environ.update(get(chosen[0]).worker_env("cpu", 1, os.environ))  # as its worker: JAX's cache on
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        measure(chosen[0])
