"""tpulab: how fast is this machine for deep learning, and why.

The Python API (docs/how-to/notebooks.md)::

    import tpulab
    tpulab.detect()                                   # this machine, and what to fix
    r = tpulab.run("conv", preset="smoke", device="cpu")
    s = tpulab.sweep("conv", preset="smoke", batch_size=[8, 16, 32])
    tpulab.compare(r, s.best)
    tpulab.results(limit=10)
    card = tpulab.bench(quick=True)                   # this machine's card
    tpulab.cards.compare(card, "article")             # beside the 2018 article's machines

Names are loaded on first use: `import tpulab` imports no framework, Keras, IPython or plotting
library (importing Keras would fix the notebook's Keras backend).
"""

from __future__ import annotations

from tpulab.base.version import __version__

TYPE_CHECKING = False  # not `typing`'s: importing typing would cost more than all of this module

_LAZY = {
    "run": "tpulab.notebook.api", "sweep": "tpulab.notebook.api", "results": "tpulab.notebook.api",
    "compare": "tpulab.notebook.api", "detect": "tpulab.notebook.api", "AcceleratorBusy": "tpulab.base.errors",
    "RunResult": "tpulab.notebook.results", "SweepResult": "tpulab.notebook.results",
    "ComparisonResult": "tpulab.notebook.results", "RuntimeResult": "tpulab.notebook.results",
    "RunList": "tpulab.notebook.results", "ParamError": "tpulab.workloads.base",
    "StepTimer": "tpulab.callbacks", "FitTimer": "tpulab.notebook.fit",
    "bench": "tpulab.notebook.cards", "cards": "tpulab.notebook.cards",  # `cards` is the module itself
}
__all__ = ["__version__", "run", "sweep", "results", "compare", "detect", "AcceleratorBusy", "RunResult",
           "SweepResult", "ComparisonResult", "RuntimeResult", "RunList", "ParamError", "StepTimer", "FitTimer", "bench", "cards"]

if TYPE_CHECKING:
    from typing import Any

    from tpulab.base.errors import AcceleratorBusy
    from tpulab.callbacks import StepTimer
    from tpulab.notebook.api import compare, detect, results, run, sweep
    from tpulab.notebook import cards
    from tpulab.notebook.cards import bench
    from tpulab.notebook.fit import FitTimer
    from tpulab.notebook.results import ComparisonResult, RunList, RunResult, RuntimeResult, SweepResult
    from tpulab.workloads.base import ParamError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tpulab' has no attribute {name!r}")
    import importlib

    found = importlib.import_module(module)
    value = found if module.endswith("." + name) else getattr(found, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
