"""What the live StepTimer costs in `fit`, and what the article's Python generator costs against tf.data.

One process, one compiled model; fits alternate so both sides see the same machine state.
Prints ratios of median wall time per fit (each fit runs the same number of steps):
  StepTimer streaming JSON lines / plain fit(verbose=0): goal <= 1.03x
  generator pipeline / tf.data pipeline

    python benchmarks/callback_overhead.py [--rounds 5] [--steps 20] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args()

    from tpulab.backends import get
    from tpulab.callbacks import StepTimer
    from tpulab.workloads.fashion_mnist import FASHION_MNIST as W

    params = {**W.defaults(), "batch_size": args.batch_size,
              "dataset": "fashion-mnist" if _has_real_data() else "synthetic"}
    runtime = get("tensorflow").load()  # TensorFlow and Keras on it, as a worker has them
    data = W.data(params)
    model = W.build_model(params)
    W.compile_model(model, params, jit_compile=False)
    tf_data = runtime.keras_inputs(data.x_train, data.y_train, args.batch_size, 0, True, "tf.data", 1)
    generator = runtime.keras_inputs(data.x_train, data.y_train, args.batch_size, 0, True, "generator", 1)
    sink_file = open(os.devnull, "w")

    def sink(event: dict) -> None:  # what the worker does with each event
        sink_file.write(json.dumps(event) + "\n")
        sink_file.flush()

    def timed_fit(inputs, callbacks) -> float:
        t0 = time.perf_counter()
        model.fit(inputs, epochs=1, steps_per_epoch=args.steps, callbacks=callbacks, verbose=0, shuffle=False)
        return time.perf_counter() - t0

    timed_fit(tf_data, [])  # compile
    timed_fit(generator, [])  # and the generator's input signature
    plain, timed, gen, tfd = [], [], [], []
    for r in range(args.rounds):
        plain.append(timed_fit(tf_data, []))
        timed.append(timed_fit(tf_data, [StepTimer(sink, batch_size=args.batch_size)]))
        gen.append(timed_fit(generator, []))
        tfd.append(timed_fit(tf_data, []))
        print(f"round {r + 1}: StepTimer/plain {timed[-1] / plain[-1]:.3f}x  generator/tf.data {gen[-1] / tfd[-1]:.3f}x",
              flush=True)
    print(f"{data.source}, batch {args.batch_size}, {args.steps} steps per fit, {args.rounds} rounds")
    print(f"StepTimer streaming / plain fit(verbose=0): {statistics.median(timed) / statistics.median(plain):.3f}x "
          "(goal <= 1.03x)")
    print(f"generator / tf.data: {statistics.median(gen) / statistics.median(tfd):.3f}x")


def _has_real_data() -> bool:
    from tpulab.workloads.data import DataError, find
    try:
        find()
        return True
    except DataError:
        return False


if __name__ == "__main__":
    main()
