"""Which processes hold the accelerators: what a user asks first when a run cannot open the chip.

A TPU is held by the process that has its device node open (`/dev/accel*`, or `/dev/vfio/<group>`
on newer VMs): found by reading every process's open files under `/proc`. A GPU's compute processes
come from NVML, which in a container reports host PIDs: each is listed under the GPU NVML names, and
its command line only when the process of that PID here holds an NVIDIA device node too (otherwise it
is another process, or none). Everything reads below `root`, so tests point it at a fake tree.
Nothing here imports a framework or opens a device.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER_MODULE = "tpulab.engine.worker"  # what a tpulab run's process runs: python -m tpulab.engine.worker SPEC
TPU_NODES = ("accel[0-9]*", "vfio/[0-9]*")  # below /dev, as detection looks for them
GPU_NODE = "nvidia[0-9]*"


@dataclass(frozen=True)
class Holder:
    """One process on one device; None where it cannot be known from here."""

    device: str  # "/dev/accel0", "GPU 0"
    pid: int
    command: str | None  # its command line
    run: str | None = None  # the tpulab run it is: "conv on jax"
    memory: float | None = None  # bytes it holds on the device (NVML)


@dataclass
class Holders:
    found: list[Holder] = field(default_factory=list)
    unreadable: int = 0  # processes whose open files could not be read (another user's)


def holder(root: Path, device: str, pid: int, memory: float | None = None, known: bool = True) -> Holder:
    """The process `pid` on `device`, its command line read when `known` (the PID is one of ours)."""
    try:
        raw = (root / f"proc/{pid}/cmdline").read_bytes() if known else b""
    except OSError:
        raw = b""
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return Holder(device, pid, " ".join(argv) or None, tpulab_run(argv), memory)


def tpulab_run(argv: list[str]) -> str | None:
    """The run a tpulab worker's command line names ("conv on jax"); None for any other process."""
    starts = [i + 2 for i in range(len(argv) - 1) if argv[i] == "-m" and argv[i + 1] == WORKER_MODULE]
    if not starts:
        return None
    rest = argv[starts[0]:]
    if rest[:1] == ["--standby"] and len(rest) > 1:
        return f"a {rest[1]} run (pre-started worker)"  # its run came on stdin: the command line cannot say which
    if rest[:1] == ["--probe"] and len(rest) > 1:
        return f"{rest[1]} probe"
    try:
        spec = json.loads(rest[0]) if rest else None
    except ValueError:
        spec = None
    if isinstance(spec, dict) and "workload" in spec:
        return f"{spec['workload']} on {spec.get('backend', '?')}"
    return "tpulab worker"


def open_files(root: Path, pid: str) -> list[str]:
    """Where each of a process's file descriptors points (PermissionError when they are not ours to read)."""
    fd_dir = root / f"proc/{pid}/fd"
    out = []
    for fd in os.listdir(fd_dir):
        try:
            out.append(os.readlink(fd_dir / fd))
        except OSError:
            continue  # closed since the listing
    return out


def _nodes(root: Path, patterns: tuple[str, ...]) -> dict[str, str]:
    """Device nodes below root/dev, by every name a file descriptor may point at: {target: /dev/name}."""
    out = {}
    for pattern in patterns:
        for node in sorted((root / "dev").glob(pattern)):
            name = "/" + str(node.relative_to(root))
            out[str(node)] = out[name] = name
    return out


def tpu_holders(root: Path = Path("/")) -> Holders:
    """Every process with a TPU device node open, with its command line and the tpulab run it is."""
    nodes = _nodes(root, TPU_NODES)
    found = Holders()
    if not nodes:
        return found
    for entry in sorted((root / "proc").glob("[0-9]*"), key=lambda p: int(p.name)):
        try:
            held = sorted({nodes[target] for target in open_files(root, entry.name) if target in nodes})
        except PermissionError:
            found.unreadable += 1
            continue
        except OSError:
            continue  # the process ended
        found.found.extend(holder(root, node, int(entry.name)) for node in held)
    return found


class GpuHolders:
    """NVIDIA GPUs' compute processes through NVML (nvidia-ml-py, imported as `pynvml` on the first read).

    Per-process queries cost milliseconds under NVML's driver lock: ask at most once a second.
    """

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.nvml: Any = None

    def read(self) -> Holders:
        if self.nvml is None:
            nvml = importlib.import_module("pynvml")  # ImportError: the caller says why
            nvml.nvmlInit()
            self.nvml = nvml
        n = self.nvml
        nodes = _nodes(self.root, (GPU_NODE,))
        found = Holders()
        for index in range(n.nvmlDeviceGetCount()):
            for p in n.nvmlDeviceGetComputeProcesses(n.nvmlDeviceGetHandleByIndex(index)):
                used = getattr(p, "usedGpuMemory", None)  # None where NVML cannot say (some drivers, MIG)
                found.found.append(holder(self.root, f"GPU {index}", int(p.pid), None if used is None else float(used),
                                          known=self._holds_gpu(int(p.pid), nodes)))
        return found

    def _holds_gpu(self, pid: int, nodes: dict[str, str]) -> bool:
        """Whether the process of that PID here is a GPU user: NVML's PID may be the host's, not ours."""
        try:
            return any(target in nodes for target in open_files(self.root, str(pid)))
        except OSError:
            return False
