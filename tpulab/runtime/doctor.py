"""Why an accelerator that is present is not used, in one sentence, and the command that fixes it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .detect import RuntimeReport

LIBTPU_INDEX = "https://storage.googleapis.com/libtpu-tf-releases/index.html"


@dataclass(frozen=True)
class Verdict:
    level: str  # ok, info, warn, error
    device: str  # cpu, gpu, tpu
    message: str
    fix: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _tf_tpu_install(report: RuntimeReport) -> str:
    version = report.packages.get("tensorflow") or report.packages.get("tensorflow-tpu")
    pin = f"=={version}" if version else ""
    return f"pip install tensorflow-tpu{pin} -f {LIBTPU_INDEX}"


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
    tf = report.tensorflow or {}
    pk = report.packages
    out: list[Verdict] = []
    if tpu.address and tpu.address.startswith("grpc://"):
        out.append(Verdict("warn", "tpu", f"COLAB_TPU_ADDR is set: a legacy TPU Node at {tpu.address}, which Colab "
                           "retired in 2024; tpulab connects with TPUClusterResolver(tpu=that address), and if that "
                           "fails, switch to a TPU VM runtime.", "Colab: Runtime > Change runtime type > v5e-1 TPU"))
    if tf.get("tpu_cores"):
        out.append(Verdict("ok", "tpu", f"TPU {gen} in use by TensorFlow: {tf['tpu_cores']} core(s)."))
        return out
    error = tf.get("tpu_error") or ""
    if "ConfigureDistributedTPU" in error:
        out.append(Verdict("error", "tpu", f"TPU {gen} found, but this TensorFlow build has no TPU kernels "
                           "(No OpKernel registered for ConfigureDistributedTPU): it is the CPU/GPU build.",
                           f"pip uninstall -y tensorflow && {_tf_tpu_install(report)}"))
    elif not pk.get("tensorflow") and not pk.get("tensorflow-tpu"):
        out.append(Verdict("error", "tpu", f"TPU {gen} found, but TensorFlow is not installed (Colab TPU runtimes "
                           "no longer ship it).", _tf_tpu_install(report)))
    elif pk.get("tensorflow-tpu") and pk.get("tensorflow") and pk["tensorflow-tpu"] != pk["tensorflow"]:
        out.append(Verdict("error", "tpu", f"TPU {gen} found, but tensorflow {pk['tensorflow']} and tensorflow-tpu "
                           f"{pk['tensorflow-tpu']} differ: TensorFlow cannot load its TPU runtime.",
                           f"pip install tensorflow-tpu=={pk['tensorflow']} -f {LIBTPU_INDEX}"))
    elif not (pk.get("libtpu") or pk.get("libtpu-nightly") or pk.get("tensorflow-tpu")):
        out.append(Verdict("error", "tpu", f"TPU {gen} found, but TensorFlow has no TPU runtime (libtpu) "
                           "installed, so runs will use the CPU.", _tf_tpu_install(report)))
    elif error:
        first = error.strip().splitlines()[0][:200]
        out.append(Verdict("error", "tpu", f"TPU {gen} found, but TensorFlow could not initialise it: {first}",
                           "sudo lsof -w /dev/accel* /dev/vfio/*  # another process may hold the TPU; stop it"))
    elif report.tensorflow is None:
        out.append(Verdict("info", "tpu", f"TPU {gen} found ({', '.join(tpu.found_by)}); TensorFlow's view is "
                           "checked when a run starts (or run `tpulab detect`)."))
    return out


def _gpu(report: RuntimeReport) -> list[Verdict]:
    if not report.gpu_hardware and not report.gpus:
        return []
    tf = report.tensorflow
    pk = report.packages
    names = ", ".join(g.name for g in report.gpus) or f"{report.gpu_hardware} NVIDIA GPU(s)"
    if not report.gpus:
        return [Verdict("error", "gpu", f"{names} on the PCI bus, but no NVIDIA driver is loaded.",
                        "sudo apt-get install -y nvidia-driver  # then reboot; check with nvidia-smi")]
    if tf is None:
        if not (pk.get("nvidia-cudnn-cu12") or pk.get("nvidia-cuda-runtime-cu12")):
            return [Verdict("warn", "gpu", f"{names} found, but TensorFlow's CUDA libraries are not installed "
                            "from pip; unless CUDA and cuDNN are installed system-wide, runs will use the CPU.",
                            "pip install 'tensorflow[and-cuda]'")]
        return []
    if tf.get("gpus"):
        return [Verdict("ok", "gpu", f"{len(tf['gpus'])} GPU(s) in use by TensorFlow: {names}.")]
    if not tf.get("built_with_cuda"):
        return [Verdict("error", "gpu", f"{names} found, but this TensorFlow build is CPU-only.",
                        "pip uninstall -y tensorflow-cpu; pip install 'tensorflow[and-cuda]'")]
    return [Verdict("error", "gpu", f"{names} found, but TensorFlow sees no GPU: its CUDA libraries are missing "
                    "or do not match the driver.", "pip install 'tensorflow[and-cuda]'")]
