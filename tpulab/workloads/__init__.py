"""The workloads tpulab can run, by name. Declarations only: no TensorFlow here."""

from __future__ import annotations

from tpulab.workloads.base import Workload
from tpulab.workloads.conv import CONV
from tpulab.workloads.fashion_mnist import FASHION_MNIST

WORKLOADS: dict[str, Workload] = {w.name: w for w in (CONV, FASHION_MNIST)}


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}: choose one of {', '.join(WORKLOADS)}") from None
