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
        """The top-level modules its file imports, with those of the files beside it that it imports (its own
        modules), and the framework of each model library among them (transformers: torch); read with `ast`,
        nothing run. A library's framework; none known for a module named on the path."""
        if self.library:
            return {LIBRARIES[self.library].framework}
        if self.path is None or self.path.suffix != ".py":
            return set()
        found = imported(self.path, follow=self.is_file)
        return found | {library.framework for library in LIBRARIES.values() if library.module in found}


def imported(path: Path, follow: bool) -> set[str]:
    """The top-level modules a file imports; with `follow`, also those of each file of its folder that it imports,
    and so on (its folder is on the path when tpulab loads it)."""
    names: set[str] = set()
    todo, seen = [path], set()
    while todo:
        file = todo.pop()
        if file in seen:
            continue
        seen.add(file)
        found = _top_level(file)
        names |= found
        todo += [own for name in found if follow and (own := _beside(path.parent, name)) is not None]
    return names


def _top_level(path: Path) -> set[str]:
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (SyntaxError, ValueError, OSError):
        return set()
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and not node.level}


def _beside(folder: Path, name: str) -> Path | None:
    """The module `name` where it is a file (or a package) in `folder`."""
    return next((f for f in (folder / f"{name}.py", folder / name / "__init__.py") if f.is_file()), None)
