"""tpulab's own folder, which the store, a backend's compilation cache and the runs' traces share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping


def home(environ: Mapping[str, str] | None = None) -> Path:
    """tpulab's own folder: the results database, the compilation cache ($TPULAB_HOME, else the user data dir)."""
    env = os.environ if environ is None else environ
    if env.get("TPULAB_HOME"):
        return Path(env["TPULAB_HOME"])
    import platformdirs  # only when no $TPULAB_HOME names the folder

    return Path(platformdirs.user_data_dir("tpulab"))


def traces(environ: Mapping[str, str] | None = None) -> Path:
    """Where profiled runs keep their raw traces, a folder per run named by its id (removed when it is pruned)."""
    return home(environ) / "traces"
