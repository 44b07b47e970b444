"""What every torch runner shares: eager or `torch.compile` by `--compile`, and the C++ compiler it needs.

`--compile both` (eager, then compiled, compared) is the user's nn.Module's; a runner of one program
(conv, the roofline, decode) takes off or on, and says in one line how to compare the two.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Mapping

import torch

from tpulab.base.errors import UsageError
from tpulab.workloads.base import COMPILE, Params

NO_COMPILER = ("--compile {mode}: torch.compile on a CPU needs a C++ compiler and none was found (g++, clang++ or "
               "$CXX): install one (sudo apt-get install g++; on a Mac, xcode-select --install), or use --compile off")


def cxx(environ: Mapping[str, str]) -> str | None:
    """The C++ compiler torch.compile's CPU code would use: $CXX, else g++, clang++ or c++ on the PATH."""
    path = environ.get("PATH")
    if environ.get("CXX"):
        return shutil.which(environ["CXX"], path=path)
    return next((found for name in ("g++", "clang++", "c++") if (found := shutil.which(name, path=path))), None)


def can_compile(mode: str, device: Any) -> None:
    """Refuse, in one line with the fix, a compiled run on a CPU with no C++ compiler."""
    if mode != "off" and getattr(device, "type", "cpu") == "cpu" and not cxx(os.environ):
        raise UsageError(NO_COMPILER.format(mode=mode))


def one_program(p: Params, workload: str) -> Callable[..., Any]:
    """`torch.compile` when --compile on, else the function itself; --compile both refused in one line."""
    mode = p.get(COMPILE.name, "off")
    if mode == "both":
        raise UsageError(f"--compile both: {workload} times one program per run; run it with --compile off, then "
                         "--compile on, and compare the two (tpulab results compare)")
    return torch.compile if mode == "on" else _eager


def _eager(f: Callable[..., Any]) -> Callable[..., Any]:
    return f


def parameters(module: torch.nn.Module, trainable: bool = False) -> int:
    """A module's weight count (with `trainable`, of those it trains), as the record keeps it."""
    return sum(t.numel() for t in module.parameters() if t.requires_grad or not trainable)
