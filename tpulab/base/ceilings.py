"""What a workload may ask of the device's measured ceilings, which the engine keeps
(`tpulab.engine.ceilings.Ceilings`) and hands to its summary part."""

from __future__ import annotations

from typing import Protocol

from tpulab.base.events import Device
from tpulab.base.timing import Flag


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
