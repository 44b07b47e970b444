"""TensorFlow behind tpulab's backend protocol: devices, TPU connection, strategies, the deep probe.

Imported only inside a worker process: the logical-device split must happen before
TensorFlow's first op, which is why each run gets a fresh process.
"""

from __future__ import annotations

import os
import platform
from typing import Any

import tensorflow as tf

from tpulab.runtime.detect import detect
from tpulab.backends import BackendError, Cluster, DeviceError, Placement


def _placement(strategy: Any, kind: str, name: str, replicas: int, note: str | None = None,
               master: str | None = None) -> Placement:
    return Placement(kind=kind, name=name, replicas=replicas, strategy=type(strategy).__name__,
                     devices=list(strategy.extended.worker_devices), handle=strategy, note=note, master=master,
                     scope=strategy.scope)


MULTI_HOST = ("multi-host runs go through JAX's distributed runtime (TensorFlow's MultiWorkerMirroredStrategy "
              "fails under Keras 3 fit): use --backend jax")


def join(cluster: Cluster) -> None:
    raise BackendError(MULTI_HOST)


def leave() -> None:
    """Nothing joined, nothing to leave."""


def gather(values: list[float]) -> list[list[float]]:
    return [values]  # one process: nothing to gather


def versions() -> dict[str, str]:
    import keras
    return {"tensorflow": tf.__version__, "keras": keras.__version__, "python": platform.python_version()}


def connect_tpu(address: str | None = None):
    """The TF2 successor of the article's grpc session: resolver, connect, initialise."""
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address or "local")
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    return resolver, topology


def place(device: str, shards: int) -> Placement:
    """Pick the device for `device` (auto, cpu, gpu, tpu) and a strategy over `shards` replicas.

    Must run before any other TensorFlow op in the process.
    """
    report = detect()
    note = None
    if device == "tpu" or (device == "auto" and report.tpu is not None):
        try:
            resolver, topology = connect_tpu(report.tpu.address if report.tpu else None)
        except Exception as e:  # noqa: BLE001 - any failure here means "no usable TPU"
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if device == "tpu":
                raise DeviceError(f"TensorFlow could not initialise the TPU: {why} (see `tpulab doctor`)") from e
            note = f"a TPU was found but TensorFlow could not initialise it ({why}); see `tpulab doctor`"
        else:
            cores = topology.num_tasks * topology.num_tpus_per_task
            if shards > cores:
                raise DeviceError(f"--shards {shards} is more than the TPU's {cores} cores")
            assignment = tf.tpu.experimental.DeviceAssignment.build(topology, num_replicas=shards)
            strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=assignment)
            generation = report.tpu.generation if report.tpu else None
            return _placement(strategy, "tpu", generation or "TPU", shards, master=resolver.master())
    gpus = tf.config.list_physical_devices("GPU")
    if device == "gpu" and not gpus:
        raise DeviceError("TensorFlow sees no GPU (see `tpulab doctor`)")
    if gpus and device in ("gpu", "auto"):
        if shards > len(gpus):
            raise DeviceError(f"--shards {shards} is more than the {len(gpus)} GPU(s) TensorFlow sees")
        name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        names = [f"/gpu:{i}" for i in range(shards)]
        strategy = (tf.distribute.OneDeviceStrategy(names[0]) if shards == 1
                    else tf.distribute.MirroredStrategy(names))
        return _placement(strategy, "gpu", name, shards, note)
    return _cpu_placement(shards, report.cpu.model, note)


def _cpu_placement(shards: int, model: str, note: str | None) -> Placement:
    tf.config.set_visible_devices([], "GPU")
    cpu = tf.config.list_physical_devices("CPU")[0]
    if shards > 1:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * shards)
        names = [d.name for d in tf.config.list_logical_devices("CPU")][:shards]
        # Collective all-reduce clashes across replica counts; reduction to one device does not.
        strategy = tf.distribute.MirroredStrategy(names, cross_device_ops=tf.distribute.ReductionToOneDevice())
    else:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    return _placement(strategy, "cpu", model, shards, note)


def to_tpu_model(model, strategy):
    """What `keras_to_tpu_model` did: the same architecture and weights, rebuilt under the strategy."""
    import keras
    with strategy.scope():
        clone = keras.models.clone_model(model)
        clone.set_weights(model.get_weights())
    return clone


def probe() -> dict[str, Any]:
    """TensorFlow's own view of the machine, for `tpulab detect`, the doctor and `auto`."""
    report = detect()
    out: dict[str, Any] = dict(versions())
    out["built_with_cuda"] = tf.test.is_built_with_cuda()
    out["gpus"] = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        cc = details.get("compute_capability")
        out["gpus"].append({"name": details.get("device_name", gpu.name),
                            "compute_capability": ".".join(map(str, cc)) if cc else None})
    out["tpu_cores"] = 0
    if report.tpu is not None:
        try:
            _, topology = connect_tpu(report.tpu.address)
            out["tpu_cores"] = topology.num_tasks * topology.num_tpus_per_task
        except Exception as e:  # noqa: BLE001 - reported to the user by the doctor
            out["tpu_error"] = f"{type(e).__name__}: {e}"
    out["cpu_threads"] = os.cpu_count()
    return out
