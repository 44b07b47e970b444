"""Like with like: on what basis runs (or sweep points) are compared, decided here for compare and sweeps.

Times compare only when every run did the same work per step; runs that did the same work per
example (another batch) compare by examples per second; otherwise (another shape, or a roofline's
kernels) by the rate at which the device did its work, GFLOP/s, where the work is known, else by
examples per second. Different models never did the same work: they compare by GFLOP/s when every
run's work is known, else by examples per second, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

TIME, EXAMPLES, GFLOPS = "time", "examples/s", "GFLOP/s"


@dataclass(frozen=True)
class Work:
    """What one step of a run did: its FLOPs (None: unknown) and its examples, on which model (a user's
    model by its identity; None for a workload's own)."""

    flops: float | None
    examples: int | None
    model: str | None = None  # what did the work (a workload, a user's model): different ones never do the same

    @property
    def per_example(self) -> float | None:
        return round(self.flops / self.examples, 3) if self.flops and self.examples else None


@dataclass(frozen=True)
class Basis:
    by: str  # TIME, EXAMPLES or GFLOPS
    why: str  # in words, for a header

    @property
    def rate(self) -> str:
        """What is ranked, higher being better: examples/s stands in for time (the same work per step)."""
        return EXAMPLES if self.by == TIME else self.by


def basis(works: Sequence[Work]) -> Basis:
    """The basis these runs compare on, and why in words."""
    if len({w.model for w in works}) > 1:  # another model is never the same work, whatever its FLOPs
        if all(w.flops for w in works):
            return Basis(GFLOPS, "different models: not the same work")
        return Basis(EXAMPLES, "different models: not the same work, and theirs is not known for every run")
    if len(set(works)) <= 1:
        return Basis(TIME, "the same work per step")
    if all(w.flops and not w.examples for w in works):
        return Basis(GFLOPS, "the work per step differs and there are no examples (a roofline)")
    per_example = {w.per_example for w in works}
    if len(per_example) == 1:
        return Basis(EXAMPLES, "the work per step differs, the work per example does not")
    if None not in per_example:
        return Basis(GFLOPS, "the work per example differs")
    return Basis(EXAMPLES, "the work per step differs and is not known for every run")


def differ(name: str, values: Sequence[Any]) -> str:
    """'filters differ: 64 vs 256', 'image size differs: 32 vs 256': a parameter that differs between runs,
    the verb agreeing with its noun (the first word before 'per', else the last: steps per epoch differ)."""
    words = name.replace("_", " ")
    head = words.split(" per ")[0].split()[-1]
    plural = head.endswith("s") and not head.endswith(("ss", "us", "is"))
    return f"{words} {'differ' if plural else 'differs'}: " + " vs ".join(str(v) for v in values)
