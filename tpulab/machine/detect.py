"""Fast runtime probes: CPU, GPUs and TPUs from the environment, /proc, /dev and PCI sysfs.

Nothing here imports a framework, so `tpulab detect --fast`, the CLI's validation and the
TUI's first paint never wait for one. Each framework's own view (probed in a worker) joins
the report under `frameworks`. Every probe reads below `root` and from `environ`, so
tests point them at a fake tree.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Protocol

from tpulab.base import plugins

CPU_MAX_SHARDS = 8  # logical CPU devices a run may split the CPU into

# PCI device ids of Google's TPU chips (vendor 0x1ae0) -> (generation, TensorCores per chip as TF sees them)
TPU_PCI_IDS = {
    "0x0027": ("v2/v3", 2),
    "0x005e": ("v4", 1),
    "0x0062": ("v5p", 1),
    "0x0063": ("v5e", 1),
    "0x006f": ("v6e", 1),
}
TPU_TYPE_GENERATIONS = {"v2": "v2", "v3": "v3", "v4": "v4", "v5p": "v5p", "v5litepod": "v5e", "v5e": "v5e", "v6e": "v6e"}
CORES_PER_CHIP = {"v2": 2, "v3": 2, "v2/v3": 2}
NVIDIA_VENDOR = "0x10de"
GOOGLE_VENDOR = "0x1ae0"


class Drives(Protocol):
    """What detection reads of a registered backend (`tpulab.backends.Backend`): the packages it names."""

    distributions: tuple[str, ...]
    tpu_packages: tuple[str, ...]
    packages: tuple[str, ...]


def backends() -> list[Drives]:
    """The registered backends as the plugin loader finds them: their package names are data here,
    below the backends' layer."""
    return [obj for obj, _ in plugins.discover(plugins.BACKENDS)[0].values()]


@dataclass
class CpuInfo:
    model: str
    logical_cores: int
    features: list[str]
    memory_bytes: int | None
    mhz: float | None
    max_mhz: float | None
    llc_bytes: int | None = None  # the last-level cache, all its instances together (None: sysfs has none)


@dataclass
class GpuInfo:
    name: str
    memory_bytes: int | None = None
    compute_capability: str | None = None
    driver: str | None = None
    found_by: str = ""


@dataclass
class TpuInfo:
    generation: str | None
    chips: int
    cores: int
    found_by: list[str]
    accelerator_type: str | None = None
    address: str | None = None  # legacy TPU Node (COLAB_TPU_ADDR) or TPU_NAME


