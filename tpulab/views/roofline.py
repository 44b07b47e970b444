"""The measured ceilings in words and as a roofline chart, shared by the CLI and the lab.

The chart is log-log: arithmetic intensity (FLOP per byte) across, FLOP/s up; the memory roof
(bandwidth x intensity) rises to the ridge, where the compute ceiling takes over. Each run whose
intensity is known is a point; a roofline run's matmuls are points at their own intensity.
"""

from __future__ import annotations

from typing import Iterable

from rich.text import Text

from tpulab.base import fmt, safe
from tpulab.base.ceilings import CEILING_LOW
from tpulab.base.events import Device, RunRecord, Summary
from tpulab.engine.ceilings import MEMORY, Ceilings, CurveVerdict, verdicts
from tpulab.engine.runindex import RunRow
from tpulab.views import plot
from tpulab.workloads.shared.kernels import kernel_intensity


def ceiling_text(s: Summary, dtype: str | None = None, words: str | None = None) -> str | None:
    """'39.2% of the measured ceiling 138.0 GFLOP/s (roofline run ..., jax, n=256..2048)', or None
    for a roofline with none before it (its own rows say what it measured). Above the ceiling: that
    ceiling was measured low (its flag says where, under what load, and how to measure it again). `words`: the run's
    number formats where they are more than `dtype` ('q4_0 weights, float32 cache'): the ceiling is `dtype`'s
    matmul's, which a roofline measures, and the row says so."""
    other = words if words and words != dtype else None
    if s.has_flag(CEILING_LOW):
        return (f"above the measured ceiling {fmt.rate(s.ceiling_flops, 'FLOP/s')} from {s.ceiling_source}: that "
                "ceiling was measured low (see its flag)")
    if s.ceiling_flops is None:
        if s.kernels:
            return None
        flag = f" --dtypes {dtype}" if dtype and dtype != "float32" else ""
        if other:
            return (f"no measured ceiling for {other}: a roofline measures float matmuls, the nearest {dtype}'s "
                    f"(`tpulab --run roofline{flag}` on this device)")
        return f"no measured ceiling yet for {dtype or 'this dtype'}: run `tpulab --run roofline{flag}` on this device"
    return f"{fmt.percent(s.ceiling_fraction)} of the measured ceiling {fmt.rate(s.ceiling_flops, 'FLOP/s')} " \
           f"({s.ceiling_source})" + (f", a {dtype} matmul's: {other} are not one" if other else "")


def ceiling_cell(s: Summary) -> str:
    """A comparison's cell: '39.2%', 'measured low' (the ceiling, this run being above it), or '-'."""
    return "measured low" if s.has_flag(CEILING_LOW) else fmt.percent(s.ceiling_fraction)


def intensity_text(s: Summary) -> str | None:
    """'12.3 FLOP/byte accessed: compute-bound (ridge 8.1)', why it is unknown, or None (a roofline). The bytes
    are XLA's count of a compiled step's, or the model's own (a token step's: its weights and cache)."""
    if s.kernels:
        return None  # a roofline's kernels are the chart's points, each at its own intensity
    if s.intensity is None:
        return "unknown: no count of the bytes a step accesses (XLA's cost analysis gives one on JAX)"
    if s.bound is None:
        return f"{s.intensity:.2f} FLOP/byte accessed; bound unknown until a roofline measures both ceilings"
    ridge = (s.ceiling_flops or 0) / (s.bandwidth or 1)
    return f"{s.intensity:.2f} FLOP/byte accessed: {s.bound}-bound (ridge {ridge:.2f} FLOP/byte)"


def kernel_rows(record: RunRecord) -> list[tuple[str, str]]:
    """A roofline's figures: a row per matmul dtype (every size) and the copy, each followed by the
    ceiling it measured or why it measured none (a run that did not finish sets none)."""
    s = record.summary
    judged = verdicts(record) if record.status != "running" else {}
    rows = []
    for dtype in dict.fromkeys(k.dtype for k in s.kernels if k.kind == "matmul"):
        ks = [k for k in s.kernels if k.kind == "matmul" and k.dtype == dtype]
        rows.append((f"matmul {dtype}", ", ".join(f"n={k.size} {fmt.rate(k.flops_per_s, 'FLOP/s')}" for k in ks)))
        if dtype in judged:
            rows.append((f"ceiling {dtype}", verdict_text(judged[dtype], "FLOP/s")))
    for k in s.kernels:
        if k.kind == "copy":
            rows.append((f"copy {k.size} MiB", f"{fmt.rate(k.bytes_per_s, 'B/s')} read and written "
                                               f"(median {fmt.seconds(k.median_s)})"))
    if MEMORY in judged:
        rows.append(("memory ceiling", verdict_text(judged[MEMORY], "B/s")))
    return rows


