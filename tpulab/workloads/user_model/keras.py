"""The user's model inside the worker: import their function, call it, check what it returned, feed it.

Their failures are theirs to read: an exception from their code becomes the run's error with their
own traceback (their frames, not tpulab's); something that is not a compiled Keras model, or a
framework the worker must not load, is one line that says so.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras

from tpulab.backends import registry
from tpulab.backends.keras_inputs import rows
from tpulab.base.errors import TpulabError, UserCodeError
from tpulab.workloads.data import Dataset
from tpulab.workloads.user_model.data import arrays, signature, synthetic

if TYPE_CHECKING:
    from tpulab.workloads.user_model.target import Target

TPULAB = str(Path(__file__).resolve().parent.parent)
GIVEN: dict[int, tuple[Any, Any]] = {}  # id(model) -> the (x, y) the user's function returned with it
SYNTHETIC_BATCHES = 2


def load(t: Target, shape: tuple[int, ...] | None) -> Any:
    """Import the user's module, call the function, and return the compiled model it built.

    Without data of its own, the model is traced on its inputs here, in the distribution scope:
    a subclassed model builds its layers from `shape` (`--input-shape`).
    """
    try:
        result = call(t)
    except ImportError as e:
        refused = refused_framework(e)
        if refused:
            raise TpulabError(f"{t.label} imports {refused}, which this worker never loads: on a TPU the first "
                              f"framework to initialise it wins, so a {keras.backend.backend()} run keeps "
                              f"{refused} out; build the model with Keras alone, or run it with --backend "
                              f"{backend_of(refused)}") from None
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
    foreign = foreign_train_step(model)
    if foreign:
        raise TpulabError(f"{t.label}: {foreign}")
    if data is not None:
        GIVEN[id(model)] = data
    else:
        signature(model, shape)
    return model


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


def foreign_train_step(model: Any) -> str | None:
    """Why the model's own `train_step` cannot run on this backend, when its arguments are another backend's."""
    found = registry()
    backend = keras.backend.backend()
    expected = found[backend].keras_step_arguments if backend in found else ("data",)
    given = inspect.signature(model.train_step).parameters.values()  # bound: no self
    if any(a.kind is inspect.Parameter.VAR_POSITIONAL for a in given):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    arguments = [a for a in given if a.kind in positional and a.default is inspect.Parameter.empty]  # what Keras must pass
    if len(arguments) == len(expected):
        return None
    fits = " or ".join(b.name for b in found.values() if b.keras and len(b.keras_step_arguments) == len(arguments))
    return (f"its train_step({', '.join(a.name for a in arguments)}) is written for another backend: on {backend} "
            f"Keras calls train_step({', '.join(expected)})" + (f"; run it with --backend {fits}" if fits else ""))


def backend_of(module: str) -> str:
    """The backend whose framework `module` is (the module's own name where none is registered)."""
    return next((b.name for b in registry().values() if module in b.distributions), module)


def refused_framework(e: ImportError) -> str | None:
    """The framework the worker made unimportable, when that is what the import failed on."""
    name = (e.name or "").split(".")[0]
    return name if name and sys.modules.get(name, False) is None else None


def user_traceback(t: Target, e: BaseException) -> str:
    """The exception and the frames of the user's code: tpulab's and the import machinery's left out."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(TPULAB) and not f.filename.startswith("<frozen")]
    lines = "".join(traceback.format_list(frames)).rstrip()
    what = "".join(traceback.format_exception_only(type(e), e)).strip()
    return f"{t.label} raised {what}\nTraceback (your code):\n{lines}" if lines else f"{t.label} raised {what}"


def data(model: Any, shape: tuple[int, ...] | None, batch: int, seed: int) -> Dataset:
    """The data the user gave with the model, else random inputs and targets of the model's shapes."""
    given = GIVEN.pop(id(model), None)
    if given is not None:
        x, y = arrays(given[0]), arrays(given[1])
        return Dataset(x, y, rows(x, slice(0)), rows(y, slice(0)), "the function's data")
    x, y = synthetic(model, shape, SYNTHETIC_BATCHES * batch, seed)
    return Dataset(x, y, rows(x, slice(0)), rows(y, slice(0)), "synthetic")