@dataclass
class RuntimeReport:
    """The machine a run meets, as detected: its CPU, accelerators, Python and packages (and, once probed,
    each framework's view). Not a backend's `Runtime`, which is the framework's session inside a worker."""

    cpu: CpuInfo
    gpus: list[GpuInfo]
    tpu: TpuInfo | None
    colab: bool
    python: str
    packages: dict[str, str | None]
    gpu_hardware: int = 0  # NVIDIA devices seen on the PCI bus, with or without a driver
    # Each framework's own view, by backend name, filled by its deep probe (in a worker):
    # {"tpu_cores", "gpus": [{"name", ...}], versions...} or {"error": ...}.
    frameworks: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def accelerated(self) -> bool:
        """Whether a GPU or TPU was found (a GPU without its driver too): without one, each framework's own view
        (seconds to probe) sees the CPU these probes saw, and no verdict of the doctor reads it."""
        return bool(self.gpus or self.tpu or self.gpu_hardware)

    def _views(self) -> list[dict[str, Any]]:
        return [v for v in self.frameworks.values() if "error" not in v]

    @property
    def default_device(self) -> str:
        """The device a run with --device auto will use: the best any installed framework can drive."""
        views = self._views()
        if views:
            if any(v.get("tpu_cores") for v in views):
                return "tpu"
            return "gpu" if any(v.get("gpus") for v in views) else "cpu"
        if self.tpu and any(self.packages.get(name) for b in backends() for name in b.tpu_packages):
            return "tpu"
        return "gpu" if self.gpus else "cpu"

    def max_shards(self) -> dict[str, int]:
        views = self._views()
        tpu_cores = max((v.get("tpu_cores") or 0 for v in views), default=0) or (self.tpu.cores if self.tpu else 0)
        seen = [len(v["gpus"]) for v in views if "gpus" in v]
        gpus = max(seen) if seen else len(self.gpus)
        return {"cpu": CPU_MAX_SHARDS, "gpu": gpus, "tpu": tpu_cores}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["default_device"] = self.default_device
        return d


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def probe_cpu(root: Path) -> CpuInfo:
    text = _read(root / "proc/cpuinfo") or ""
    model = _first(r"^model name\s*:\s*(.+)$", text) or _first(r"^Model\s*:\s*(.+)$", text) or platform.processor() or "unknown CPU"
    flags = set((_first(r"^(?:flags|Features)\s*:\s*(.+)$", text) or "").split())
    wanted = ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve"]
    logical = len(re.findall(r"^processor\s*:", text, re.M)) or os.cpu_count() or 1
    if root == Path("/") and hasattr(os, "sched_getaffinity"):
        logical = len(os.sched_getaffinity(0))
    mem = _first(r"^MemTotal:\s*(\d+) kB", _read(root / "proc/meminfo") or "")
    mhz = _first(r"^cpu MHz\s*:\s*([\d.]+)", text)
    max_khz = _read(root / "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return CpuInfo(
        model=model.strip(),
        logical_cores=logical,
        features=[f for f in wanted if f in flags],
        memory_bytes=int(mem) * 1024 if mem else None,
        mhz=float(mhz) if mhz else None,
        max_mhz=int(max_khz) / 1000 if max_khz and max_khz.strip().isdigit() else None,
        llc_bytes=probe_llc(root),
    )


def probe_llc(root: Path) -> int | None:
    """The last-level cache in bytes: the highest level's caches in sysfs, each instance counted once.

    A big CPU has one L3 per group of cores (its `shared_cpu_list`), and a many-threaded copy
    uses all of them: an array that outgrows one instance may still sit in the sum.
    """
    instances: dict[tuple[int, str], int] = {}
    for index in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        level, size = (_read(index / "level") or "").strip(), _cache_size(_read(index / "size"))
        if not level.isdigit() or size is None or (_read(index / "type") or "").strip() == "Instruction":
            continue
        shared = (_read(index / "shared_cpu_list") or str(index.parent.parent)).strip()
        instances[(int(level), shared)] = size
    top = max((level for level, _ in instances), default=None)
    return sum(size for (level, _), size in instances.items() if level == top) if instances else None


