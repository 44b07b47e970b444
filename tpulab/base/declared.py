"""What the layers below the workloads know of one: a backend may bring the runner of a workload
declared elsewhere (`Backend.runner_for`), and reads only this of it."""

from __future__ import annotations

from typing import Protocol


class Declared(Protocol):
    """A workload as a backend sees it (`tpulab.workloads.base.Workload` is one)."""

    @property
    def name(self) -> str: ...
