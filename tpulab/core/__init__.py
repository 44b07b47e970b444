"""Old import paths that plugins used: `tpulab.core.charts` and `tpulab.core.events` still load, with a
DeprecationWarning that names the new module (tpulab.base.*)."""

from __future__ import annotations

import warnings


def moved(old: str, new: str) -> None:
    """Warn, from a plugin's import of `old`, that it is now `new`."""
    warnings.warn(f"{old} moved to {new}", DeprecationWarning, stacklevel=3)