def _cache_size(text: str | None) -> int | None:
    """'491520K' (sysfs's form), '32M' or '1024' as bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)", (text or "").strip())
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)] if m else None


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.M)
    return m.group(1) if m else None


def _pci_devices(root: Path) -> list[tuple[str, str, str, str]]:
    """(address, vendor, device, class) of each PCI device in sysfs."""
    base = root / "sys/bus/pci/devices"
    out = []
    if base.is_dir():
        for dev in sorted(base.iterdir()):
            vendor = (_read(dev / "vendor") or "").strip().lower()
            device = (_read(dev / "device") or "").strip().lower()
            cls = (_read(dev / "class") or "").strip().lower()
            out.append((dev.name, vendor, device, cls))
    return out


def probe_gpus(root: Path) -> tuple[list[GpuInfo], int]:
    """Usable NVIDIA GPUs (driver present) and the count of NVIDIA GPUs on the PCI bus."""
    pci = [d for d in _pci_devices(root) if d[1] == NVIDIA_VENDOR and d[3].startswith("0x03")]
    gpus = _nvml_gpus() if root == Path("/") else []
    if not gpus:
        for info in sorted((root / "proc/driver/nvidia/gpus").glob("*/information")):
            text = info.read_text(errors="replace")
            gpus.append(GpuInfo(name=_first(r"^Model:\s*(.+)$", text) or "NVIDIA GPU", found_by=f"{info.parent.relative_to(root)}"))
        version = _read(root / "proc/driver/nvidia/version")
        driver = _first(r"Kernel Module\s+([\d.]+)", version or "")
        for g in gpus:
            g.driver = driver
    return gpus, len(pci)


def _nvml_gpus() -> list[GpuInfo]:
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVML without a driver raises its own errors: no GPU by NVML
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            name = pynvml.nvmlDeviceGetName(h)
            out.append(GpuInfo(
                name=name.decode() if isinstance(name, bytes) else name,
                memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                compute_capability=f"{major}.{minor}",
                driver=driver.decode() if isinstance(driver, bytes) else driver,
                found_by="NVML",
            ))
        return out
    finally:
        pynvml.nvmlShutdown()


def probe_tpu(root: Path, environ: Mapping[str, str]) -> TpuInfo | None:
    found: list[str] = []
    generation = None
    chips = 0
    pci = [d for d in _pci_devices(root) if d[1] == GOOGLE_VENDOR]
    if pci:
        found.append(f"PCI vendor {GOOGLE_VENDOR} ({len(pci)} device(s))")
        known = [TPU_PCI_IDS[d[2]][0] for d in pci if d[2] in TPU_PCI_IDS]
        generation = known[0] if known else None
        chips = len(pci)
    accel = sorted((root / "dev").glob("accel[0-9]*"))
    if accel:
        found.append(f"/dev/accel* ({len(accel)})")
        chips = chips or len(accel)
    vfio = [p for p in sorted((root / "dev/vfio").glob("[0-9]*"))]
    if vfio and (pci or environ.get("TPU_ACCELERATOR_TYPE")):
        found.append(f"/dev/vfio/* ({len(vfio)})")
        chips = chips or len(vfio)
    acc_type = environ.get("TPU_ACCELERATOR_TYPE")
    if acc_type:
        found.append(f"TPU_ACCELERATOR_TYPE={acc_type}")
        m = re.match(r"(v\d+[a-z]*)(?:-(\d+))?", acc_type)
        if m:
            generation = TPU_TYPE_GENERATIONS.get(m.group(1), m.group(1))
            if not chips and m.group(2):
                # the suffix counts TensorCores for v2-v4/v5p, chips for v5e/v6e
                n = int(m.group(2))
                chips = n // CORES_PER_CHIP.get(generation, 2 if generation in ("v4", "v5p") else 1)
    address = None
    if environ.get("TPU_NAME"):
        found.append(f"TPU_NAME={environ['TPU_NAME']}")
        address = environ["TPU_NAME"]
    if environ.get("COLAB_TPU_ADDR"):
        found.append(f"COLAB_TPU_ADDR={environ['COLAB_TPU_ADDR']} (legacy TPU Node)")
        address = "grpc://" + environ["COLAB_TPU_ADDR"]
        generation = generation or "v2"
        chips = chips or 4  # the legacy Colab TPU was a v2-8: 4 chips, 8 cores
    if not found:
        return None
    cores = chips * CORES_PER_CHIP.get(generation or "", 1)
    return TpuInfo(generation=generation, chips=chips, cores=cores, found_by=found,
                   accelerator_type=acc_type, address=address)


def probe_packages() -> dict[str, str | None]:
    """Versions of Keras and of every package a registered backend reads (its distributions, its TPU
    runtime, its CUDA libraries); from metadata, nothing imported."""
    names = ["keras", *dict.fromkeys(d for b in backends() for d in (*b.distributions, *b.tpu_packages,
                                                                             *b.packages))]
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def is_colab(root: Path, environ: Mapping[str, str]) -> bool:
    return bool(environ.get("COLAB_RELEASE_TAG") or "COLAB_GPU" in environ
                or (root / "opt/google/colab").is_dir())


def detect(root: Path = Path("/"), environ: Mapping[str, str] | None = None,
           packages: dict[str, str | None] | None = None) -> RuntimeReport:
    env = os.environ if environ is None else environ
    gpus, gpu_hw = probe_gpus(root)
    return RuntimeReport(
        cpu=probe_cpu(root),
        gpus=gpus,
        gpu_hardware=max(gpu_hw, len(gpus)),
        tpu=probe_tpu(root, env),
        colab=is_colab(root, env),
        python=sys.version.split()[0],
        packages=probe_packages() if packages is None else packages,
    )
