"""The user's model inside the worker: import their function, call it, check what it returned, feed it.

Their failures are theirs to read: an exception from their code becomes the run's error with their
own traceback (their frames, not tpulab's); something that is not a compiled Keras model, or a
framework the worker must not load, is one line that says so.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any

import keras

from tpulab.backends import registry
from tpulab.backends.keras_inputs import rows
from tpulab.base.errors import TpulabError, UserCodeError
from tpulab.workloads.data import Dataset
from tpulab.workloads.user_model.data import arrays, signature, synthetic
from tpulab.workloads.user_model.source import call, user_traceback

if TYPE_CHECKING:
    from tpulab.workloads.user_model.target import Target

GIVEN: dict[int, tuple[Any, Any, str]] = {}  # id(model) -> (x, y, what they are): the user's function's data, or
# KerasHub's synthetic batch, made from its config
SYNTHETIC_BATCHES = 2


def load(t: Target, shape: tuple[int, ...] | None, seq_len: int, batch: int) -> Any:
    """Import the user's module, call the function, and return the compiled model it built (or KerasHub's,
    with a batch made from its config).

    Without data of its own, the model is traced on its inputs here, in the distribution scope:
    a subclassed model builds its layers from `shape` (`--input-shape`).
    """
    if t.library == "keras_hub":
        from tpulab.workloads.user_model.keras_hub import load as from_preset

        model, (x, y) = from_preset(t.source, seq_len, SYNTHETIC_BATCHES * batch)
        GIVEN[id(model)] = x, y, "synthetic"
        return model
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
        raise TpulabError(not_keras(t, model))
    if not getattr(model, "compiled", False):
        raise TpulabError(f"{t.label} returned a model that is not compiled: call model.compile(optimizer=..., "
                          "loss=...) before returning it")
    foreign = foreign_train_step(model)
    if foreign:
        raise TpulabError(f"{t.label}: {foreign}")
    if data is not None:
        GIVEN[id(model)] = data[0], data[1], "the function's data"
    else:
        signature(model, shape)
    return model


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


def not_keras(t: Target, model: Any) -> str:
    """Why what the function returned cannot run here, in one line with the fix: another backend's own model (a
    torch nn.Module), known by the modules its class and bases come from (nothing imported to ask), runs on that
    backend; anything else should be a compiled Keras model."""
    roots = {c.__module__.split(".")[0] for c in type(model).__mro__}
    here = keras.backend.backend()
    other = next((b for b in registry().values() if b.name != here and roots & set(b.distributions)), None)
    if other is not None:
        return (f"{t.label} returned a {other.title} {type(model).__name__}, not a Keras model: run it with "
                f"--backend {other.name}")
    return (f"{t.label} returned {type(model).__name__}, not a Keras model: return a compiled keras.Model (or "
            "(model, (x, y)))")


def backend_of(module: str) -> str:
    """The backend whose framework `module` is (the module's own name where none is registered)."""
    return next((b.name for b in registry().values() if module in b.distributions), module)


def refused_framework(e: ImportError) -> str | None:
    """The framework the worker made unimportable, when that is what the import failed on."""
    name = (e.name or "").split(".")[0]
    return name if name and sys.modules.get(name, False) is None else None


def data(model: Any, shape: tuple[int, ...] | None, batch: int, seed: int) -> Dataset:
    """The data the user gave with the model, else random inputs and targets of the model's shapes."""
    given = GIVEN.pop(id(model), None)
    if given is not None:
        x, y = arrays(given[0]), arrays(given[1])
        return Dataset(x, y, rows(x, slice(0)), rows(y, slice(0)), given[2])
    x, y = synthetic(model, shape, SYNTHETIC_BATCHES * batch, seed)
    return Dataset(x, y, rows(x, slice(0)), rows(y, slice(0)), "synthetic")
