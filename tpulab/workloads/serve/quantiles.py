"""A quantile and its distribution-free interval, from order statistics: a request's latency is no step of a
steady loop (the median's bootstrap of `tpulab.base.noise` assumes one), and a tail quantile is what an SLO bounds."""

from __future__ import annotations

import math
from typing import Sequence

from tpulab.base.noise import LEVEL
from tpulab.base.timing import percentile


def _cdf(n: int, q: float) -> list[float]:
    """P(Binomial(n, q) <= k) for k = 0..n, each term in log space (n up to the request bound, q near 0 or 1)."""
    lq, lp, top = math.log(q), math.log1p(-q), math.lgamma(n + 1)
    out, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(top - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lp)
        out.append(min(1.0, total))
    return out


def ranks(n: int, q: float, level: float = LEVEL) -> tuple[int, int] | None:
    """The 1-based ranks (lo, hi) whose order statistics X(lo) <= the q quantile <= X(hi) hold with at least `level`
    probability, each tail at most (1 - level) / 2; None where `n` samples are too few for that (a p99 needs about
    370)."""
    tail, cdf = (1 - level) / 2, _cdf(n, q)
    lo = max((r for r in range(1, n + 1) if cdf[r - 1] <= tail), default=None)  # P(X(r) > quantile) = cdf[r - 1]
    hi = min((r for r in range(1, n + 1) if cdf[r - 1] >= 1 - tail), default=None)
    return (lo, hi) if lo is not None and hi is not None else None


def quantile(xs: Sequence[float], q: float) -> tuple[float | None, float | None, float | None]:
    """(the q quantile, its interval's low, high) of the samples; (None, None, None) for none, and no interval where
    they are too few."""
    s = sorted(xs)
    if not s:
        return None, None, None
    found = ranks(len(s), q)
    return percentile(s, q), *((s[found[0] - 1], s[found[1] - 1]) if found else (None, None))
