"""Where the user's model comes from: their function (`FILE.py:FUNCTION`, `module:function`), or a library that
builds a model from its name (`hf:`, `timm:`, `keras_hub:`). What the declaration checks (workload.py) and the
worker loads (the libraries: `tpulab.workloads.shared.model_source`)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tpulab.workloads.shared.model_source import LIBRARIES


@dataclass(frozen=True)
class Target:
    """Where the model comes from: a file (path) or a module (name) and the function that builds it; or a
    library (`library`) and the name or folder it builds from (`source`)."""

    source: str
    function: str
    path: Path | None  # the file, when a file was named; the module's own file, or a folder's config.json
    library: str = ""  # a key of LIBRARIES, for a model no function of the user's builds

    @property
    def is_file(self) -> bool:
        return not self.library and (self.source.endswith(".py") or "/" in self.source)

    @property
    def label(self) -> str:
        if self.library:
            return f"{self.library}:{self.source}"
        return f"{Path(self.source).stem if self.is_file else self.source}:{self.function}"

    def imports(self) -> set[str]:
        """The top-level modules its file imports (read with `ast`, nothing run); a library's framework; none
        known for a module."""
        if self.library:
            return {LIBRARIES[self.library].framework}
        if self.path is None or self.path.suffix != ".py":
            return set()
        try:
            tree = ast.parse(self.path.read_bytes(), str(self.path))
        except (SyntaxError, ValueError, OSError):
            return set()
        names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        return names | {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
