"""A capacity: what a workload declares when its sweep asks how much load a server takes within latency bounds (an
SLO), and each swept point judged against them.

The workload names the parameter that sets the load (the sweep's axis), the figure of the load the server saw, the
figure of what it served, and the bounds: each a figure (a p99) and the figure that holds the run's bound. From
the points, `find` names, per series (the values but the load):

- the highest load meeting the SLO: the highest swept load below the first that misses it, with that first miss,
  between which two the capacity lies. Each point's verdict says whether its figures' intervals decide it
  (`CLEARS`, `EXCEEDS`) or only the figures themselves (`WITHIN`, `OVER`): too few requests give a p99 no
  interval, and nothing finer than the swept loads is claimed.
- the knee: the highest load below the first whose served rate falls short of the rate it was offered by more
  than the noise threshold (`NOISE`): up to it, the server keeps up; above it, requests queue and latency rises
  faster than throughput.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Protocol, Sequence, TypeVar

from tpulab.base.figures import is_number
from tpulab.base.noise import NOISE


@dataclass(frozen=True)
class Bound:
    """A figure that must stay at most a run's bound (both in one unit): TTFT p99 within --slo-ttft."""

    figure: str  # the figure bounded ("ttft_p99"); its interval, where kept: "<figure>_low", "<figure>_high"
    limit: str  # the figure that holds the run's bound ("slo_ttft_s")


@dataclass(frozen=True)
class Capacity:
    """How a workload's sweep over its load finds a capacity (`Workload.capacity`)."""

    load: str  # the parameter that sets the load, swept ("rate")
    offered: str  # the figure of the load the server saw ("achieved_rate": the requests sent a second)
    served: str  # the figure of what it served ("request_throughput")
    bounds: tuple[Bound, ...]
    rule: str  # the SLO in words, said with every finding ("TTFT p99 and TPOT p99 each within its bound")
    invalid: tuple[str, ...] = ()  # flag codes under which a point's load is not the asked one: it never meets


# A bound's verdict at one point: within it with its interval too, within it by the figure alone, over it by the
# figure alone, over it with its interval too; or no figure to judge (a TPOT where every request made one token).
CLEARS, WITHIN, OVER, EXCEEDS, UNMEASURED = "clears", "within", "over", "exceeds", "unmeasured"
FINISHED, FAILED = "finished", "failed"  # a point's status: judged; any other (not run, cancelled) is not


class Measured(Protocol):
    """A swept point as a capacity reads it (the engine's `Point`)."""

    values: dict[str, Any]

    def figure(self, name: str) -> float | None: ...

    @property
    def status(self) -> str: ...

    @property
    def flags(self) -> list[str]: ...


P = TypeVar("P", bound=Measured)


@dataclass(frozen=True)
class Verdict:
    """One bound at one point: the figure, its interval where kept, the bound, and the word for them."""

    bound: Bound
    value: float | None
    low: float | None
    high: float | None
    limit: float | None
    word: str

    @property
    def meets(self) -> bool:
        return self.word in (CLEARS, WITHIN, UNMEASURED)


def verdict(p: Measured, bound: Bound) -> Verdict:
    value, limit = p.figure(bound.figure), p.figure(bound.limit)
    low, high = p.figure(f"{bound.figure}_low"), p.figure(f"{bound.figure}_high")
    if value is None or limit is None:
        word = UNMEASURED
    elif value <= limit:
        word = CLEARS if high is not None and high <= limit else WITHIN
    else:
        word = EXCEEDS if low is not None and low > limit else OVER
    return Verdict(bound, value, low, high, limit, word)


@dataclass(frozen=True)
class Judged(Generic[P]):
    """One swept point against the SLO and against the load it was offered."""

    point: P
    load: float
    verdicts: tuple[Verdict, ...]
    invalid: tuple[str, ...]  # what voids its load: its run failed, or flags that say so (the generator fell behind)
    keeps_up: bool | None  # its served rate within the noise threshold of the rate offered (None: not measured)

    @property
    def meets(self) -> bool:
        return not self.invalid and all(v.meets for v in self.verdicts)

    @property
    def decided(self) -> bool:
        """Whether its verdict stands on the intervals (every bound cleared, or one exceeded, or its load void),
        not on the figures alone."""
        if self.meets:
            return all(v.word in (CLEARS, UNMEASURED) for v in self.verdicts)
        return bool(self.invalid) or any(v.word == EXCEEDS for v in self.verdicts)


@dataclass(frozen=True)
class Found(Generic[P]):
    """A series' capacity: its points by load, the highest meeting the SLO, the first missing it, and the knee."""

    capacity: Capacity  # as its workload declares it
    series: tuple[tuple[str, Any], ...]  # the values but the load (none where the load is the only axis)
    judged: list[Judged[P]]
    highest: Judged[P] | None  # the highest load below the first miss (None: the lowest missed)
    missed: Judged[P] | None  # the first load that misses (None: every load met)
    knee: Judged[P] | None  # the highest load below the first that fell behind (None: the lowest did, or none measured)
    behind: Judged[P] | None  # the first that fell behind (None: none did)

    @property
    def again(self) -> list[Judged[P]]:
        """Loads above the first miss that met the SLO again: noise in the figures, or a server that recovers."""
        return [j for j in self.judged if self.missed is not None and j.load > self.missed.load and j.meets]


def judge(capacity: Capacity, p: P) -> Judged[P] | None:
    """A point against the SLO and its offered load; a failed one misses both (the server failed it). None: it has
    not run (or was cancelled), served nothing measured, or its load is no number."""
    load = p.values.get(capacity.load)
    if not is_number(load) or p.status not in (FINISHED, FAILED):
        return None
    if p.status == FAILED:
        return Judged(p, float(load), (), (FAILED,), False)
    offered, served = p.figure(capacity.offered), p.figure(capacity.served)
    verdicts = tuple(verdict(p, b) for b in capacity.bounds)
    if served is None and all(v.word == UNMEASURED for v in verdicts):
        return None
    keeps = served >= (1 - NOISE) * offered if offered and served is not None else None
    return Judged(p, float(load), verdicts, tuple(f for f in p.flags if f in capacity.invalid), keeps)


def _below_first(judged: list[Judged[P]], ok: Callable[[Judged[P]], bool]) -> tuple[Judged[P] | None,
                                                                                     Judged[P] | None]:
    """(the last point before the first for which `ok` is false, that first) along the loads."""
    i = next((k for k, j in enumerate(judged) if not ok(j)), len(judged))
    return judged[i - 1] if i else None, judged[i] if i < len(judged) else None


def find(capacity: Capacity, points: Sequence[P]) -> list[Found[P]]:
    """Each series' capacity, from its finished and failed points (a sweep whose axes hold the load)."""
    by_series: dict[tuple[tuple[str, Any], ...], list[Judged[P]]] = {}
    for p in points:
        j = judge(capacity, p)
        if j is not None:
            key = tuple((k, v) for k, v in p.values.items() if k != capacity.load)
            by_series.setdefault(key, []).append(j)
    out = []
    for key, judged in by_series.items():
        judged.sort(key=lambda j: j.load)
        highest, missed = _below_first(judged, lambda j: j.meets)
        measured = any(j.keeps_up is not None for j in judged)
        knee, behind = _below_first(judged, lambda j: j.keeps_up is not False) if measured else (None, None)
        out.append(Found(capacity, key, judged, highest, missed, knee, behind))
    return out
