"""The numpy input pipeline (`Batches`): the batches it gives, made ahead, and an epoch's end
that costs nothing more than a plain `fit` on arrays."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest


@pytest.fixture(scope="module")
def inputs(keras):
    """tpulab.backends.keras_inputs (it imports Keras), and `Where`: its batches, noting which thread made each."""
    from tpulab.backends import keras_inputs

    class Where(keras_inputs.Batches):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.makers: dict[int, str] = {}

        def make(self, index: int):
            self.makers[index] = threading.current_thread().name
            return super().make(index)

    return SimpleNamespace(Batches=keras_inputs.Batches, AHEAD=keras_inputs.AHEAD, Where=Where)


def examples(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n * 4, dtype=np.uint8).reshape(n, 4)
    return x, np.arange(n, dtype=np.int32) % 3


def test_each_pass_is_a_permutation_and_made_ahead_batches_are_the_same(inputs):
    x, y = examples()
    ahead, asked = inputs.Where(x, y, 8, seed=3, shuffle=True), inputs.Batches(x, y, 8, seed=3, shuffle=True)
    in_order = [ahead[i] for i in range(16)]  # two passes of 8 batches
    backwards = [asked[i] for i in reversed(range(16))][::-1]  # never the next one: each made when asked
    for (xa, ya), (xb, yb) in zip(in_order, backwards):
        assert xa.dtype == np.float32 and np.array_equal(xa, xb) and np.array_equal(ya, yb)
    for first in (0, 8):
        rows = np.concatenate([b[0] for b in in_order[first:first + 8]])[:, 0] / 4
        assert sorted(rows) == list(range(64))
    assert not np.array_equal(in_order[0][0], in_order[8][0])  # each pass shuffled again
    assert ahead.makers[0] == threading.current_thread().name  # nothing was ahead of the first
    for made in ahead._ahead.values():  # the batches after the last one asked for: wait until they are made
        made.result()
    assert {ahead.makers[i] for i in range(1, 16 + inputs.AHEAD)} == {"tpulab-batches_0"}


def test_a_finite_pass_starts_the_next_one_ahead(inputs):
    x, y = examples(24)
    b = inputs.Where(x, y, 8, seed=0, shuffle=False, steps=3)
    first = [b[i] for i in range(3)]
    again = [b[i] for i in range(3)]
    assert all(np.array_equal(p[0], q[0]) for p, q in zip(first, again))
    assert b.makers[0] == "tpulab-batches_0"  # the second pass's first batch came ahead
    assert np.array_equal(first[1][0][:, 0], np.arange(8, 16) * 4)


def test_an_epoch_ends_with_its_last_step(keras, inputs):
    """Keras's own workers are stopped at each epoch's end, waiting 0.1 s on an empty queue; a
    plain `fit` on arrays goes straight to the next epoch, and so must these batches."""
    ends: list[tuple[float, float]] = []

    class Ends(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.last = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            ends.append((self.last, time.perf_counter()))

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = examples()
    model.fit(inputs.Batches(x, y, 8, seed=0, shuffle=True), epochs=3, steps_per_epoch=3, callbacks=[Ends()], verbose=0,
              shuffle=False)
    assert len(ends) == 3
    assert max(end - last for last, end in ends) < 0.05
