"""Where the user's model function lives: what the declaration checks (user_model.py) and the
worker loads (user_model_keras.py)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Target:
    """Where the user's function lives: a file (path) or a module (name), and the function's name."""

    source: str
    function: str
    path: Path | None  # the file, when a file was named; the module's own file otherwise, where found

    @property
    def is_file(self) -> bool:
        return self.source.endswith(".py") or "/" in self.source

    @property
    def label(self) -> str:
        return f"{Path(self.source).stem if self.is_file else self.source}:{self.function}"

    def imports(self) -> set[str]:
        """The top-level modules its file imports (read with `ast`, nothing run); none known for a module."""
        if self.path is None or self.path.suffix != ".py":
            return set()
        try:
            tree = ast.parse(self.path.read_bytes(), str(self.path))
        except (SyntaxError, ValueError, OSError):
            return set()
        names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        return names | {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
