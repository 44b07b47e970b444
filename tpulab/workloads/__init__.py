"""The workloads tpulab can run, by name: tpulab's own and every plugin's, found by entry point.

Declarations only: loading them imports no framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpulab.base import moved, plugins
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
}

# Modules that moved into a workload's package, or into `shared` (what two workloads use): their old paths warn.
moved.install(__name__, {"decode_math": "decode.arithmetic", "decode_figures": "decode.figures", "decode_loop": "decode.loop",
                         "decode_jax": "decode.jax", "decode_tf": "decode.tf", "decode_torch": "decode.torch",
                         "roofline_kernels": "shared.kernels", "roofline_jax": "shared.kernels_jax",
                         "roofline_tf": "shared.kernels_tf", "roofline_torch": "shared.kernels_torch",
                         "decoder_keras": "shared.decoder_keras", "conv_tf": "conv.tf", "conv_jax": "conv.jax",
                         "conv_torch": "conv.torch", "user_model_data": "user_model.data",
                         "user_model_keras": "user_model.keras", "user_model_target": "user_model.target",
                         "user_model_torch": "user_model.torch"})


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
