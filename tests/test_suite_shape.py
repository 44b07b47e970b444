"""The suite's own shape: what modules share lives in helpers.py and
conftest.py, so no test module leans on another (each can move or go alone)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The `test_*` modules a module's source imports, at any depth."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names += [module if is_test(module) else f"{module}.{a.name}".replace("..", ".")
                      for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return sorted({n for n in names if is_test(n)})


def is_test(module: str) -> bool:
    return any(part.startswith("test_") for part in module.split("."))


def test_the_check_sees_every_form_of_import():
    source = ("from .test_app import text\nfrom . import test_app\n"
              "import tests.test_app\ndef f():\n    from tests.test_app import SIZE\n"
              "from .helpers import text\n")
    assert imported_test_modules(source) == [".test_app", "tests.test_app"]
    assert imported_test_modules(source.replace("test_app", "helpers")) == []


def test_no_test_module_imports_another():
    modules = sorted(TESTS.glob("test_*.py"))
    assert len(modules) > 20  # the suite itself, not an empty folder
    leaning = {m.name: found for m in modules
               if (found := imported_test_modules(m.read_text()))}
    assert leaning == {}, "move what they share into tests/helpers.py"
