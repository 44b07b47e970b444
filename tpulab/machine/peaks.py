"""Peak FLOP/s per device and dtype, and the spec memory bandwidth, each with its source, to judge
what a run achieved.

A peak here is an upper bound: a result above it is not a win but a sign that work was
skipped or mis-counted, and is flagged. The memory bandwidth is the vendor's figure (a decode
step reads every weight: its bytes per second are set against it); where the vendor's own pages
give two values, both are kept and the source says which page gives which.
"""

from __future__ import annotations

import re
from tpulab.base.ceilings import Sourced
from tpulab.machine.detect import CpuInfo

T = 1e12
TPU_SOURCE = "Google Cloud TPU system architecture docs (bf16 per chip; float32 matmuls run as bf16 passes by default)"
GPU_SOURCE = "NVIDIA datasheet, dense"
TF32_NOTE = "; float32 uses TensorFloat-32, TensorFlow's default on Ampere and newer"

# bf16 TFLOP/s per chip and TensorCores TensorFlow sees per chip
TPU_CHIP_PEAKS = {"v2": (45.0, 2), "v3": (123.0, 2), "v4": (275.0, 1), "v5e": (197.0, 1),
                  "v5p": (459.0, 1), "v6e": (918.0, 1)}

# name fragment -> (float32, bfloat16, float16) TFLOP/s per GPU, most specific first
GPU_PEAKS: list[tuple[str, tuple[float, float, float], str]] = [
    ("H200", (494.7, 989.4, 989.4), TF32_NOTE),
    ("H100 PCIe", (378.0, 756.0, 756.0), TF32_NOTE),
    ("H100", (494.7, 989.4, 989.4), TF32_NOTE),
    ("A100", (156.0, 312.0, 312.0), TF32_NOTE),
    ("L4", (60.0, 121.0, 121.0), TF32_NOTE),
    ("V100", (15.7, 15.7, 125.0), "; no bf16 tensor cores"),
    ("T4", (8.1, 8.1, 65.0), "; no bf16 tensor cores"),
    ("P100", (10.6, 10.6, 21.2), ""),
    ("K80", (4.37, 4.37, 4.37), " (one GK210 of the board, boost clock)"),
]
DTYPES = ("float32", "bfloat16", "float16")
BOOST_ALLOWANCE = 1.5  # when the maximum clock is unknown (VMs), the reported clock times this


G = 1e9
NVIDIA_DATASHEET_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
NVIDIA_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
NVIDIA_H100_PCIE_BRIEF = "NVIDIA H100 PCIe product brief PB-11133-001 ('greater than 2,000 GBps')"
NVIDIA_V100 = ("https://images.nvidia.com/content/technologies/volta/pdf/"
               "volta-v100-datasheet-update-us-1165301-r5.pdf")

# (words the GPU's name must hold, as whole words, any case; bytes/s; where it is said; the other value
# the vendor's own pages give, or None), most specific first
GPU_BANDWIDTH: list[tuple[tuple[str, ...], float, str, float | None]] = [
    (("H200",), 4800 * G, "https://www.nvidia.com/en-us/data-center/h200/", None),
    (("H100", "PCIe"), 2000 * G, f"{NVIDIA_H100} (H100 PCIe, 2TB/s); {NVIDIA_H100_PCIE_BRIEF}", None),
    (("H100", "NVL"), 3900 * G, f"{NVIDIA_H100} (H100 NVL)", None),
    (("H100",), 3350 * G, f"{NVIDIA_H100} (H100 SXM)", None),
    (("A100", "80GB", "PCIe"), 1935 * G, f"{NVIDIA_DATASHEET_A100} (A100 80GB PCIe)", None),
    (("A100", "80GB"), 2039 * G, f"{NVIDIA_DATASHEET_A100} (A100 80GB SXM)", None),
    (("A100",), 1555 * G, f"{NVIDIA_DATASHEET_A100} (A100 40GB, PCIe and SXM)", None),
    (("L4",), 300 * G, "https://www.nvidia.com/en-us/data-center/l4/", None),
    (("T4",), 320 * G, "https://www.nvidia.com/en-us/data-center/tesla-t4/ ('320+ GB/s')", None),
    (("V100S",), 1134 * G, f"{NVIDIA_V100} (V100S PCIe)", None),
    (("V100",), 900 * G, f"{NVIDIA_V100} (V100 SXM2 and PCIe)", None),
]
TPU_DOCS = "https://cloud.google.com/tpu/docs/"
GIB = float(1 << 30)
# per chip: bytes/s, where it is said, the other value the vendor's own pages give (None: they agree)
TPU_BANDWIDTH: dict[str, tuple[float, str, float | None]] = {
    "v4": (1200 * G, f"{TPU_DOCS}v4 (HBM2 32 GiB, 1200 GBps)", None),
    "v5e": (819 * G, f"{TPU_DOCS}v5e: its key chip specifications say 819 GBps, its longer "
            "specification table 800 GiBps (859 GB/s)", 800 * GIB),
    "v5p": (2765 * G, f"{TPU_DOCS}v5p (HBM2e 95 GB, 2765 GBps)", None),
    "v6e": (1638 * G, f"{TPU_DOCS}v6e (1638 GBps per chip)", None),
}


