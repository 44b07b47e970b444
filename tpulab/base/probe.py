"""The control probe: the machine itself, timed beside a run without any framework.

A run's steps say how fast the run was; they cannot say whether the machine changed under it (its clock, a
neighbour on its core or its memory bus). A fixed numpy sort, timed just before the run's first process and just
after its last, can: its median call moved by more than `MOVED` is a machine that changed, and the run says so
with the figure. A sort runs on one thread: a BLAS product on every core waits out whole scheduler ticks behind
any neighbour (0.2 ms became 16 ms here beside two busy processes), which is a figure of the load, not of the
machine. It costs `CALLS` sorts of `SIZE` numbers (about 0.02 s here), in the parent process.
"""

from __future__ import annotations

import time

SIZE = 1 << 18  # float32 numbers a sort orders: 1 MiB, a millisecond or two
CALLS = 9  # timed calls after one untimed; their median is the probe's figure
MOVED = 0.5  # after over before beyond 1.5x either way: the machine changed while the run went


def probe(size: int = SIZE, calls: int = CALLS) -> float:
    """The median seconds of one sort of `size` random float32 numbers, over `calls` calls."""
    import numpy as np

    a = np.random.default_rng(0).random(size, dtype=np.float32)
    np.sort(a)  # the first call pays for the pages' first touch
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        np.sort(a)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
