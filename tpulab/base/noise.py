"""Noise is not a finding: a median with its confidence interval, and a comparison that says whether a
difference is real.

Step times are autocorrelated and drift (a neighbour's burst slows several steps in a row; on a shared
VM the level itself moves by several percent over seconds), so the median's interval comes from a
two-level bootstrap: the run's repeats are drawn with replacement, then each drawn repeat's steps in
moving blocks of about n^(1/3) consecutive steps, which keeps a burst together. A run timed once is cut
into `SEGMENTS` stretches in order, its repeats: a run whose level moved while it ran gets an interval
that holds the move. (Blocks alone held it only in part: ten stretches of one real conv run, 2-core VM,
differed by up to 15% with each stretch's block interval at ±3%.) `scipy.stats.bootstrap` draws single
samples only (no blocks, no levels), hence these few lines. The draws are seeded: the same samples give
the same interval and verdict every time.

A comparison draws both sides' medians independently and takes their ratio: its interval comes from
both sides' samples, not from two medians. It ends in one word: faster, slower, or no difference
detected. A ratio within the noise threshold (`NOISE`) is no difference, however narrow its interval: two
runs of one configuration differ between processes in a way no run's own steps show (on a fresh clone here, two
conv runs back to back, each steady: 1.07x [1.05x, 1.09x]; quiet cards' entries up to 1.16x), and that is not a
finding. Repeats (a card's entries) put that spread in the interval itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import numpy as np

LEVEL = 0.95
NOISE = 0.10  # a speedup within 1/1.1..1.1 is "no difference detected": see the module's docstring
MIN_SAMPLES = 5  # fewer samples (a side) give no interval
RESAMPLES = 500  # enough for a 95% interval's tails (12 draws beyond each end)
SEGMENTS = 8  # a run timed once: its steps as this many stretches (repeats), where each has MIN_SAMPLES or more
MAX_SAMPLES = 1000  # more steps are thinned evenly to this many: a wider interval, never a narrower one
SEED = 20181011  # the article's date: any fixed seed makes the verdicts repeatable

FASTER, SLOWER, SAME = "faster", "slower", "no difference detected"


@dataclass(frozen=True)
class Change:
    """One side against a base: its speedup (the base's time over its own, or its rate over the base's), the
    speedup's interval where both sides had samples enough, and the verdict."""

    speedup: float
    low: float | None
    high: float | None
    word: str  # FASTER, SLOWER or SAME
    threshold: float = NOISE
    why: str = ""  # what the interval came from, or why there is none

    def interval(self) -> str:
        """'[1.17x, 1.23x]', or '' without one."""
        return f"[{self.low:.2f}x, {self.high:.2f}x]" if self.low is not None and self.high is not None else ""

    def cell(self) -> str:
        """'1.20x [1.17x, 1.23x] faster': the speedup, its interval and the word, for a table's cell."""
        return " ".join(p for p in (f"{self.speedup:.2f}x", self.interval(), self.word) if p)

    def words(self) -> str:
        """The cell with its threshold and basis: what a line of prose says."""
        basis = f"; {self.why}" if self.why else ""
        return f"{self.cell()} (noise threshold ±{self.threshold:.0%}{basis})"


def _array(samples: Sequence[float]) -> np.ndarray:
    import numpy as np

    xs = np.asarray([x for x in samples if x is not None and x == x], dtype=float)
    if len(xs) > MAX_SAMPLES:
        xs = xs[np.linspace(0, len(xs) - 1, MAX_SAMPLES).round().astype(int)]
    return xs


def medians(repeats: Sequence[Sequence[float]], resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray | None:
    """The bootstrap's medians: the repeats drawn with replacement (one run's `SEGMENTS` stretches where it was timed
    once), each drawn repeat's steps in moving blocks, as many as a repeat of the mean size holds. None where fewer
    than `MIN_SAMPLES` steps were timed in all. One array operation for all draws: 1,000 steps cost ~10 ms here."""
    import numpy as np

    groups = [g for g in (_array(r) for r in repeats) if len(g)]
    if sum(len(g) for g in groups) < MIN_SAMPLES:
        return None
    if len(groups) == 1 and len(groups[0]) >= SEGMENTS * MIN_SAMPLES:
        groups = np.array_split(groups[0], SEGMENTS)
    sizes = np.array([len(g) for g in groups])
    flat, offsets = np.concatenate(groups), np.cumsum(sizes) - sizes
    block = max(1, round(int(sizes.min()) ** (1 / 3)))  # a block fits in every repeat
    per = -(-round(float(sizes.mean())) // block)  # blocks a drawn repeat gives
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(groups), size=(resamples, len(groups), 1))
    starts = offsets[picks] + (rng.random((resamples, len(groups), per)) * (sizes[picks] - block + 1)).astype(int)
    return np.median(flat[(starts[..., None] + np.arange(block)).reshape(resamples, -1)], axis=1)


def interval(samples: Sequence[float] | Sequence[Sequence[float]], level: float = LEVEL) -> tuple[float, float] | None:
    """The median's `level` confidence interval from step times (a flat list) or repeats (a list of lists); None
    with fewer than `MIN_SAMPLES` steps."""
    import numpy as np

    repeats = samples if samples and isinstance(samples[0], (list, tuple)) else [samples]
    meds = medians(repeats)  # type: ignore[arg-type]
    if meds is None:
        return None
    low, high = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def change(base: Sequence[float], other: Sequence[float], scale: float = 1.0, threshold: float = NOISE,
           level: float = LEVEL, base_repeats: Sequence[Sequence[float]] | None = None,
           other_repeats: Sequence[Sequence[float]] | None = None) -> Change | None:
    """`other` against `base` from their step times: the speedup base median / other median, times `scale` (the
    other's work per step over the base's, where the two did different work). Repeats, where given, stand for the
    flat lists. None where either side has no samples at all."""
    import numpy as np

    a, b = base_repeats or [base], other_repeats or [other]
    flat_a, flat_b = [x for r in a for x in r], [x for r in b for x in r]
    if not flat_a or not flat_b:
        return None
    mid_a, mid_b = float(np.median(flat_a)), float(np.median(flat_b))
    if mid_a <= 0 or mid_b <= 0:
        return None
    speedup = scale * mid_a / mid_b
    meds_a, meds_b = medians(a), medians(b, seed=SEED + 1)
    if meds_a is None or meds_b is None:
        return Change(speedup, None, None, SAME, threshold,
                      f"too few steps for an interval ({len(flat_a)} and {len(flat_b)}; {MIN_SAMPLES} a side at least)")
    low, high = (float(q) for q in np.quantile(scale * meds_a / meds_b, [(1 - level) / 2, (1 + level) / 2]))
    word = FASTER if low > 1 + threshold else SLOWER if high < 1 / (1 + threshold) else SAME
    thinned = f", each side thinned evenly to {MAX_SAMPLES}" if max(len(flat_a), len(flat_b)) > MAX_SAMPLES else ""
    return Change(speedup, low, high, word, threshold,
                  f"{level:.0%} interval from {len(flat_a)} and {len(flat_b)} steps{thinned}")
