"""Keras input pipelines from numpy, for backends without tf.data: no framework of their own.

A model of several inputs or outputs takes a tuple or dict of arrays (one per input, the same
number of rows each): `rows` and `count` read such a structure as they read one array.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Iterator

import keras
import numpy as np

AHEAD = 4  # batches made ahead of the one asked for


class Batches(keras.utils.PyDataset):
    """tf.data's counterpart in numpy: shuffled each pass, batched, the next batches made ahead.

    Infinite when `steps` is None (training: `fit` takes steps_per_epoch batches at a time).
    The look-ahead is a thread of its own that lives across epochs, not Keras's workers: Keras
    stops those at every epoch's end and waits for their queue to stay empty for 0.1 s, time
    that a plain `fit` on arrays does not spend and that would count in the epoch's.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, batch: int, seed: int, shuffle: bool,
                 steps: int | None = None) -> None:
        super().__init__()  # one worker: Keras asks for each batch in turn, with no queue of its own
        self.x, self.y, self.batch, self.seed, self.shuffle, self.steps = x, y, batch, seed, shuffle, steps
        self.per_pass = max(1, count(x) // batch)
        self._orders: dict[int, np.ndarray] = {}
        self._maker = ThreadPoolExecutor(1, thread_name_prefix="tpulab-batches")
        self._ahead: dict[int, Future[tuple[Any, Any]]] = {}

    @property
    def num_batches(self) -> int | None:
        return self.steps

    def _order(self, epoch: int) -> np.ndarray:
        """One permutation per pass over the data, reproducible from the seed (the look-ahead thread shares it)."""
        order = self._orders.get(epoch)
        if order is None:
            n = self.per_pass * self.batch
            order = np.random.default_rng([self.seed, epoch]).permutation(count(self.x))[:n] if self.shuffle \
                else np.arange(n)
            self._orders = {epoch: order}  # one assignment: another thread sees the old dict or the new one
        return order

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        """Batch `index`, made ahead when it was the next one; the next AHEAD (wrapping around a
        finite pass) are then started."""
        made = self._ahead.pop(index, None)
        following = [i % self.steps if self.steps else i for i in range(index + 1, index + 1 + AHEAD)]
        self._ahead = {i: self._ahead.get(i) or self._maker.submit(self.make, i) for i in following}
        return made.result() if made is not None else self.make(index)

    def make(self, index: int) -> tuple[Any, Any]:
        """Batch `index`: its rows of this pass's order, bytes widened."""
        epoch, i = divmod(index, self.per_pass)
        picked = self._order(epoch)[i * self.batch:(i + 1) * self.batch]
        return widen(rows(self.x, picked), np.float32), widen(rows(self.y, picked), np.int32)


def widen(a: Any, dtype: type) -> Any:
    """Bytes are kept compact (images, labels) and widened per batch; other arrays pass as they are."""
    return keras.tree.map_structure(lambda v: v.astype(dtype) if v.dtype == np.uint8 else v, a)


def rows(a: Any, index: Any) -> Any:
    """The rows `index` (an index array or a slice) of an array, or of each array of a structure."""
    return keras.tree.map_structure(lambda v: v[index], a)


def count(a: Any) -> int:
    """How many examples: the rows of the array, or of the first array of a structure."""
    return len(keras.tree.flatten(a)[0])


def validation_batch(n: int, batch: int, shards: int) -> int:
    """The largest batch up to `batch` that splits evenly over the shards and, if one does, divides n.

    Sharded batches must split evenly over the devices; dividing n keeps every example in.
    """
    even = [b for b in range(min(batch, n), 0, -1) if b % shards == 0]
    return next((b for b in even if n % b == 0), even[0] if even else shards)


def random_slices(x: np.ndarray, y: np.ndarray, batch: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The article's generator: a random contiguous slice of `batch` examples as float images, forever."""
    rng = np.random.default_rng(seed)
    while True:
        offset = int(rng.integers(0, len(x) - batch + 1))
        yield x[offset:offset + batch].astype(np.float32), y[offset:offset + batch]
