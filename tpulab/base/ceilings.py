"""What a workload may ask of the device's measured ceilings, which the engine keeps
(`tpulab.engine.ceilings.Ceilings`) and hands to its summary part."""

from __future__ import annotations

from typing import Protocol

from tpulab.base.events import Device
from tpulab.base.timing import Flag

CEILING_LOW = "ceiling-measured-low"  # a figure above a kept FLOP/s ceiling: that ceiling was measured low
BANDWIDTH_LOW = "bandwidth-measured-low"  # a figure above a kept (or the run's own) bandwidth ceiling
RENAMED_FLAGS = {"beats-ceiling": CEILING_LOW, "beats-bandwidth": BANDWIDTH_LOW}  # their codes in older records


class MeasuredCeilings(Protocol):
    def over_bandwidth(self, device: Device | None, bytes_per_s: float | None) -> list[Flag]:
        """The flag of a copy faster than this device's measured bandwidth (none when it is not)."""
        ...

    def memory(self, device: Device | None) -> tuple[float, str] | None:
        """This device's kept bandwidth ceiling: bytes/s and its source (None: no roofline measured one)."""
        ...

    def memory_kept(self, kind: str) -> list[str]:
        """The names of the devices of `kind` with a kept bandwidth ceiling."""
        ...
