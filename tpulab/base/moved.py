"""Old module paths that still import, each warning with the path it moved to (a plugin may import the old one).

`install("tpulab.workloads", {"decode_math": "decode.arithmetic"})`: `import tpulab.workloads.decode_math` then
gives the module `tpulab.workloads.decode.arithmetic` itself, after a DeprecationWarning naming it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Mapping, Sequence


class Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, package: str, moved: Mapping[str, str]) -> None:
        self.paths = {f"{package}.{old}": f"{package}.{new}" for old, new in moved.items()}

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.paths else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        new = self.paths[spec.name]
        warnings.warn(f"{spec.name} moved to {new}: import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module is the new path's, already run."""


def install(package: str, moved: Mapping[str, str]) -> None:
    """Old paths under `package` ({old: new}, relative to it) import the new modules, with a warning."""
    sys.meta_path.append(Moved(package, moved))
