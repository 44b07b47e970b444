"""Formatting shared by the console printer, the results commands and the TUI."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpulab.core.runindex import RunRow
    from tpulab.core.timing import Stats


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


def rate(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {prefix}{unit}"
    return f"{x:.1f} {unit}".rstrip()


def percent(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def spread(stats: Stats | None) -> str:
    """'0.684 s (p10 0.671 s, p90 0.702 s, n=10)'."""
    if not stats:
        return "-"
    return f"{seconds(stats.median)} (p10 {seconds(stats.p10)}, p90 {seconds(stats.p90)}, n={stats.count})"


def p10_p90(stats: Stats | None) -> str:
    return f"{seconds(stats.p10)}-{seconds(stats.p90)}" if stats else "-"


LIST_COLUMNS = ("id", "started", "workload", "status", "device", "backend", "batch", "median", "peak")
SHRINKABLE = ("device", "workload")  # descriptive cells give way at 80 columns; an id or a figure never does
MIN_SHRUNK = 5


def backend_short(name: str) -> str:
    """A backend's short name for narrow tables (its own word for it)."""
    from tpulab.backends import registry

    found = registry().get(name)
    return found.short if found else name


def list_row(row: RunRow) -> tuple[str, ...]:
    """A run in one line of a listing (the CLI's and the lab's): LIST_COLUMNS; a user's model by its name."""
    return (row.short_id, row.started_at[5:16].replace("T", " "), row.model or row.workload, row.status,
            row.device_short, backend_short(row.backend), str(row.batch_size or "-"), seconds(row.median_s),
            percent(row.peak_fraction))


def fit(rows: list[tuple[str, ...]], width: int, columns: tuple[str, ...] = LIST_COLUMNS) -> list[tuple[str, ...]]:
    """Rows whose cells fit `width` (one space between columns): the SHRINKABLE columns are shortened
    with "…", the first first; the others are kept whole."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    excess = sum(widths) + len(columns) - 1 - width
    for name in SHRINKABLE:
        i = columns.index(name)
        cut = min(max(excess, 0), widths[i] - max(MIN_SHRUNK, len(name)))
        if cut > 0:
            widths[i] -= cut
            excess -= cut
    return [tuple(cell if len(cell) <= widths[i] else cell[:widths[i] - 1] + "…" for i, cell in enumerate(r))
            for r in rows]


def pct(x: float | None) -> str:
    """A figure already in percent (utilisation): '45%'."""
    return "-" if x is None else f"{x:.0f}%"


def bytes_(n: float | None) -> str:
    if n is None:
        return "-"
    if n < 2**30:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**30:.1f} GiB"
