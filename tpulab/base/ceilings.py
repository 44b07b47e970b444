"""What a run is set against, and what a workload may ask of the device's measured ceilings, which the engine
keeps (`tpulab.engine.ceilings.Ceilings`) and hands to its summary part."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol

from tpulab.base.events import Device
from tpulab.base.timing import Flag

CEILING_LOW = "ceiling-measured-low"  # a figure above a kept FLOP/s ceiling: that ceiling was measured low
BANDWIDTH_LOW = "bandwidth-measured-low"  # a figure above a kept (or the run's own) bandwidth ceiling
RENAMED_FLAGS = {"beats-ceiling": CEILING_LOW, "beats-bandwidth": BANDWIDTH_LOW}  # their codes in older records
SPEC: Final = "spec"  # the vendor's figure
MEASURED: Final = "measured"  # what this machine was seen to do


@dataclass(frozen=True)
class Sourced:
    """A rate a run is set against (a peak or a ceiling in FLOP/s, a bandwidth in bytes/s) and where it came from:
    the vendor's figure (`SPEC`: a bound no program reaches) or what this machine was measured doing (`MEASURED`).
    One type for every peak, ceiling and bandwidth, so that whoever judges a figure reads its kind, not its words."""

    value: float
    source: str  # in words: the datasheet and its figure, or the run that measured it
    kind: Literal["spec", "measured"] = SPEC
    other: float | None = None  # the vendor's second value, where its own pages disagree (the source names both)

    def times(self, n: int, of: str = "") -> Sourced:
        """`n` of them (replicas, machines): '4 x (source)', or '2 machines x (source)' with `of`."""
        if n == 1:
            return self
        return Sourced(self.value * n, f"{n} {of + ' ' if of else ''}x ({self.source})", self.kind,
                       self.other * n if self.other else None)


class MeasuredCeilings(Protocol):
    def over_bandwidth(self, device: Device | None, bytes_per_s: float | None) -> list[Flag]:
        """The flag of a copy faster than this device's measured bandwidth (none when it is not)."""
        ...

    def memory(self, device: Device | None) -> Sourced | None:
        """This device's kept bandwidth ceiling (None: no roofline measured one)."""
        ...

    def memory_kept(self, kind: str) -> list[str]:
        """The names of the devices of `kind` with a kept bandwidth ceiling."""
        ...


def rerun(sizes: tuple[int, int] | None = None, dtype: str = "float32", copy_mib: int | None = None) -> str:
    """'tpulab --run roofline --min-size 256 --max-size 2048': the sizes to run, said in full."""
    flags: dict[str, int | str | None] = {"min-size": sizes[0], "max-size": sizes[1]} if sizes else {}
    flags |= {"dtypes": dtype if dtype != "float32" else None, "copy-mib": copy_mib}
    return "tpulab --run roofline" + "".join(f" --{k} {v}" for k, v in flags.items() if v is not None)
