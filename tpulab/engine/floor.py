"""A machine's noise floor as kept: how far alike runs differed there from one fresh process to the next.

`tpulab calibrate` measures it (`tpulab.engine.calibrate`) and the store keeps the newest per machine, backend and
device kind; a comparison of runs made there takes it as its threshold (`tpulab.base.noise.Floor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tpulab.base.noise import Floor
from tpulab.base.schema import CONFIG, build, plain


@dataclass(kw_only=True)
class Calibration:
    """One calibration: its processes' medians (each a fresh process of the calibration workload) and the spread
    they give."""

    machine: str  # `tpulab.machine.fingerprint.machine_key` of where it ran
    backend: str
    device: str  # the kind: cpu, gpu, tpu
    made_at: str
    workload: str
    params: dict[str, Any]
    spread: float  # `tpulab.base.noise.floor_of` the medians: two alike single runs' ratio stays within 1 + spread
    medians: list[float] = field(default_factory=list)  # each process's median step, seconds, in the order they ran
    seeds: list[int] = field(default_factory=list)  # each process's data seed: two alike configurations, alternated
    disturbed: int = 0  # processes kept though other work used the machine beside them (each ran again first)
    span_s: float | None = None  # the processes' timed steps' duration, the median of theirs
    __pydantic_config__: ClassVar[dict[str, Any]] = CONFIG

    @property
    def key(self) -> str:
        return key(self.machine, self.backend, self.device)

    def floor(self) -> Floor:
        busy = f", {self.disturbed} disturbed" if self.disturbed else ""
        return Floor(self.spread, f"calibrated here on {self.made_at[:10]}: {len(self.medians)} processes{busy}, "
                                  f"{self.backend} on {self.device.upper()}", span_s=self.span_s)

    def to_json(self) -> dict[str, Any]:
        return plain(self)

    @classmethod
    def from_json(cls, data: Any) -> Calibration:
        return build(cls, data)


def key(machine: str, backend: str, device: str) -> str:
    """What a floor is kept by: the machine, and the framework and device kind its processes ran on."""
    return f"{machine}/{backend}/{device}"
