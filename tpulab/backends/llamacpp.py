"""llama.cpp: decode only, on the CPU, through xllamacpp, its Python bindings (`tpulab[llamacpp]`).

Of the two bindings on PyPI, xllamacpp ships llama.cpp prebuilt: a wheel for the CPU (abi3, manylinux 2.17 on x86_64
and aarch64, macOS) that installs in seconds; llama-cpp-python is a source distribution that compiles llama.cpp at
install time (minutes on 2 cores, with a compiler and CMake), which every CI run and every user would pay. Its wheel
is built for any x86-64 CPU, not this one (no -march=native: AVX2 and FMA, no AVX-512): `versions` says which of
ggml's CPU features it uses. It wraps llama.cpp's server, whose streamed results carry each token's timings from
llama.cpp's own clock: the decode runner (`tpulab.workloads.decode.llamacpp`) reads its times there.

The declaration is framework-free; the runtime imports xllamacpp in a worker only. `auto` never takes it: it runs
one workload, where asked for by name.
"""

from __future__ import annotations

import platform
import re
from typing import Any, Mapping

from tpulab.backends import Backend, DeviceError, Placement, Runtime
from tpulab.machine.detect import detect

NO_SHARDS = "llama.cpp runs a run's sequences together in one process here: use --shards 1, or --backend jax to shard"


class LlamaCppBackend(Backend):
    name = "llamacpp"
    title = "llama.cpp"
    short = "llama.cpp"
    distributions = ("xllamacpp",)
    packages = ("gguf",)  # what writes the model it reads: installed with it (`installed`)
    install = "pip install 'tpulab[llamacpp]'  # xllamacpp, llama.cpp's prebuilt CPU wheel, and gguf"
    chosen_by_auto = False  # it runs decode alone: where asked for (--backend llamacpp)
    reference = ("the tokens/s people get from llama.cpp on this machine (Ollama and LM Studio are built on it), at "
                 "float32 and at the 8- and 4-bit weights CPU users run")
    multi_host = "llama.cpp runs in one process here: use --backend jax for a run over several processes"
    no_shards = NO_SHARDS
    first_call = "load + warm-up"  # nothing is traced or compiled: the first completion maps the weights and warms up

    def installed(self, packages: Mapping[str, str | None]) -> bool:
        """The bindings and gguf, which writes the model they read: the extra installs both."""
        return all(packages.get(d) for d in (*self.distributions, *self.packages))

    def runtime(self) -> Runtime:
        import xllamacpp  # noqa: F401 - the bindings, first, in the worker

        return LlamaCppRuntime()


BACKEND = LlamaCppBackend()


# --- the bindings' side: in a worker only --------------------------------------------------------
def cpu_features(info: str) -> str:
    """The CPU features ggml was built to use, from llama.cpp's system info ("CPU : SSE3 = 1 | AVX = 1 | ...")."""
    return " ".join(name for name, on in re.findall(r"(\w+) = (\d)", info) if on == "1")


class LlamaCppRuntime(Runtime):
    """One process on the CPU: llama.cpp's threads, its server's clock; no profiler, no compiler."""

    def versions(self) -> dict[str, str]:
        from importlib import metadata

        import xllamacpp

        return {"xllamacpp": metadata.version("xllamacpp"), "gguf": metadata.version("gguf"),
                "ggml_cpu": cpu_features(xllamacpp.get_system_info()), "python": platform.python_version()}

    def place(self, device: str, shards: int) -> Placement:
        if shards > 1:
            raise DeviceError(f"--shards {shards}: {NO_SHARDS}")
        if device not in ("auto", "cpu"):
            raise DeviceError(f"--device {device}: tpulab runs llama.cpp on the CPU (its prebuilt wheel): use "
                              "--device cpu")
        return Placement(kind="cpu", name=detect().cpu.model, replicas=1, strategy="llama.cpp", devices=["cpu"])

    def probe(self) -> dict[str, Any]:
        """llama.cpp's view of the machine, for `tpulab detect` and the doctor: its devices, and the CPU features
        its build uses."""
        import xllamacpp

        out: dict[str, Any] = dict(self.versions())
        out["devices"] = [d["description"] for d in xllamacpp.get_device_info()]
        out["gpus"], out["tpu_cores"] = [], 0
        out["also"] = f"ggml built for {out['ggml_cpu']}"
        return out
