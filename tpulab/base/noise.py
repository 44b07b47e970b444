"""Noise is not a finding: a median with its confidence interval, and a comparison that says whether a
difference is real.

Step times are autocorrelated and drift (a neighbour's burst slows several steps in a row; on a shared
VM the level itself moves by several percent over seconds), so the median's interval comes from a
two-level bootstrap: the run's repeats are drawn with replacement, then each drawn repeat's steps in
blocks of about n^(1/3) consecutive steps, which keeps a burst together. The blocks are circular (Politis
& Romano): one starts anywhere in its repeat and wraps past its end onto its start, so every step is drawn
as often as any other; moving blocks, which must end inside the repeat, under-sample its first and last
steps, and the `arch` package's docs advise against them for that. A run timed once is cut
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

import math
from dataclasses import dataclass
from statistics import NormalDist
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
FIXED = "fixed"  # where a verdict's threshold is NOISE, not a machine's floor (cards, sweeps)
Z95 = NormalDist().inv_cdf(0.975)  # a 95% interval's half-width in standard deviations (1.96)
MIN_FLOOR = 0.01  # Criterion.rs's noise threshold: no floor is taken below it, however quiet the machine
# A machine never calibrated: alike single runs on a shared 2-core VM differed up to 1.36x process to process (conv,
# idle, fresh processes); a threshold under that spread calls noise a finding.
DEFAULT_FLOOR = 0.40
CALIBRATE = "`tpulab calibrate` measures this machine's"


@dataclass(frozen=True)
class Floor:
    """How far alike runs differ on a machine from one fresh process to the next: what no run's own steps show (the
    machine's level over the seconds each ran, its placement of threads and memory), so a comparison of single runs
    takes it as its noise threshold, and one of runs of several processes each (`--repeat`) as the least spread of
    their processes' levels (`over_processes`).

    `spread`: two alike single runs' ratio stays within 1 + spread in 95% of pairs."""

    spread: float
    source: str  # where it came from: 'calibrated here on 2026-12-07: 10 processes, ...', or the default's words
    calibrated: bool = True
    span_s: float | None = None  # how long each calibrating process's timed steps lasted: a run timed for much less
    # moves more with the machine than the floor says (alike conv runs here: 1.47-1.92x apart at 0.1 s, 1.15-1.35x at 1 s)

    def threshold(self, processes_a: int = 1, processes_b: int = 1) -> float:
        """The threshold for a comparison of the medians of `processes_a` runs against `processes_b` (where both
        repeated, `over_processes` draws the spread into the interval instead, beyond `MIN_FLOOR`)."""
        return max(MIN_FLOOR, self.spread * math.sqrt((1 / processes_a + 1 / processes_b) / 2))

    @property
    def sigma(self) -> float:
        """One process's level about its configuration's, as a standard deviation of its log (the spread is the
        95% of a pair's ratio: 1.96 x sqrt(2) of it)."""
        return math.log1p(self.spread) / (Z95 * math.sqrt(2))

    def resolves(self, processes: int) -> float:
        """The least change runs of `processes` fresh processes a side can tell here: the half-width of their
        interval (`over_processes`), as a ratio less 1."""
        return math.expm1(Z95 * self.sigma * math.sqrt(2 / processes)) + MIN_FLOOR


UNCALIBRATED = Floor(DEFAULT_FLOOR, f"not calibrated: {CALIBRATE}", calibrated=False)


def floor_of(process_medians: Sequence[float], level: float = LEVEL) -> float:
    """The spread between alike single runs: the `level` quantile of how far two of them differ, over every pair of
    the process medians given (as a ratio less 1: 0.05 is 1.05x either way)."""
    import numpy as np

    logs = np.log(np.asarray([m for m in process_medians if m and m > 0], dtype=float))
    if len(logs) < 2:
        raise ValueError("a noise floor needs two processes' medians or more")
    i, j = np.triu_indices(len(logs), 1)
    return float(np.expm1(np.quantile(np.abs(logs[i] - logs[j]), level)))


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
    source: str = FIXED  # where the threshold came from (a machine's calibrated floor, or the default)

    def interval(self) -> str:
        """'[1.17x, 1.23x]', or '' without one."""
        return f"[{self.low:.2f}x, {self.high:.2f}x]" if self.low is not None and self.high is not None else ""

    def cell(self) -> str:
        """'1.20x [1.17x, 1.23x] faster': the speedup, its interval and the word, for a table's cell."""
        return " ".join(p for p in (f"{self.speedup:.2f}x", self.interval(), self.word) if p)

    def words(self) -> str:
        """The cell with its threshold and basis: what a line of prose says."""
        basis = f"; {self.why}" if self.why else ""
        return f"{self.cell()} (noise threshold ±{self.threshold:.0%}, {self.source}{basis})"


def _array(samples: Sequence[float]) -> np.ndarray:
    import numpy as np

    xs = np.asarray([x for x in samples if x is not None and x == x], dtype=float)
    if len(xs) > MAX_SAMPLES:
        xs = xs[np.linspace(0, len(xs) - 1, MAX_SAMPLES).round().astype(int)]
    return xs


