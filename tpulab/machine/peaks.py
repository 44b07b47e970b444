"""Peak FLOP/s per device and dtype, each with its source, to judge what a run achieved.

A peak here is an upper bound: a result above it is not a win but a sign that work was
skipped or mis-counted, and is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class Peak:
    flops: float
    source: str


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


def cpu_peak(cpu: CpuInfo, dtype: str) -> Peak:
    per_cycle, unit = cpu_flops_per_cycle(cpu.features, dtype)
    if cpu.max_mhz:
        ghz, clock = cpu.max_mhz / 1000, f"{cpu.max_mhz / 1000:.2f} GHz max clock"
    elif cpu.mhz:
        ghz = cpu.mhz / 1000 * BOOST_ALLOWANCE
        clock = f"{cpu.mhz / 1000:.2f} GHz reported x {BOOST_ALLOWANCE} boost allowance (max clock unknown)"
    else:
        ghz, clock = 4.0, "4 GHz assumed (clock unknown)"
    flops = cpu.logical_cores * ghz * 1e9 * per_cycle
    return Peak(flops, f"estimate: {cpu.logical_cores} logical cores x {clock} x {per_cycle} FLOP/cycle ({unit})")


def gpu_peak(name: str, dtype: str) -> Peak | None:
    for fragment, peaks, note in GPU_PEAKS:
        if fragment.lower() in name.lower():
            return Peak(peaks[DTYPES.index(dtype)] * T, f"{GPU_SOURCE}: {fragment} {dtype}{note}")
    return None


def tpu_peak(generation: str | None) -> Peak | None:
    """Peak per TensorCore (one TensorFlow replica)."""
    gen = "v3" if generation == "v2/v3" else generation  # the pair's upper bound never flags a v3 wrongly
    if gen not in TPU_CHIP_PEAKS:
        return None
    chip, cores = TPU_CHIP_PEAKS[gen]
    return Peak(chip / cores * T, f"{TPU_SOURCE}: {gen} {chip:g} TFLOP/s per chip, {cores} core(s) per chip")


def device_peak(kind: str, name: str, dtype: str, replicas: int, cpu: CpuInfo | None,
                machines: int = 1) -> Peak | None:
    """Peak of everything a run used: each machine's whole CPU however it is split, or the sum over replicas."""
    if kind == "cpu":
        if cpu is None:
            return None
        whole = cpu_peak(cpu, dtype)
        return whole if machines == 1 else Peak(whole.flops * machines, f"{machines} machines x ({whole.source})")
    one = gpu_peak(name, dtype) if kind == "gpu" else tpu_peak(name)
    if one is None:
        return None
    if replicas == 1:
        return one
    return Peak(one.flops * replicas, f"{replicas} x ({one.source})")
