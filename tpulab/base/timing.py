"""Statistics, FLOP formulas and the sanity flags that keep a reported figure honest."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence


@dataclass(frozen=True)
class Stats:
    count: int
    median: float
    p10: float
    p90: float
    min: float
    max: float
    mean: float
    low: float | None = None  # the median's 95% confidence interval (`tpulab.base.noise`); None: too few samples
    high: float | None = None

    def half_width(self) -> float | None:
        """The interval's larger half, as a fraction of the median: the '±4%' beside a figure."""
        if self.low is None or self.high is None or self.median <= 0:
            return None
        return max(self.median - self.low, self.high - self.median) / self.median

    def to_dict(self) -> dict:
        return asdict(self)


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_xs:
        raise ValueError("no samples")
    pos = (len(sorted_xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def median(samples: Sequence[float]) -> float | None:
    """The middle value (the mean of the two middle ones for an even count), or None for no samples."""
    return percentile(sorted(samples), 0.5) if samples else None


def summarize(samples: Sequence[float], repeats: Sequence[Sequence[float]] | None = None) -> Stats | None:
    """The samples' spread and the median's confidence interval, over `repeats` where the samples came in several
    (each a list of the samples' own steps, in order: the interval's blocks keep their order)."""
    if not samples:
        return None
    from tpulab.base.noise import interval

    xs = sorted(samples)
    ci = interval(repeats if repeats and len(repeats) > 1 else list(samples))
    return Stats(len(xs), percentile(xs, 0.5), percentile(xs, 0.1), percentile(xs, 0.9),
                 xs[0], xs[-1], sum(xs) / len(xs), *(ci or (None, None)))


def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """TensorFlow's rule: SAME keeps ceil(size/stride), VALID drops the border."""
    if padding == "SAME":
        return -(-size // stride)
    return (size - kernel) // stride + 1


def conv_flops(batch: int, height: int, width: int, channels: int, filters: int,
               kernel: int, stride: int, padding: str) -> int:
    """2 x N x Hout x Wout x Cout x Kh x Kw x Cin: one multiply and one add per weight per output."""
    h = conv_output_size(height, kernel, stride, padding)
    w = conv_output_size(width, kernel, stride, padding)
    return 2 * batch * h * w * filters * kernel * kernel * channels


@dataclass(frozen=True)
class Flag:
    code: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def sanity_flags(peak_fraction: float | None, stats: Stats | None) -> list[Flag]:
    flags = []
    if peak_fraction is not None and peak_fraction > 1.0:
        flags.append(Flag("beats-peak", f"achieved {peak_fraction:.0%} of the device's peak, which hardware cannot do: "
                          "work was likely elided (is the output consumed?) or the FLOP count or peak is wrong; "
                          "do not trust this figure"))
    if stats is None:
        flags.append(Flag("no-samples", "no steady-state step completed: nothing to report but the first call"))
    elif stats.count < 3:
        flags.append(Flag("few-samples", f"only {stats.count} steady-state sample(s): spread is not meaningful"))
    elif stats.p10 > 0 and stats.p90 / stats.p10 > 1.5:
        flags.append(Flag("noisy", f"p90 is {stats.p90 / stats.p10:.1f}x p10: the machine was busy or throttling"))
    return flags