def medians(repeats: Sequence[Sequence[float]], resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray | None:
    """The bootstrap's medians: the repeats drawn with replacement (one run's `SEGMENTS` stretches where it was timed
    once), each drawn repeat's steps in circular blocks of about n^(1/3) steps (n: the shortest repeat's). None where
    fewer than `MIN_SAMPLES` steps were timed in all."""
    import numpy as np

    groups = [g for g in (_array(r) for r in repeats) if len(g)]
    if sum(len(g) for g in groups) < MIN_SAMPLES:
        return None
    if len(groups) == 1 and len(groups[0]) >= SEGMENTS * MIN_SAMPLES:
        groups = np.array_split(groups[0], SEGMENTS)
    return _draw(groups, max(1, round(min(len(g) for g in groups) ** (1 / 3))), resamples, seed)


def block_medians(xs: np.ndarray, block: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """One series' circular-block bootstrap medians: `medians`' draw within one repeat, the single level that
    `arch.bootstrap.CircularBlockBootstrap` draws too (tests/test_noise_blocks.py checks the one against the other)."""
    return _draw([xs], block, resamples, seed)


def _draw(groups: Sequence[np.ndarray], block: int, resamples: int, seed: int) -> np.ndarray:
    """Each resample: as many repeats as there are, drawn with replacement, each giving as many steps as a repeat of
    the mean size in blocks of `block` steps that start anywhere in their repeat and wrap past its end onto its start
    (Politis & Romano's circular blocks: every step is drawn as often as any other, the first and last ones too).
    One array operation for all resamples: 1,000 steps cost ~10 ms here."""
    import numpy as np

    sizes = np.array([len(g) for g in groups])
    flat = np.concatenate([np.resize(g, len(g) + block - 1) for g in groups])  # each repeat then its start again: the wrap
    offsets = np.cumsum(sizes + block - 1) - (sizes + block - 1)
    size = round(float(sizes.mean()))  # steps a drawn repeat gives
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(groups), size=(resamples, len(groups), 1))
    starts = offsets[picks] + (rng.random((resamples, len(groups), -(-size // block))) * sizes[picks]).astype(int)
    steps = (starts[..., None] + np.arange(block)).reshape(resamples, len(groups), -1)[..., :size]
    return np.median(flat[steps.reshape(resamples, -1)], axis=1)


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


def over_processes(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], scale: float, floor: Floor,
                   level: float = LEVEL) -> Change | None:
    """Runs of several fresh processes a side (`--repeat`): each process's median is one draw of the machine's level,
    so the speedup is the ratio of their geometric means and its interval a normal one on their logs, with a spread
    per process of at least the floor's (measured over many processes, where a handful cannot say it; the floor's
    95% of single pairs is 1.96 x sqrt(2) of it). Faster or slower beyond `MIN_FLOOR`: the interval holds the
    spread between processes itself. (A bootstrap over three to five processes called alike runs different in 7-15%
    of simulated pairs; this, about 5%.)"""
    import numpy as np

    la = np.log([m for m in (np.median(r) for r in a if len(r)) if m > 0])
    lb = np.log([m for m in (np.median(r) for r in b if len(r)) if m > 0])
    if len(la) < 2 or len(lb) < 2:
        return None
    z = NormalDist().inv_cdf((1 + level) / 2)
    machine = floor.sigma
    spread = max(machine, float(np.std(np.concatenate([la - la.mean(), lb - lb.mean()]), ddof=2)))
    half = z * spread * math.sqrt(1 / len(la) + 1 / len(lb))
    mid = math.log(scale) + float(la.mean() - lb.mean())
    low, high = math.exp(mid - half), math.exp(mid + half)
    word = FASTER if low > 1 + MIN_FLOOR else SLOWER if high < 1 / (1 + MIN_FLOOR) else SAME
    return Change(math.exp(mid), low, high, word, MIN_FLOOR,
                  f"{level:.0%} interval over {len(la)} and {len(lb)} processes' medians, their levels "
                  f"±{math.expm1(spread):.1%} apart (one standard deviation; the floor's ±{math.expm1(machine):.1%} "
                  "at least)",
                  floor.source)


def change(base: Sequence[float], other: Sequence[float], scale: float = 1.0, threshold: float = NOISE,
           level: float = LEVEL, base_repeats: Sequence[Sequence[float]] | None = None,
           other_repeats: Sequence[Sequence[float]] | None = None, floor: Floor | None = None) -> Change | None:
    """`other` against `base` from their step times: the speedup base median / other median, times `scale` (the
    other's work per step over the base's, where the two did different work). Repeats, where given, stand for the
    flat lists: each a fresh process's steps. `floor`: the machine's spread between processes, whose threshold for
    these sides' processes replaces `threshold`. None where either side has no samples at all."""
    import numpy as np

    a, b = base_repeats or [base], other_repeats or [other]
    source = FIXED
    if floor is not None and len(a) > 1 and len(b) > 1:
        return over_processes(a, b, scale, floor, level)
    if floor is not None:
        threshold, source = floor.threshold(len(a), len(b)), floor.source
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
                      f"too few steps for an interval ({len(flat_a)} and {len(flat_b)}; {MIN_SAMPLES} a side at least)",
                      source)
    low, high = (float(q) for q in np.quantile(scale * meds_a / meds_b, [(1 - level) / 2, (1 + level) / 2]))
    word = FASTER if low > 1 + threshold else SLOWER if high < 1 / (1 + threshold) else SAME
    thinned = f", each side thinned evenly to {MAX_SAMPLES}" if max(len(flat_a), len(flat_b)) > MAX_SAMPLES else ""
    over = f"{len(a)} and {len(b)} processes' {len(flat_a)} and {len(flat_b)} steps" if len(a) > 1 or len(b) > 1 \
        else f"{len(flat_a)} and {len(flat_b)} steps"
    return Change(speedup, low, high, word, threshold, f"{level:.0%} interval from {over}{thinned}", source)
