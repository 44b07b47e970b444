"""Workloads and backends found through entry points, tpulab's own included.

A package adds a workload or a backend by naming an object in its metadata::

    [project.entry-points."tpulab.workloads"]
    hello = "tpulab_hello:HELLO"

tpulab registers its own the same way (pyproject.toml), and each registry also names them
(`BUILTIN` in `tpulab.workloads` and `tpulab.backends`) so that a checkout whose install
metadata is stale (or absent) still finds them. A plugin
that fails to load becomes one `Broken` entry: listed with its reason, never raised, so one
bad package cannot break the app, the command line or another workload.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from tpulab.base.errors import one_line
from tpulab.base.version import __version__

WORKLOADS = "tpulab.workloads"
BACKENDS = "tpulab.backends"

OWN = "tpulab"


@dataclass(frozen=True)
class Origin:
    """Where an entry came from: the distribution that declared it, and its version."""

    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}"

    @property
    def own(self) -> bool:
        return self.distribution == OWN


@dataclass(frozen=True)
class Broken:
    """An entry point that could not be loaded: what it named, and why, in one line."""

    group: str
    name: str
    target: str
    origin: Origin
    error: str

    def line(self) -> str:
        kind = "workload" if self.group == WORKLOADS else "backend"
        return f"{kind} {self.name!r} from {self.origin} could not be loaded ({self.target}): {self.error}"


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


@cache  # each reading parses the whole of tpulab's metadata, README included (5 ms here)
def _own_version() -> str:
    try:
        return metadata.version(OWN)
    except metadata.PackageNotFoundError:
        return __version__


def builtin(group: str) -> dict[str, str]:
    """tpulab's own entries of `group`, as its registry names them (and pyproject.toml declares them)."""
    module = importlib.import_module(group)
    return dict(module.BUILTIN)


@cache
def discover(group: str) -> tuple[dict[str, tuple[Any, Origin]], tuple[Broken, ...]]:
    """Every entry of `group`: {name: (object, origin)}, and the ones that failed to load.

    tpulab's own entries come first and cannot be replaced by a plugin of the same name.
    """
    targets: dict[str, tuple[str, Origin]] = {name: (t, Origin(OWN, _own_version()))
                                              for name, t in builtin(group).items()}
    origins: dict[Any, Origin] = {}  # by distribution: each reading of its metadata parses the whole file again
    for ep in metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        if dist not in origins:
            origins[dist] = Origin(dist.metadata["Name"] if dist else "unknown", dist.version if dist else "?")
        origin = origins[dist]
        if ep.name not in targets and not origin.own:
            targets[ep.name] = (ep.value, origin)
    found: dict[str, tuple[Any, Origin]] = {}
    broken: list[Broken] = []
    for name, (target, origin) in targets.items():
        try:
            found[name] = (_load(target), origin)
        except Exception as e:  # noqa: BLE001 - a plugin's failure is its own line, never the app's
            broken.append(Broken(group, name, target, origin, one_line(e)))
    return found, tuple(broken)


def broken() -> list[Broken]:
    """Every workload and backend that failed to load."""
    return [*discover(BACKENDS)[1], *discover(WORKLOADS)[1]]
