"""Modules that a framework imports only for features no run uses, kept out while the framework loads.

TensorFlow imports JAX for TFLite's converter from JAX functions (tensorflow/lite/python/util.py), and Keras
imports matplotlib's pyplot for `keras.visualization` (keras/src/visualization/plot_image_gallery.py). Both take
their import's failure as "not installed". Where they are installed (Colab, a machine with both frameworks),
that is 0.5-1.5 s of a worker's start each. Once the block ends they import again as usual: a user's model may
import them.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

UNUSED_BY_RUNS = ("matplotlib",)  # Keras's plots (keras.visualization): a run draws nothing in its worker


@contextmanager
def hidden(*names: str) -> Iterator[None]:
    """Inside the block, `import name` raises ImportError for each name not already imported."""
    hiding = [name for name in names if name not in sys.modules]
    for name in hiding:
        sys.modules[name] = None  # type: ignore[assignment]  # how Python marks a module as not importable
    try:
        yield
    finally:
        for name in hiding:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
