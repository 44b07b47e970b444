"""JAX behind tpulab's backend protocol: devices, a mesh over N of them, versions, the deep probe.

Imported only inside a worker whose environment the parent set (`KERAS_BACKEND=jax`, and for N
CPU shards `--xla_force_host_platform_device_count=N`), so the very code that shards over TPU
cores runs over host devices here. It never imports TensorFlow: on a TPU, the first framework
to initialise it wins (jax-ml/jax #13260).
"""

from __future__ import annotations

import platform
from typing import Any

import jax
import numpy as np

from ..runtime.detect import detect
from . import Placement


class DeviceError(RuntimeError):
    """The requested device cannot be used; the message says why and what to do."""


def versions() -> dict[str, str]:
    import jaxlib
    import keras

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "keras": keras.__version__,
            "python": platform.python_version()}


def devices_of(kind: str) -> list[Any]:
    """JAX's devices of one kind (cpu, gpu, tpu), or of its default kind for auto."""
    if kind == "auto":
        return list(jax.devices())
    try:
        return list(jax.devices(kind))
    except RuntimeError as e:
        raise DeviceError(f"JAX sees no {kind.upper()} ({str(e).strip().splitlines()[0]}); see `tpulab doctor`") from None


def place(device: str, shards: int) -> Placement:
    """`shards` devices of the requested kind, as a one-axis mesh named "batch"."""
    found = devices_of(device)
    kind = found[0].platform
    if shards > len(found):
        raise DeviceError(f"--shards {shards} is more than the {len(found)} {kind.upper()} device(s) JAX sees")
    chosen = found[:shards] if jax.process_count() == 1 else found  # several hosts: every global device
    report = detect()
    if kind == "cpu":
        name = report.cpu.model
    elif kind == "tpu":
        name = (report.tpu.generation if report.tpu else None) or chosen[0].device_kind
    else:
        name = chosen[0].device_kind
    mesh = jax.sharding.Mesh(np.array(chosen), ("batch",))
    return Placement(kind=kind, name=name, replicas=len(chosen), strategy=f"Mesh({len(chosen)} x {kind})",
                     devices=chosen, handle=mesh, hosts=jax.process_count())


def probe() -> dict[str, Any]:
    """JAX's own view of the machine, for `tpulab detect`, the doctor and `auto`."""
    out: dict[str, Any] = dict(versions())
    backend = jax.default_backend()
    found = jax.devices()
    out["platform"] = backend
    out["devices"] = [d.device_kind for d in found]
    out["gpus"] = [{"name": d.device_kind} for d in found if d.platform == "gpu"]
    out["tpu_cores"] = sum(d.platform == "tpu" for d in found)
    out["processes"] = jax.process_count()
    return out
