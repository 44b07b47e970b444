"""JAX behind tpulab's backend protocol: devices, a mesh over N of them, versions, the deep probe.

Imported only inside a worker whose environment the parent set (`KERAS_BACKEND=jax`, and for N
CPU shards `--xla_force_host_platform_device_count=N`), so the very code that shards over TPU
cores runs over host devices here. It never imports TensorFlow: on a TPU, the first framework
to initialise it wins (jax-ml/jax #13260).
"""

from __future__ import annotations

import os
import platform
from typing import Any

import jax
import numpy as np

from tpulab.runtime.detect import detect
from tpulab.backends import HEARTBEAT_TIMEOUT_S, Cluster, DeviceError, Placement


def join(cluster: Cluster) -> None:
    """One program over every process's devices: JAX's distributed runtime, gloo for CPU collectives.

    Bounded: a process that never joins fails the run after the cluster's join timeout, one that
    goes silent after HEARTBEAT_TIMEOUT_S.
    """
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    timeouts = {"initialization_timeout": cluster.join_timeout_s, "heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_S,
                "shutdown_timeout_seconds": cluster.join_timeout_s}
    try:
        if cluster.coordinator == "auto":
            jax.distributed.initialize(**timeouts)  # type: ignore[arg-type]
        else:
            jax.distributed.initialize(coordinator_address=cluster.coordinator, num_processes=cluster.processes,
                                       process_id=cluster.process_id, **timeouts)  # type: ignore[arg-type]
    except Exception as e:  # noqa: BLE001 - whatever JAX raises, the run fails saying who did not join
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DeviceError(f"process {cluster.process_id} could not join the other {cluster.processes - 1} "
                          f"within {cluster.join_timeout_s} s at {cluster.coordinator}: {first}") from None


def leave() -> None:
    """Leave together: without it, the process hosting the coordinator may exit first and abort the others."""
    jax.distributed.shutdown()


def gather(values: list[float]) -> list[list[float]]:
    """Every process's values, in process order; a no-op on one process."""
    if jax.process_count() == 1:
        return [values]
    from jax.experimental import multihost_utils

    table = multihost_utils.process_allgather(np.asarray(values, dtype=np.float64))
    return np.asarray(table).reshape(jax.process_count(), len(values)).tolist()


def memory_stats() -> list[dict[str, Any]]:
    """This process's allocator figures per local device (bytes_in_use, bytes_limit...; {} on the CPU)."""
    return [d.memory_stats() or {} for d in jax.local_devices()]


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
    hosts = jax.process_count()
    if hosts > 1 and shards != len(found):
        raise DeviceError(f"--shards {shards}: a run over {hosts} processes uses all {len(found)} global "
                          f"devices; give --shards {len(found)}")
    chosen = found[:shards]
    report = detect()
    if kind == "cpu":
        name = report.cpu.model
    elif kind == "tpu":
        name = (report.tpu.generation if report.tpu else None) or chosen[0].device_kind
    else:
        name = chosen[0].device_kind
    mesh = jax.sharding.Mesh(np.array(chosen), ("batch",))
    cluster = Cluster.from_env(os.environ)
    machines = 1 if cluster is None or cluster.local else hosts
    return Placement(kind=kind, name=name, replicas=len(chosen), strategy=f"Mesh({len(chosen)} x {kind})",
                     devices=chosen, handle=mesh, hosts=hosts, machines=machines)


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
