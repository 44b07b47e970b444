"""The framework boundary: what tpulab needs from TensorFlow or JAX, and nothing more.

This module names each backend and says, without importing any framework, whether it is
installed, how to install it, what a worker must set before the import, and which one `auto`
picks for the hardware found. Each framework's own code lives in one module beside this one
(`tensorflow.py`, `jax.py`), loaded only inside a worker, and keeps the `FrameworkBackend`
protocol. Adding a backend: a `BackendInfo` here, a module there, and a runner per workload.
"""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, cast

from tpulab.core.events import Device

if TYPE_CHECKING:
    from tpulab.runtime.detect import RuntimeReport

class BackendError(RuntimeError):
    """A backend cannot run here; the message names the command that fixes it."""


class DeviceError(RuntimeError):
    """The requested device cannot be used; the message says why and what to do."""


@dataclass
class Placement:
    """Where a run's replicas live, as a backend set them up; workloads use only these fields."""

    kind: str  # cpu, gpu, tpu
    name: str  # what peaks are looked up by: CPU model, GPU name, TPU generation
    replicas: int
    strategy: str  # how the replicas are driven, in the framework's words
    devices: list[Any]  # one framework device (or device name) per replica
    handle: Any = None  # the framework's distribution object: a tf.distribute.Strategy, a jax Mesh
    note: str | None = None  # e.g. why auto fell back to the CPU
    master: str | None = None  # a TPU session target (TensorFlow's batch_parallel)
    hosts: int = 1
    machines: int = 1
    scope: Callable[[], AbstractContextManager[Any]] = field(default=nullcontext)

    def device(self) -> Device:
        return Device(kind=self.kind, name=self.name, replicas=self.replicas, strategy=self.strategy,
                      hosts=self.hosts, machines=self.machines)


JOIN_TIMEOUT_S = 60  # every process must have joined a multi-host run by then
HEARTBEAT_TIMEOUT_S = 30  # a process silent this long fails the run (JAX's coordination service)


