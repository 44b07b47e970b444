"""Formatting shared by the console printer, the results commands and the TUI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from tpulab.base.timing import Stats


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x < 1e-3:
        return f"{x * 1e6:.0f} us"
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.3f} s"


def duration(x: float | None) -> str:
    if x is None:
        return "-"
    x = int(round(x))
    if x < 60:
        return f"{x}s"
    if x < 3600:
        return f"{x // 60}m{x % 60:02d}s"
    return f"{x // 3600}h{x % 3600 // 60:02d}m"


PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))
Prefix = tuple[float, str]


def prefix_of(values: Iterable[float | None]) -> Prefix:
    """The scale of the largest value: the prefix every rate of one quantity in one view takes."""
    top = max((abs(v) for v in values if v is not None), default=0.0)
    return next(((s, p) for s, p in PREFIXES if top >= s), PREFIXES[-1])


SI_UNITS = ("FLOP", "B/s")  # units whose prefix is part of the unit's name (GFLOP/s, GB/s); others count things


def rate(x: float | None, unit: str = "", prefix: Prefix | None = None) -> str:
    """'40.3 GFLOP/s', '8.2k examples/s', '51 examples/s'. A view's shared `prefix` (see prefix_of) lines its values
    up, unless it would show one below 1 ('0.051k'): that value takes its own. A count's 'k' sits on the number."""
    if x is None:
        return "-"
    scale, p = prefix or prefix_of([x])
    if x and abs(x) < scale:
        scale, p = prefix_of([x])
    v = x / scale
    number = f"{v:.0f}" if p == "" and abs(v) >= 10 and not any(u in unit for u in SI_UNITS) else f"{v:.1f}"
    if unit and not any(u in unit for u in SI_UNITS):
        return f"{number}{p} {unit}"
    return f"{number} {p}{unit}".rstrip()


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def plus_minus(stats: Stats | None) -> str:
    """'±1.2%': the larger half of the median's 95% interval ('' without one: too few samples)."""
    half = stats.half_width() if stats else None
    return "" if half is None else f"±{half:.1%}" if half < 0.1 else f"±{half:.0%}"


def median_ci(stats: Stats | None) -> str:
    """'0.684 s ±1.2%': the median and its interval, for a cell."""
    return f"{seconds(stats.median)} {plus_minus(stats)}".strip() if stats else "-"


def spread(stats: Stats | None) -> str:
    """'0.684 s ±1.2% (p10 0.671 s, p90 0.702 s, n=10)': the median, its 95% interval, the spread."""
    if not stats:
        return "-"
    return f"{median_ci(stats)} (p10 {seconds(stats.p10)}, p90 {seconds(stats.p90)}, n={stats.count})"


def p10_p90(stats: Stats | None) -> str:
    return f"{seconds(stats.p10)}-{seconds(stats.p90)}" if stats else "-"


LIST_COLUMNS = ("id", "started", "workload", "status", "device", "backend", "batch", "GFLOP", "sweep", "median",
                "peak")  # GFLOP: the work per step (runs of other sizes differ there); sweep: its id's start
SHRINKABLE = ("device", "workload")  # descriptive cells give way at 80 columns; an id or a figure never does
OPTIONAL = ("started", "batch", "device", "backend", "status")  # then left out, the first first (at 80 columns
# the backend stays: a llama.cpp and a TensorFlow run of one workload differ there alone; GFLOP says the size)
MIN_SHRUNK = 5


def gflop(flops: float | None) -> str:
    """Work in GFLOP, three figures at most: '80.5', '0.168', '3221' ('-': unknown)."""
    if not flops:
        return "-"
    g = flops / 1e9
    return f"{g:.0f}" if g >= 100 else f"{g:.3g}"


def fit(rows: list[tuple[str, ...]], width: int, columns: tuple[str, ...] = LIST_COLUMNS,
        optional: tuple[str, ...] = OPTIONAL, shrinkable: tuple[str, ...] = SHRINKABLE) -> list[tuple[str, ...]]:
    """Rows whose cells fit `width` (one space between columns): the `shrinkable` columns are shortened
    with "…", the first first; when that is not enough, `optional` columns are left out (from every row,
    the header too), the first first. An id and a figure are always kept whole."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    least = [min(w, max(MIN_SHRUNK, len(c))) if c in shrinkable else w for w, c in zip(widths, columns)]
    kept = list(range(len(columns)))
    for name in optional:
        if sum(least[i] + 1 for i in kept) - 1 <= width:
            break
        if name in columns:
            kept.remove(columns.index(name))
    excess = sum(widths[i] + 1 for i in kept) - 1 - width
    for name in shrinkable:
        if name not in columns:
            continue
        i = columns.index(name)
        cut = min(max(excess, 0), widths[i] - least[i]) if i in kept else 0
        widths[i] -= cut
        excess -= cut
    return [tuple(r[i] if len(r[i]) <= widths[i] else r[i][:widths[i] - 1] + "…" for i in kept) for r in rows]


def pct(x: float | None) -> str:
    """A figure already in percent (utilisation): '45%'."""
    return "-" if x is None else f"{x:.0f}%"


def bytes_(n: float | None) -> str:
    """'50.8 KiB', '12 MiB', '1.5 GiB': below a MiB in KiB (a small file said as '0 MiB' said nothing)."""
    if n is None:
        return "-"
    if n < 2**20:
        return f"{n / 2**10:.1f} KiB"
    if n < 2**30:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**30:.1f} GiB"


def counted(n: int, noun: str) -> str:
    """'1 card', '2 cards'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
