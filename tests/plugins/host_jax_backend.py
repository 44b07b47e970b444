"""A fourth backend, as a plugin would write it: Keras on JAX, on the host's CPU only.

It exists to prove the backend contract: one module and one entry point (`tpulab.backends`),
and tpulab runs conv, its Keras workloads and sweeps on it from the command line to the store,
with no other file touched. Keras 3's NumPy backend only infers, so a backend that trains stands
on one Keras trains on: it asks tpulab's JAX backend, through the public registry, for the
worker's environment, the placement and whatever runs on JAX (conv's runner), and says in its
own words what it cannot do. Registered by the tests, never imported by tpulab itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Mapping

from tpulab.backends import Backend, DeviceError, Fitness, Placement, Runtime, get


class HostJaxBackend(Backend):
    name = "hostjax"
    title = "JAX on the host"
    short = "hj"
    distributions = ("jax",)
    install = "pip install 'jax[cpu]'"
    excludes = ("tensorflow",)  # Keras on JAX needs no TensorFlow
    keras = True  # Keras 3 trains on JAX: every Keras workload runs here through tpulab's shared runner
    keras_step_arguments = ("state", "data")  # Keras's stateless step on JAX
    multi_host = "hostjax runs in one process"
    xla_always = True

    def worker_env(self, device: str, shards: int, environ: Mapping[str, str]) -> dict[str, str]:
        return get("jax").worker_env("cpu", shards, environ)  # KERAS_BACKEND=jax, N host devices

    def fitness(self, report: Any, device: str) -> Fitness:
        return Fitness(device == "cpu", "JAX on the host drives the CPU only", preference=-1)

    def runner_for(self, workload: Any) -> Any:
        return workload.runner(get("jax"))  # what runs on JAX runs here (conv's JAX runner)

    def runtime(self) -> Runtime:
        return HostJaxRuntime(get("jax").load())


BACKEND = HostJaxBackend()


class HostJaxRuntime(Runtime):
    """JAX's runtime on the host's devices; the rest is the base's one-process answers."""

    def __init__(self, jax: Runtime) -> None:
        self.jax = jax

    def place(self, device: str, shards: int) -> Placement:
        if device not in ("auto", "cpu"):
            raise DeviceError(f"--device {device}: hostjax drives the CPU only")
        return self.jax.place("cpu", shards)

    def versions(self) -> dict[str, str]:
        return self.jax.versions()

    def keras_scope(self, placement: Placement) -> AbstractContextManager[Any]:
        return self.jax.keras_scope(placement)  # Keras's data parallelism over the host devices

    def keras_jit(self, requested: bool) -> bool | str:
        return True  # Keras on JAX compiles its step with XLA
