"""A doctor's verdict: what is wrong (or right) with one device, in one sentence, and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Verdict:
    level: str  # ok, info, warn, error
    device: str  # cpu, gpu, tpu
    message: str
    fix: str | None = None
    framework: str = ""  # the backend it is about, or "" when about the machine

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


def version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())
