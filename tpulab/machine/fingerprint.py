"""What the machine card says of the machine beyond detection's report: the limits a container or the kernel puts
on the CPU, the OS, and the environment variables that change how fast a framework runs.

Detection (`detect.py`) already read the CPU, memory, cache and accelerators: nothing here reads them again.
Every probe reads below `root` and from `environ`, so tests point them at a fake tree; what cannot be read is
said as such ("not readable here"), never guessed.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any, Mapping

# Variables that change a run's speed: threads, XLA and oneDNN switches, which devices a framework sees.
SPEED_VARIABLES = ("XLA_FLAGS", "TF_XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                   "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "KMP_AFFINITY",
                   "KMP_BLOCKTIME", "CUDA_VISIBLE_DEVICES", "TF_GPU_ALLOCATOR", "XLA_PYTHON_CLIENT_PREALLOCATE",
                   "XLA_PYTHON_CLIENT_MEM_FRACTION", "JAX_PLATFORMS", "JAX_ENABLE_X64", "TPU_VISIBLE_CHIPS",
                   "KERAS_BACKEND", "TF_CPP_MIN_LOG_LEVEL", "OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE",
                   "TF_CPU_ALLOCATOR_USE_BFC")
UNREADABLE = "not readable here"


def physical_cores() -> int:
    """The cores this process may use (its CPU affinity: a container's, a `taskset`'s, a Ray node's), counting each
    physical core once (hyperthreads share one): what a run's threads are sized by, so that none waits on another."""
    import psutil

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(psutil.cpu_count(logical=False) or usable, usable))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def cpu_quota(root: Path = Path("/")) -> str:
    """A container's CPU limit from its cgroup: '1.5 CPUs (cgroup v2 cpu.max)', 'none (cgroup v2)', or why not."""
    v2 = _read(root / "sys/fs/cgroup/cpu.max")
    if v2:
        quota, _, period = v2.partition(" ")
        if quota == "max":
            return "none (cgroup v2 cpu.max: max)"
        if quota.isdigit() and period.isdigit() and int(period):
            return f"{int(quota) / int(period):.2f} CPUs (cgroup v2 cpu.max)"
    quota1 = _read(root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us") or _read(root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    period1 = _read(root / "sys/fs/cgroup/cpu/cpu.cfs_period_us") or _read(root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")
    if quota1 is not None:
        if quota1 == "-1":
            return "none (cgroup v1 cfs_quota_us: -1)"
        if quota1.isdigit() and period1 and period1.isdigit() and int(period1):
            return f"{int(quota1) / int(period1):.2f} CPUs (cgroup v1 cfs_quota_us)"
    return f"{UNREADABLE} (no cgroup cpu.max or cfs_quota_us)"


def governor(root: Path = Path("/")) -> str:
    """The CPU frequency governor of cpu0 ('performance', 'powersave'), or why it is unknown (a VM often has none)."""
    found = _read(root / "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    return found or f"{UNREADABLE} (no cpufreq in sysfs: usual on a VM)"


def throttling(root: Path = Path("/")) -> str:
    """Thermal throttling events the kernel counted on cpu0 since boot, or why there is no count."""
    base = root / "sys/devices/system/cpu/cpu0/thermal_throttle"
    core, package = _read(base / "core_throttle_count"), _read(base / "package_throttle_count")
    if core is None and package is None:
        return f"{UNREADABLE} (no thermal_throttle in sysfs)"
    return f"core {core or '?'}, package {package or '?'} throttling events since boot"


def huge_pages(root: Path = Path("/")) -> str:
    """The kernel's transparent huge page mode ('always', 'madvise', 'never'): a memory-bound step streams its
    weights faster from 2 MiB pages (numpy asks for them; a torch worker too, `THP_MEM_ALLOC_ENABLE`)."""
    found = _read(root / "sys/kernel/mm/transparent_hugepage/enabled")
    chosen = re.search(r"\[(\w+)\]", found or "")
    return chosen.group(1) if chosen else f"{UNREADABLE} (no transparent_hugepage in sysfs)"


def os_name() -> str:
    """'Linux 6.8.0 (glibc 2.36)'."""
    libc = " ".join(platform.libc_ver()).strip()
    return f"{platform.system()} {platform.release()}" + (f" ({libc})" if libc else "")


def speed_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """Those of `SPEED_VARIABLES` that are set, as set."""
    return {name: environ[name] for name in SPEED_VARIABLES if name in environ}


def limits(root: Path = Path("/")) -> dict[str, Any]:
    return {"cpu_quota": cpu_quota(root), "governor": governor(root), "throttling": throttling(root),
            "huge_pages": huge_pages(root)}


def machine_key(runtime: Mapping[str, Any]) -> str:
    """What makes two records' machines one kind of machine, from a record's runtime (`RuntimeReport.to_dict()`):
    the CPU's model, cores and memory and the accelerators' names, hashed. A noise floor is kept by it."""
    import hashlib
    import json

    cpu = runtime.get("cpu") or {}
    tpu = runtime.get("tpu") or {}
    what = [cpu.get("model"), cpu.get("logical_cores"), cpu.get("memory_bytes"),
            sorted(str(g.get("name")) for g in runtime.get("gpus") or []), tpu.get("generation"), tpu.get("chips")]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]