def verdict_text(v: CurveVerdict, unit: str) -> str:
    """'71.8 GFLOP/s at n=512 (flat: ...)', or 'none: not saturated at n=64 (...): run `...`'."""
    if v.figure is None:
        return f"none: {v.why}: run `{v.run}`"
    f = v.figure
    if f.kind == "matmul":
        return f"{fmt.rate(f.flops_per_s, unit)} at n={f.size} ({v.why})"
    return f"{fmt.rate(f.bytes_per_s, unit)} ({v.why})"


POINTS = 200  # the newest runs of a device drawn on its roofline beside the run shown (`results show`)


def points(records: Iterable[RunRecord], device: Device, rows: Iterable[RunRow] = ()) -> list[tuple[str, float, float]]:
    """(label, intensity, FLOP/s) of each run on `device` whose intensity is known, and each roofline matmul; then
    each of `rows` (runs as the index keeps them: `Store.on_roofline`) not among `records`."""
    out = []
    records = list(records)
    seen = {r.id for r in records}
    for r in records:
        if r.device is None or (r.device.kind, r.device.name) != (device.kind, device.name):
            continue
        s = r.summary
        if s.kernels:
            out += [(f"{r.short_id} {k.dtype}", kernel_intensity(k), k.flops_per_s) for k in s.kernels
                    if k.kind == "matmul" and k.flops_per_s]
        elif s.intensity and s.gflops_per_s:
            out.append((f"{r.short_id} {r.workload}", s.intensity, s.gflops_per_s * 1e9))
    out += [(f"{row.short_id} {row.workload}", row.intensity, row.gflops_per_s * 1e9) for row in rows
            if row.id not in seen and row.intensity and row.gflops_per_s]
    return out


def roofline_plot(ceilings: Ceilings, records: Iterable[RunRecord], device: Device, width: int = 78,
                  height: int = 20, rows: Iterable[RunRow] = ()) -> str | None:
    """The roofline of `device` as text (plotext), or None when no roofline measured both its ceilings."""
    top = max((c for (kind, name, dtype), c in ceilings.kept.items()
               if (kind, name) == (device.kind, device.name) and dtype != "memory"),
              key=lambda c: c.value, default=None)
    bw = ceilings.bandwidth(device)
    if top is None or bw is None:
        return None
    pts = points(records, device, rows)
    ridge = top.value / bw.value
    xs = [p[1] for p in pts] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    g = 1e-9  # drawn in GFLOP/s: plotext writes its ticks in full
    others = [(dtype, color, c) for dtype, color in (("float32", "cyan"), ("bfloat16", "magenta"), ("float16", "yellow"))
              if (c := ceilings.flops(device, dtype)) is not None and c is not top]
    # the key is said below the chart: plotext's own legend would sit on its data
    key = [("measured ceilings", "blue+")] + [(f"{dtype} ceiling", color) for dtype, color, _ in others]
    with plot.chart(width, height - len(key) - bool(pts)) as chart:
        chart.fig.ruler("both", "both").scale("log")  # with plotext's own ticks (right on a log axis given none)
        chart.series([lo, ridge, hi], [bw.value * lo * g, top.value * g, top.value * g], key[0][1])
        for _, color, c in others:
            chart.series([c.value / bw.value, hi], [c.value * g, c.value * g], color)
        if pts:
            chart.series([p[1] for p in pts], [p[2] * g for p in pts], "red", marker="*", joined=False)
        chart.fig.title(safe.visible(f"roofline: GFLOP/s up, FLOP/byte across, {device.label(short=True)}"))
        drawn = chart.text()
    legend = [f"  -- {name}" for name, _ in key] + (["  *  runs"] if pts else [])
    return drawn + "\n" + "\n".join(legend)


def roofline_view(records: Iterable[RunRecord], device: Device, width: int, height: int = 20,
                  rows: Iterable[RunRow] = ()) -> Text:
    """The device's roofline, its ceilings those of the roofline runs among `records`, with each of `records` and
    `rows` (runs as the index keeps them) on it, each once; or why there is none."""
    unique = list({r.id: r for r in records}.values())
    plot = roofline_plot(Ceilings(unique), unique, device, width=min(width, 100) - 1, height=height, rows=rows)
    if plot is None:
        return safe.text(f"no roofline chart: no roofline run measured both ceilings of {device.label()} "
                         "(`tpulab --run roofline`)", "dim")
    return Text.from_ansi(plot)
