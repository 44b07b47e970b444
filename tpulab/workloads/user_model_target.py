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

    def imports_torch_alone(self) -> bool:
        """Whether its file imports torch and not Keras: it builds an nn.Module (read with `ast`, nothing run)."""
        if self.path is None or self.path.suffix != ".py":
            return False
        try:
            tree = ast.parse(self.path.read_bytes(), str(self.path))
        except (SyntaxError, ValueError, OSError):
            return False
        names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        return "torch" in names and "keras" not in names
