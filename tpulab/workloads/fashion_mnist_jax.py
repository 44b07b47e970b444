"""The article's CNN on Keras 3 over JAX: data parallel with `keras.distribution`, inputs without TensorFlow.

`keras.distribution.DataParallel` over the placement's devices, set before the model is built,
is JAX's successor of the article's `keras_to_tpu_model`: the weights are replicated, each
batch is split over the devices. XLA always compiles the step, so `--xla` has no meaning here.
"""

from __future__ import annotations

from typing import Any

import jax
import keras
import numpy as np

from tpulab.backends.jax import place, versions
from tpulab.workloads.data import Dataset, random_slices
from tpulab.workloads.base import CancelToken, Params, Sink
from tpulab.workloads.fashion_mnist import train


class Batches(keras.utils.PyDataset):
    """tf.data's counterpart in numpy: shuffled each epoch, batched, prefetched by background threads.

    Infinite when `steps` is None (training: `fit` takes steps_per_epoch batches at a time).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, batch: int, seed: int, shuffle: bool,
                 steps: int | None = None) -> None:
        super().__init__(workers=2, use_multiprocessing=False, max_queue_size=4)
        self.x, self.y, self.batch, self.seed, self.shuffle, self.steps = x, y, batch, seed, shuffle, steps
        self.per_pass = max(1, len(x) // batch)
        self._orders: dict[int, np.ndarray] = {}

    @property
    def num_batches(self) -> int | None:
        return self.steps

    def _order(self, epoch: int) -> np.ndarray:
        """One permutation per pass over the data, reproducible from the seed (worker threads share it)."""
        order = self._orders.get(epoch)
        if order is None:
            n = self.per_pass * self.batch
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.x))[:n] if self.shuffle \
                else np.arange(n)
            self._orders = {epoch: order}  # one assignment: another thread sees the old dict or the new one
        return order

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        epoch, i = divmod(index, self.per_pass)
        rows = self._order(epoch)[i * self.batch:(i + 1) * self.batch]
        return np.expand_dims(self.x[rows], -1).astype(np.float32), self.y[rows].astype(np.int32)


def local(data: Dataset, p: Params) -> tuple[Dataset, int]:
    """This process's shard of the data and its share of each global batch (all of both on one process)."""
    n, i = jax.process_count(), jax.process_index()
    if n == 1:
        return data, p["batch_size"]
    return (Dataset(data.x_train[i::n], data.y_train[i::n], data.x_test[i::n], data.y_test[i::n], data.source),
            p["batch_size"] // n)


def training_input(data: Dataset, p: Params) -> Any:
    mine, batch = local(data, p)
    if p["pipeline"] == "generator":
        return random_slices(mine.x_train, mine.y_train, batch, p["seed"] + jax.process_index())
    return Batches(mine.x_train, mine.y_train, batch, p["seed"], shuffle=True)


def validation_batch(n: int, batch: int, shards: int) -> int:
    """The largest batch up to `batch` that splits evenly over the shards and, if one does, divides n.

    Sharded batches must split evenly over the devices; dividing n keeps every example in.
    """
    even = [b for b in range(min(batch, n), 0, -1) if b % shards == 0]
    return next((b for b in even if n % b == 0), even[0] if even else shards)


def validation_input(data: Dataset, p: Params) -> Any:
    mine, _ = local(data, p)
    processes = jax.process_count()
    n = min(p["validation_examples"] // processes, len(mine.x_test))
    batch = validation_batch(n, p["batch_size"] // processes, p["shards"] // processes)
    return Batches(mine.x_test[:n], mine.y_test[:n], batch, p["seed"], shuffle=False, steps=max(1, n // batch))


def run(p: Params, sink: Sink, cancel: CancelToken) -> None:
    placement = place(p["device"], p["shards"])
    if placement.replicas > 1:
        # Across processes each feeds its own shard of every global batch (Keras must not split it again).
        keras.distribution.set_distribution(keras.distribution.DataParallel(
            devices=[f"{d.platform}:{d.id}" for d in placement.devices],
            auto_shard_dataset=placement.hosts == 1))
    train(p, sink, cancel, placement, versions(), "jax", training_input, validation_input, jit_compile=True)
