"""The user's own code, framework-free: importing their module and calling their function, and the traceback of
what it raised with tpulab's frames left out (shared by the Keras path and the nn.Module path, so that a torch
run never loads Keras)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpulab.workloads.user_model.target import Target

TPULAB = str(Path(__file__).resolve().parent.parent)


def call(t: Target) -> Any:
    """Import the user's module (a file, or a module on the path) and call their function; what it raises is theirs."""
    if t.path is not None and t.is_file:
        sys.path.insert(0, str(t.path.parent))  # so that it can import its neighbours
        spec = importlib.util.spec_from_file_location(f"tpulab_user_model_{t.path.stem}", t.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(t.source)
    return getattr(module, t.function)()


def user_traceback(t: Target, e: BaseException) -> str:
    """The exception and the frames of the user's code: tpulab's and the import machinery's left out."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(TPULAB) and not f.filename.startswith("<frozen")]
    lines = "".join(traceback.format_list(frames)).rstrip()
    what = "".join(traceback.format_exception_only(type(e), e)).strip()
    return f"{t.label} raised {what}\nTraceback (your code):\n{lines}" if lines else f"{t.label} raised {what}"