@dataclass(frozen=True)
class Cluster:
    """Several processes as one run: JAX's distributed runtime joins them, process 0 keeps the record.

    `coordinator` is HOST:PORT, or "auto" on a TPU pod slice, where JAX finds its peers by itself.
    `local`: every process on this machine (`--processes N`), so the CPU's peak is counted once.
    """

    coordinator: str
    processes: int
    process_id: int
    local: bool = False
    join_timeout_s: int = JOIN_TIMEOUT_S  # every process must have joined by then

    ENV = ("TPULAB_COORDINATOR", "TPULAB_NUM_PROCESSES", "TPULAB_PROCESS_ID", "TPULAB_LOCAL_PROCESSES",
           "TPULAB_JOIN_TIMEOUT_S")

    def env(self) -> dict[str, str]:
        return dict(zip(self.ENV, (self.coordinator, str(self.processes), str(self.process_id),
                                   "1" if self.local else "", str(self.join_timeout_s))))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Cluster | None:
        """The cluster a worker was started into, or None for a run on one process."""
        if not environ.get("TPULAB_COORDINATOR"):
            return None
        return cls(environ["TPULAB_COORDINATOR"], int(environ.get("TPULAB_NUM_PROCESSES") or 0),
                   int(environ.get("TPULAB_PROCESS_ID") or 0), bool(environ.get("TPULAB_LOCAL_PROCESSES")),
                   int(environ.get("TPULAB_JOIN_TIMEOUT_S") or JOIN_TIMEOUT_S))

    @classmethod
    def tpu_pod(cls, environ: Mapping[str, str]) -> Cluster | None:
        """A TPU pod slice's worker (several hosts in TPU_WORKER_HOSTNAMES): JAX discovers the rest."""
        hosts = [h for h in environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
        if len(hosts) < 2:
            return None
        return cls("auto", len(hosts), int(environ.get("TPU_WORKER_ID") or 0))


class FrameworkBackend(Protocol):
    """What each framework module provides, inside a worker."""

    def join(self, cluster: Cluster) -> None:
        """Join the other processes of a multi-host run; before anything else touches a device."""

    def leave(self) -> None:
        """Leave it together, after the last step (every process gets here after the same step)."""

    def place(self, device: str, shards: int) -> Placement: ...

    def versions(self) -> dict[str, str]: ...

    def probe(self) -> dict[str, Any]: ...

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every process's `values`, in process order (a collective: every process calls it)."""


@dataclass(frozen=True)
class BackendInfo:
    name: str
    title: str
    distributions: tuple[str, ...]  # any one installed means the framework is there
    install: str  # the command that installs it
    excludes: tuple[str, ...] = ()  # frameworks its worker must never load (they would compete for a TPU)

    def installed(self, packages: Mapping[str, str | None]) -> bool:
        return any(packages.get(d) for d in self.distributions)

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        """What the worker's environment must hold before the framework is imported."""
        env = {"KERAS_BACKEND": self.name}
        if self.name == "tensorflow":
            env["TF_CPP_MIN_LOG_LEVEL"] = environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
        elif self.name == "jax" and device == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
            flags = [f for f in environ.get("XLA_FLAGS", "").split()
                     if not f.startswith("--xla_force_host_platform_device_count")]
            env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={max(1, shards)}"])
        return env

    def load(self) -> FrameworkBackend:
        """The framework module (imports the framework: call it in a worker only, before anything else).

        Frameworks it excludes become unimportable in this process: an attempt raises ImportError,
        which Keras and others take as "not installed".
        """
        for name in self.excludes:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
        return cast(FrameworkBackend, importlib.import_module(f"{__name__}.{self.name}"))


BACKENDS: dict[str, BackendInfo] = {
    "tensorflow": BackendInfo("tensorflow", "TensorFlow", ("tensorflow", "tensorflow-cpu", "tensorflow-tpu"),
                              "pip install 'tensorflow>=2.16'"),
    # Keras reaches for TensorFlow when it is installed (to seed it, for tf.data); on a TPU the first
    # framework to initialise it wins (jax-ml/jax #13260), so a JAX worker keeps TensorFlow out.
    "jax": BackendInfo("jax", "JAX", ("jax",), "pip install 'tpulab[jax]'  # or: pip install 'jax[cpu]'",
                       excludes=("tensorflow",)),
}
CHOICES = ("auto", *BACKENDS)


def tensorflow_drives_tpu(report: RuntimeReport) -> tuple[bool, str]:
    """Whether TensorFlow can use the TPU found, and if not, why (framework-free)."""
    tf = report.frameworks.get("tensorflow") or {}
    if tf.get("tpu_cores"):
        return True, "TensorFlow initialised the TPU"
    if "tpu_cores" in tf or tf.get("tpu_error"):
        return False, "TensorFlow could not initialise the TPU" + (f" ({tf['tpu_error'].splitlines()[0][:120]})"
                                                                    if tf.get("tpu_error") else "")
    pk = report.packages
    if not BACKENDS["tensorflow"].installed(pk):
        return False, "TensorFlow is not installed"
    if not (pk.get("tensorflow-tpu") or pk.get("libtpu") or pk.get("libtpu-nightly")):
        return False, "TensorFlow has no TPU runtime (tensorflow-tpu / libtpu) installed"
    return True, "TensorFlow and its TPU runtime are installed"


def choose(requested: str, report: RuntimeReport, device: str = "auto") -> tuple[str, str]:
    """The backend a run uses, and why: `auto` keeps TensorFlow where it can drive the device."""
    pk = report.packages
    if requested != "auto":
        info = BACKENDS[requested]
        if not info.installed(pk):
            raise BackendError(f"--backend {requested}: {info.title} is not installed; install it with: {info.install}")
        return requested, "asked for"
    tf_ok = BACKENDS["tensorflow"].installed(pk)
    jax_ok = BACKENDS["jax"].installed(pk)
    wants_tpu = device == "tpu" or (device == "auto" and report.tpu is not None)
    if wants_tpu and report.tpu is not None:
        drives, why = tensorflow_drives_tpu(report)
        if drives and tf_ok:
            return "tensorflow", f"{why}"
        if jax_ok:
            return "jax", f"a TPU is present and TensorFlow cannot drive it ({why}); JAX can"
        raise BackendError(f"a TPU is present, TensorFlow cannot drive it ({why}) and JAX is not installed; "
                           "install it with: pip install 'jax[tpu]'")
    if tf_ok:
        return "tensorflow", "TensorFlow is installed and drives this device (the article's framework)"
    if jax_ok:
        return "jax", "TensorFlow is not installed"
    raise BackendError("neither TensorFlow nor JAX is installed; install one with: "
                       f"{BACKENDS['tensorflow'].install} (or {BACKENDS['jax'].install.split('  #')[0]})")


def worker_env(backend: str, device: str, shards: int) -> dict[str, str]:
    return BACKENDS[backend].worker_env(device, shards, os.environ)
