"""The user's model inside the worker: import their function, call it, check what it returned, feed it.

Their failures are theirs to read: an exception from their code becomes the run's error with their
own traceback (their frames, not tpulab's); something that is not a compiled Keras model, or a
framework the worker must not load, is one line that says so.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from tpulab.core.errors import TpulabError, UserCodeError
from tpulab.workloads.data import Dataset

if TYPE_CHECKING:
    from tpulab.workloads.user_model import Target

TPULAB = str(Path(__file__).resolve().parent.parent)
GIVEN: dict[int, tuple[Any, Any]] = {}  # id(model) -> the (x, y) the user's function returned with it
SYNTHETIC_BATCHES = 2


def load(t: Target) -> Any:
    """Import the user's module, call the function, and return the compiled model it built."""
    try:
        if t.path is not None and t.is_file:
            sys.path.insert(0, str(t.path.parent))  # so that it can import its neighbours
            spec = importlib.util.spec_from_file_location(f"tpulab_user_model_{t.path.stem}", t.path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(t.source)
        result = getattr(module, t.function)()
    except ImportError as e:
        refused = refused_framework(e)
        if refused:
            raise TpulabError(f"{t.label} imports {refused}, which this worker never loads: on a TPU the first "
                              f"framework to initialise it wins, so a {keras.backend.backend()} run keeps "
                              f"{refused} out; build the model with Keras alone, or run it with --backend "
                              f"{refused}") from None
        raise UserCodeError(user_traceback(t, e)) from None
    except Exception as e:  # noqa: BLE001 - the user's code failed: they get their own traceback
        raise UserCodeError(user_traceback(t, e)) from None
    model, data = result if isinstance(result, tuple) and len(result) == 2 else (result, None)
    if not isinstance(model, keras.Model):
        raise TpulabError(f"{t.label} returned {type(model).__name__}, not a Keras model: return a compiled "
                          "keras.Model (or (model, (x, y)))")
    if not getattr(model, "compiled", False):
        raise TpulabError(f"{t.label} returned a model that is not compiled: call model.compile(optimizer=..., "
                          "loss=...) before returning it")
    if data is not None:
        GIVEN[id(model)] = data
    return model


def refused_framework(e: ImportError) -> str | None:
    """The framework the worker made unimportable, when that is what the import failed on."""
    name = (e.name or "").split(".")[0]
    return name if name in ("tensorflow", "jax") and sys.modules.get(name, False) is None else None


def user_traceback(t: Target, e: BaseException) -> str:
    """The exception and the frames of the user's code: tpulab's and the import machinery's left out."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(TPULAB) and not f.filename.startswith("<frozen")]
    lines = "".join(traceback.format_list(frames)).rstrip()
    what = "".join(traceback.format_exception_only(type(e), e)).strip()
    return f"{t.label} raised {what}\nTraceback (your code):\n{lines}" if lines else f"{t.label} raised {what}"


def data(model: Any, batch: int, seed: int) -> Dataset:
    """The data the user gave with the model, else random inputs and targets of the model's shapes."""
    given = GIVEN.pop(id(model), None)
    if given is not None:
        x, y = given
        return Dataset(np.asarray(x), np.asarray(y), np.asarray(x)[:0], np.asarray(y)[:0], "the function's data")
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise TpulabError(f"synthetic data is made for a model with one input and one output (this one has "
                          f"{len(model.inputs)} and {len(model.outputs)}): return (model, (x, y)) with your data")
    rng = np.random.default_rng(seed)
    n = SYNTHETIC_BATCHES * batch
    x = _random(rng, n, model.inputs[0], _token_range(model))
    out = model.outputs[0]
    if _sparse_loss(model):  # integer class labels, one per output position
        y = rng.integers(0, int(out.shape[-1]), size=(n, *_shape(out)[:-1]), dtype=np.int32)
    else:
        y = rng.random((n, *_shape(out)), dtype=np.float32)
    return Dataset(x, y, x[:0], y[:0], "synthetic")


def _shape(tensor: Any) -> tuple[int, ...]:
    dims = tuple(tensor.shape[1:])
    if any(d is None for d in dims):
        raise TpulabError(f"the model's input or output {tensor.name!r} has an unknown size {tuple(tensor.shape)}: "
                          "give keras.Input a full shape, or return (model, (x, y)) with your data")
    return dims


def _random(rng: np.random.Generator, n: int, tensor: Any, high: int) -> np.ndarray:
    shape = (n, *_shape(tensor))
    if "int" in str(tensor.dtype):
        return rng.integers(0, high, size=shape).astype(str(tensor.dtype))
    return rng.random(shape, dtype=np.float32)


def _token_range(model: Any) -> int:
    """Integer inputs are indices: below the smallest embedding table, if there is one."""
    sizes = [layer.input_dim for layer in model._flatten_layers() if isinstance(layer, keras.layers.Embedding)]
    return min(sizes) if sizes else 2


def _sparse_loss(model: Any) -> bool:
    loss = model.loss
    name = loss if isinstance(loss, str) else getattr(loss, "name", None) or getattr(loss, "__name__", "")
    return "sparse" in str(name).lower()


def compiled_flops(model: Any, data: Dataset, batch: int) -> float | None:
    """XLA's cost analysis of the whole training step, before optimisation, on JAX; None elsewhere."""
    if keras.backend.backend() != "jax":
        return None
    from tpulab.workloads.user_model_jax import train_step_flops

    return train_step_flops(model, data.x_train[:batch], data.y_train[:batch])