def gpu_bandwidth(name: str) -> Sourced | None:
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    for needed, value, source, other in GPU_BANDWIDTH:
        if all(w.lower() in words for w in needed):
            return Sourced(value, f"NVIDIA: {source}", other=other)
    return None


def tpu_bandwidth(generation: str | None) -> Sourced | None:
    """Per TensorCore (one TensorFlow replica), as the peaks are."""
    gen = "v3" if generation == "v2/v3" else generation
    if gen not in TPU_BANDWIDTH or gen not in TPU_CHIP_PEAKS:
        return None
    value, source, other = TPU_BANDWIDTH[gen]
    cores = TPU_CHIP_PEAKS[gen][1]
    per_core = f", {cores} cores per chip" if cores > 1 else ""
    return Sourced(value / cores, f"Google Cloud: {source}{per_core}", other=other / cores if other else None)


def spec_bandwidth(kind: str, name: str, replicas: int = 1) -> Sourced | None:
    """The vendor's memory bandwidth of everything a run used (None on a CPU: no vendor's figure fits a
    machine's DIMMs; the measured ceiling is what a CPU run is set against)."""
    one = gpu_bandwidth(name) if kind == "gpu" else tpu_bandwidth(name) if kind == "tpu" else None
    return one.times(replicas) if one else None


def cpu_flops_per_cycle(features: list[str], dtype: str) -> tuple[int, str]:
    """FLOP per cycle per core at the widest vector unit the CPU reports (two FMA pipes)."""
    f = set(features)
    if dtype == "bfloat16" and "amx_bf16" in f:
        return 2048, "AMX bf16"
    if dtype == "bfloat16" and "avx512_bf16" in f:
        return 128, "AVX-512 BF16"
    if "avx512f" in f:
        return 64, "AVX-512 FMA"
    if "avx2" in f and "fma" in f:
        return 32, "AVX2 FMA"
    if "sve" in f or "asimd" in f:
        return 32, "NEON/SVE FMA"
    if "avx" in f:
        return 16, "AVX"
    return 8, "SSE"


def cpu_peak(cpu: CpuInfo, dtype: str) -> Sourced:
    per_cycle, unit = cpu_flops_per_cycle(cpu.features, dtype)
    if cpu.max_mhz:
        ghz, clock = cpu.max_mhz / 1000, f"{cpu.max_mhz / 1000:.2f} GHz max clock"
    elif cpu.mhz:
        ghz = cpu.mhz / 1000 * BOOST_ALLOWANCE
        clock = f"{cpu.mhz / 1000:.2f} GHz reported x {BOOST_ALLOWANCE} boost allowance (max clock unknown)"
    else:
        ghz, clock = 4.0, "4 GHz assumed (clock unknown)"
    flops = cpu.logical_cores * ghz * 1e9 * per_cycle
    return Sourced(flops, f"estimate: {cpu.logical_cores} logical cores x {clock} x {per_cycle} FLOP/cycle ({unit})")


def gpu_peak(name: str, dtype: str) -> Sourced | None:
    for fragment, peaks, note in GPU_PEAKS:
        if fragment.lower() in name.lower():
            return Sourced(peaks[DTYPES.index(dtype)] * T, f"{GPU_SOURCE}: {fragment} {dtype}{note}")
    return None


def tpu_peak(generation: str | None) -> Sourced | None:
    """Peak per TensorCore (one TensorFlow replica)."""
    gen = "v3" if generation == "v2/v3" else generation  # the pair's upper bound never flags a v3 wrongly
    if gen not in TPU_CHIP_PEAKS:
        return None
    chip, cores = TPU_CHIP_PEAKS[gen]
    return Sourced(chip / cores * T, f"{TPU_SOURCE}: {gen} {chip:g} TFLOP/s per chip, {cores} core(s) per chip")


def device_peak(kind: str, name: str, dtype: str, replicas: int, cpu: CpuInfo | None,
                machines: int = 1) -> Sourced | None:
    """Peak of everything a run used: each machine's whole CPU however it is split, or the sum over replicas."""
    if kind == "cpu":
        if cpu is None:
            return None
        whole = cpu_peak(cpu, dtype)
        return whole.times(machines, "machines")
    one = gpu_peak(name, dtype) if kind == "gpu" else tpu_peak(name)
    if one is None:
        return None
    return one.times(replicas)
