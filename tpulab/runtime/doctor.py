"""Why an accelerator that is present is not used, in one sentence, and the command that fixes it.

Each verdict names the framework it is about (TensorFlow, JAX, or none), and every fix command
names versions that are published: `tensorflow-tpu` stops at `TF_TPU_LATEST`, so a fix that pins
it to a newer TensorFlow could never succeed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from tpulab.runtime.detect import RuntimeReport

# The newest tensorflow-tpu on PyPI: 2.20.0 (published 2025-08; still the newest on 2026-11-30 by
# `pip index versions tensorflow-tpu`). It is a whole TensorFlow build and pulls libtpu from PyPI.
TF_TPU_LATEST = "2.20.0"
JAX_TPU_INSTALL = "pip install -U 'jax[tpu]'"
JAX_CUDA_INSTALL = "pip install -U 'jax[cuda12]'"
USE_JAX = "or run on JAX, which drives it as shipped: --backend jax"


@dataclass(frozen=True)
class Verdict:
    level: str  # ok, info, warn, error
    device: str  # cpu, gpu, tpu
    message: str
    fix: str | None = None
    framework: str = ""  # tensorflow, jax, or "" when about the machine

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def tf_tpu_install(installed_tf: str | None) -> str:
    """A TensorFlow with TPU support that exists: the installed version if tensorflow-tpu has it, else the newest."""
    version = installed_tf if installed_tf and _version_tuple(installed_tf) <= _version_tuple(TF_TPU_LATEST) \
        else TF_TPU_LATEST
    remove = "pip uninstall -y tensorflow && " if installed_tf else ""
    return f"{remove}pip install tensorflow-tpu=={version}"


def diagnose(report: RuntimeReport) -> list[Verdict]:
    out: list[Verdict] = []
    out += _tpu(report)
    out += _gpu(report)
    if not report.tpu and not report.gpu_hardware:
        fix = "Colab: Runtime > Change runtime type > a GPU or TPU" if report.colab else None
        out.append(Verdict("info", "cpu", "No GPU or TPU found: runs will use the CPU, as the article's first "
                           "'TPU' timing unknowingly did.", fix))
    return out


def _tpu(report: RuntimeReport) -> list[Verdict]:
    tpu = report.tpu
    if tpu is None:
        return []
    gen = tpu.generation or "unknown generation"
    out: list[Verdict] = []
    if tpu.address and tpu.address.startswith("grpc://"):
        out.append(Verdict("warn", "tpu", f"COLAB_TPU_ADDR is set: a legacy TPU Node at {tpu.address}, which Colab "
                           "retired in 2024; tpulab connects with TPUClusterResolver(tpu=that address), and if that "
                           "fails, switch to a TPU VM runtime.", "Colab: Runtime > Change runtime type > v5e-1 TPU",
                           "tensorflow"))
    out += _tpu_jax(report, gen)
    out += _tpu_tensorflow(report, gen, jax_drives=any(v.level == "ok" for v in out if v.framework == "jax"))
    return out


def _tpu_jax(report: RuntimeReport, gen: str) -> list[Verdict]:
    if not report.packages.get("jax"):
        return []
    view = report.frameworks.get("jax")
    if view is None:
        return [Verdict("info", "tpu", f"TPU {gen} found and JAX {report.packages['jax']} is installed; its view "
                        "is checked when a run starts (or run `tpulab detect`).", framework="jax")]
    if view.get("tpu_cores"):
        return [Verdict("ok", "tpu", f"TPU {gen} in use by JAX: {view['tpu_cores']} device(s).", framework="jax")]
    why = view.get("error") or f"JAX's platform is {view.get('platform', 'cpu')}: libtpu is missing or does not match"
    return [Verdict("error", "tpu", f"TPU {gen} found, but JAX cannot use it: {why.splitlines()[0][:200]}",
                    JAX_TPU_INSTALL, "jax")]


def _tpu_tensorflow(report: RuntimeReport, gen: str, jax_drives: bool) -> list[Verdict]:
    pk = report.packages
    tf = report.frameworks.get("tensorflow") or {}
    installed = pk.get("tensorflow") or pk.get("tensorflow-tpu")
    level = "warn" if jax_drives else "error"  # with JAX driving the TPU, tpulab still runs
    alt = "; tpulab runs on JAX here (--backend auto picks it)" if jax_drives else f"; {USE_JAX}" if pk.get("jax") else ""
    if tf.get("tpu_cores"):
        return [Verdict("ok", "tpu", f"TPU {gen} in use by TensorFlow: {tf['tpu_cores']} core(s).",
                        framework="tensorflow")]
    error = tf.get("tpu_error") or ""
    if "ConfigureDistributedTPU" in error:
        return [Verdict(level, "tpu", f"TPU {gen} found, but this TensorFlow build has no TPU kernels (No OpKernel "
                        f"registered for ConfigureDistributedTPU): it is the CPU/GPU build{alt}.",
                        tf_tpu_install(pk.get("tensorflow")), "tensorflow")]
    if not installed:
        if jax_drives or pk.get("jax"):
            return [Verdict("info", "tpu", f"TPU {gen}: TensorFlow is not installed (Colab TPU runtimes no longer ship "
                            "it); tpulab runs on JAX here. For the TensorFlow path too:", tf_tpu_install(None),
                            "tensorflow")]
        return [Verdict("error", "tpu", f"TPU {gen} found, but neither JAX nor TensorFlow is installed: install "
                        "JAX (what TPUs run today).", JAX_TPU_INSTALL, "jax")]
    if pk.get("tensorflow-tpu") and pk.get("tensorflow") and pk["tensorflow-tpu"] != pk["tensorflow"]:
        return [Verdict(level, "tpu", f"TPU {gen} found, but tensorflow {pk['tensorflow']} and tensorflow-tpu "
                        f"{pk['tensorflow-tpu']} differ: TensorFlow cannot load its TPU runtime{alt}.",
                        tf_tpu_install(pk.get("tensorflow")), "tensorflow")]
    if not (pk.get("libtpu") or pk.get("libtpu-nightly") or pk.get("tensorflow-tpu")):
        newest = (f" (tensorflow-tpu stops at {TF_TPU_LATEST})"
                  if _version_tuple(installed) > _version_tuple(TF_TPU_LATEST) else "")
        return [Verdict(level, "tpu", f"TPU {gen} found, but TensorFlow {installed} has no TPU runtime (libtpu) "
                        f"installed{newest}{alt}.", tf_tpu_install(pk.get("tensorflow")), "tensorflow")]
    if error:
        first = error.strip().splitlines()[0][:200]
        return [Verdict(level, "tpu", f"TPU {gen} found, but TensorFlow could not initialise it: {first}{alt}",
                        "sudo lsof -w /dev/accel* /dev/vfio/*  # another process may hold the TPU; stop it",
                        "tensorflow")]
    if "tensorflow" not in report.frameworks:
        return [Verdict("info", "tpu", f"TPU {gen} found ({', '.join(report.tpu.found_by) if report.tpu else ''}); "
                        "TensorFlow's view is checked when a run starts (or run `tpulab detect`).",
                        framework="tensorflow")]
    return []


def _gpu(report: RuntimeReport) -> list[Verdict]:
    if not report.gpu_hardware and not report.gpus:
        return []
    names = ", ".join(g.name for g in report.gpus) or f"{report.gpu_hardware} NVIDIA GPU(s)"
    if not report.gpus:
        return [Verdict("error", "gpu", f"{names} on the PCI bus, but no NVIDIA driver is loaded.",
                        "sudo apt-get install -y nvidia-driver  # then reboot; check with nvidia-smi")]
    return _gpu_tensorflow(report, names) + _gpu_jax(report, names)


def _gpu_tensorflow(report: RuntimeReport, names: str) -> list[Verdict]:
    pk = report.packages
    if not (pk.get("tensorflow") or pk.get("tensorflow-cpu")):
        return []
    tf = report.frameworks.get("tensorflow")
    if tf is None:
        if not (pk.get("nvidia-cudnn-cu12") or pk.get("nvidia-cuda-runtime-cu12")):
            return [Verdict("warn", "gpu", f"{names} found, but TensorFlow's CUDA libraries are not installed "
                            "from pip; unless CUDA and cuDNN are installed system-wide, TensorFlow runs will use "
                            "the CPU.", "pip install 'tensorflow[and-cuda]'", "tensorflow")]
        return []
    if tf.get("gpus"):
        return [Verdict("ok", "gpu", f"{len(tf['gpus'])} GPU(s) in use by TensorFlow: {names}.",
                        framework="tensorflow")]
    if not tf.get("built_with_cuda"):
        return [Verdict("error", "gpu", f"{names} found, but this TensorFlow build is CPU-only.",
                        "pip uninstall -y tensorflow-cpu; pip install 'tensorflow[and-cuda]'", "tensorflow")]
    return [Verdict("error", "gpu", f"{names} found, but TensorFlow sees no GPU: its CUDA libraries are missing "
                    "or do not match the driver.", "pip install 'tensorflow[and-cuda]'", "tensorflow")]


def _gpu_jax(report: RuntimeReport, names: str) -> list[Verdict]:
    view = report.frameworks.get("jax")
    if not report.packages.get("jax") or view is None:
        return []
    if view.get("gpus"):
        return [Verdict("ok", "gpu", f"{len(view['gpus'])} GPU(s) in use by JAX: {names}.", framework="jax")]
    return [Verdict("warn", "gpu", f"{names} found, but JAX sees no GPU (platform {view.get('platform', '?')}): "
                    "its CUDA build is not installed.", JAX_CUDA_INSTALL, "jax")]
