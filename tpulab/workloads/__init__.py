"""The workloads tpulab can run, by name: tpulab's own and every plugin's, found by entry point.

Declarations only: loading them imports no framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpulab.base import plugins
from tpulab.base.errors import UsageError
from tpulab.workloads.base import Workload

if TYPE_CHECKING:
    from tpulab.base.plugins import Origin

# tpulab's own workloads, as pyproject.toml registers them (found here too when its metadata is stale).
BUILTIN = {
    "conv": "tpulab.workloads.conv:CONV",
    "fashion-mnist": "tpulab.workloads.fashion_mnist:FASHION_MNIST",
    "roofline": "tpulab.workloads.roofline:ROOFLINE",
    "resnet50": "tpulab.workloads.resnet50:RESNET50",
    "transformer": "tpulab.workloads.transformer:TRANSFORMER",
    "model": "tpulab.workloads.user_model:MODEL_WORKLOAD",
    "decode": "tpulab.workloads.decode:DECODE",
    "calibration": "tpulab.workloads.calibration:CALIBRATION",
    "serve": "tpulab.workloads.serve:SERVE",
}


def registry() -> dict[str, Workload]:
    """Every workload that loaded, tpulab's own first, by name."""
    return {name: obj for name, (obj, _) in plugins.discover(plugins.WORKLOADS)[0].items()
            if isinstance(obj, Workload)}


def origin(name: str) -> Origin | None:
    """The distribution that declared a workload, and its version."""
    found = plugins.discover(plugins.WORKLOADS)[0].get(name)
    return found[1] if found else None


def get_workload(name: str) -> Workload:
    found = registry()
    if name not in found:
        raise UsageError(f"unknown workload {name!r}: choose one of {', '.join(found)}")
    return found[name]
