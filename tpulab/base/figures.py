"""A workload's own figures, declared once: every front end shows them without knowing the workload.

A workload names each figure it adds to its run's summary (`Summary.figures`, a flat mapping): its label, unit,
which way is better, the summary row it joins, and whether comparisons, sweeps and cards set it beside the run's
other figures. The console, the lab, the notebook, the HTML page, `compare`, sweeps and the card read the
declaration, as llama-bench's printers read its one list of fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, TypeGuard

from tpulab.base import fmt

FigureValue = float | str | None  # a number, or the words a figure keeps beside its numbers (a source)
HIGHER, LOWER = "higher", "lower"  # which way a figure is better ("": neither, a size or a check)


def is_number(value: Any) -> TypeGuard[float]:
    """A number JSON holds (not a boolean, which Python counts as one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One figure a workload adds to its summary."""

    name: str  # its key in `Summary.figures` and its CSV column: "ttft_s"
    label: str  # what a person reads: "time to first token"
    unit: str = ""  # "s", "B", "B/s", "%" (a fraction, shown as one), a rate's unit ("tokens/s"), or "" (a number)
    better: str = ""  # HIGHER, LOWER or "" (neither)
    group: str = ""  # the summary row it shares with the figures of the same group (their labels short)
    compare: bool = False  # a column of comparisons and sweeps, a headline of cards
    aside: str = ""  # the figure of words a comparison's cell adds after it (what it was measured against)
    throughput: str = ""  # set on the one figure that is the run's throughput (`Summary.throughput`): what it counts
    # ("over the batch: ..."), said in the summary's throughput row; no row of its own repeats it

    def show(self, value: Any) -> str:
        """The value in its unit: '52.1 ms', '1.9k tokens/s', '61%', '12.0 MiB'; '-' where there is none."""
        if value is None or isinstance(value, str):
            return "-" if value is None else value
        if self.unit == "s":
            return fmt.seconds(value)
        if self.unit == "%":
            return fmt.percent(value)
        if self.unit == "B":
            return fmt.bytes_(value)
        if self.unit:
            return fmt.rate(value, self.unit)
        return f"{value:.3g}"


    def cell(self, values: Mapping[str, Any]) -> str:
        """Its value in a comparison's cell, with its `aside` where the run has one: '61% own copies'."""
        shown = self.show(values.get(self.name))
        aside = values.get(self.aside) if self.aside else None
        return f"{shown} {aside}" if isinstance(aside, str) and values.get(self.name) is not None else shown


# A run over several processes, whatever its workload, measures these beside its steps (`Runtime.parallel_figures`):
# the summary keeps them with the workload's own, and every front end shows them as it shows those.
ALLREDUCE_BYTES = 64 * 2**20  # the all-reduce probe's float32 tensor: past every cache, as nccl-tests' large sizes
PARALLEL = (
    Figure(name="threads_per_process", label="per process", group="threads"),
    Figure(name="threads_from", label="from", group="threads"),  # words: where that count came from
    Figure(name="allreduce_bytes", label="size", unit="B", group="all-reduce"),
    Figure(name="allreduce_s", label="time", unit="s", better=LOWER, group="all-reduce"),  # the median of its repeats
    Figure(name="allreduce_algbw", label="algbw", unit="B/s", better=HIGHER, group="all-reduce"),  # bytes / time
    Figure(name="allreduce_busbw", label="busbw", unit="B/s", better=HIGHER, group="all-reduce"),  # algbw*2(n-1)/n
    Figure(name="scaling_efficiency", label="efficiency", unit="%", better=HIGHER, group="scaling"),  # see below
    Figure(name="one_process_step_s", label="one process's step", unit="s", better=LOWER, group="scaling"),
    Figure(name="one_process", label="as", group="scaling"),  # words: what that one process ran
)
# scaling_efficiency: one process's step (this machine's share of the global batch, alone, every core) over the run's
# step (the slowest process's): 100% is the ideal of processes that share one machine, or that each bring their own


def busbw(algbw: float, processes: int) -> float:
    """An all-reduce's bus bandwidth, as nccl-tests defines it: its algorithm bandwidth (bytes / time) times
    2(n-1)/n, what each link carries in a ring, comparable across process counts."""
    return algbw * 2 * (processes - 1) / processes


def throughput_of(declared: Iterable[Figure]) -> Figure | None:
    """The figure a workload declares as its run's throughput (`Figure.throughput`), or None: a workload's figures
    name one throughput, and any other rate says what it counts."""
    return next((f for f in declared if f.throughput), None)


def rows(declared: Iterable[Figure], values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of the figures a summary holds, in declared order, then those of a run over several
    processes (`PARALLEL`); a group's figures share one row ('inter-token latency: p50 4.0 ms, p90 4.4 ms'). A
    figure a summary holds that nothing declares (a plugin not installed here) is shown by its name, as a number.
    The run's throughput (`Figure.throughput`) has the summary's throughput row, not one here."""
    out: list[tuple[str, str]] = []
    groups: dict[str, list[str]] = {}
    known = set()
    for f in (*declared, *PARALLEL):
        known.add(f.name)
        if f.name not in values or values[f.name] is None or f.throughput:
            continue
        if f.group:
            if f.group not in groups:
                groups[f.group] = []
                out.append((f.group, ""))
            groups[f.group].append(f"{f.label} {f.show(values[f.name])}")
        else:
            out.append((f.label, f.show(values[f.name])))
    out = [(label, value or ", ".join(groups[label])) for label, value in out]
    return out + [(name, Figure(name=name, label=name).show(v)) for name, v in values.items()
                  if name not in known and v is not None]


def flat(part: Mapping[str, Any], prefix: str = "") -> dict[str, FigureValue]:
    """A nested part's figures flat, their names joined by '_' ({'itl': {'p50': x}} -> {'itl_p50': x}): how an
    older record's own part (schema 4 kept one nested, by the workload's name) reads as figures."""
    out: dict[str, FigureValue] = {}
    for key, value in part.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + "_"))
        elif value is None or isinstance(value, str) or is_number(value):
            out[name] = value
    return out
