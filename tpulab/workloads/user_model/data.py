"""Synthetic data for the user's model, from what Keras knows of it (in the worker).

Each input by its name, shape and dtype (integer inputs as indices below the vocabulary of the
Embedding that reads them); each output's targets as its loss expects them: class labels below
the output's width for a sparse loss, one-hot rows for a categorical one, 0/1 for a binary one,
floats of the output's shape otherwise. Several inputs or outputs come as the model's own
structure (a dict by name, or a tuple in order).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from tpulab.base.errors import TpulabError, one_line

INDICES = 2  # integer inputs no Embedding reads are drawn below this


def signature(model: Any, shape: tuple[int, ...] | None) -> tuple[Any, Any]:
    """The model's inputs and outputs as (structures of) KerasTensors, batch axis None.

    Keras knows them for a functional model; a subclassed one (or a Sequential without
    `keras.Input`) is traced on an input of `shape`, which builds its layers.
    """
    known = _graph(model)
    if shape is None:
        if known is None:
            raise TpulabError(f"Keras cannot see the input of this {type(model).__name__} (a subclassed model, "
                              "or one without keras.Input): pass --input-shape with one example's shape (e.g. "
                              "--input-shape 20), or return (model, (x, y)) with your data")
        return known
    inputs = keras.tree.flatten(known[0]) if known else []
    if len(inputs) > 1:
        raise TpulabError(f"--input-shape gives one input's shape, and this model has {len(inputs)}: Keras knows "
                          "their shapes, leave --input-shape out")
    dtype = inputs[0].dtype if inputs else "int32" if _embeddings(model) else "float32"
    given = keras.KerasTensor((None, *shape), dtype=dtype, name=inputs[0].name if inputs else "input")
    try:
        return given, model(given)  # a symbolic call: builds the layers, and the model
    except Exception as e:  # noqa: BLE001 - the model's own words on why this shape does not fit
        raise TpulabError(f"--input-shape {','.join(map(str, shape))} does not fit the model: "
                          f"{one_line(e)}") from None


def _graph(model: Any) -> tuple[Any, Any] | None:
    """A functional model's inputs and outputs in its own structures; a Sequential's one of each (its graph
    is within); None for a model Keras cannot see into (subclassed, or not built)."""
    try:
        flat = model.inputs, model.outputs
    except (AttributeError, ValueError):
        return None
    if isinstance(model, keras.Sequential):
        return flat[0][0], flat[1][0]
    return model.input, model.output


def synthetic(model: Any, shape: tuple[int, ...] | None, n: int, seed: int) -> tuple[Any, Any]:
    """`n` random examples: inputs and targets in the model's structures."""
    inputs, outputs = signature(model, shape)
    rng = np.random.default_rng(seed)
    vocab = vocabularies(model, inputs)
    x = _plain(keras.tree.map_structure(lambda t: _input(rng, n, t, vocab.get(id(t))), inputs))
    losses = _losses(model, outputs)
    y = _plain(keras.tree.map_structure(lambda t, loss: _target(rng, n, t, loss), outputs, losses))
    return x, y


def arrays(data: Any) -> Any:
    """The user's (x or y) as numpy: a list or tuple of arrays is several inputs (a tuple, as tf.data wants)."""
    if isinstance(data, dict):
        return {k: np.asarray(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)) and data and all(hasattr(v, "shape") for v in data):
        return tuple(np.asarray(v) for v in data)
    return np.asarray(data)


def vocabularies(model: Any, inputs: Any) -> dict[int, int]:
    """id(input) -> the size of the smallest embedding table it reaches; an input traced from --input-shape
    (no graph to follow) reaches every Embedding."""
    tables = [layer.input_dim for layer in _embeddings(model)]
    found: dict[int, int] = {}
    for tensor in keras.tree.flatten(inputs):
        if "int" not in str(tensor.dtype):
            continue
        reached = [op.input_dim for op in _downstream(model, tensor) if isinstance(op, keras.layers.Embedding)]
        sizes = reached or tables
        if sizes:
            found[id(tensor)] = min(sizes)
    return found


def _downstream(model: Any, tensor: Any) -> list[Any]:
    """The operations of a functional model (a Sequential's layers) that read `tensor`, directly or through others (not beyond an
    Embedding, whose output is no longer indices)."""
    frontier, reached = {id(tensor)}, []
    for op in getattr(model, "operations", None) or model.layers:  # in the graph's order (a Sequential: its layers)
        for node in op._inbound_nodes:
            if any(id(t) in frontier for t in node.input_tensors):
                reached.append(op)
                if not isinstance(op, keras.layers.Embedding):
                    frontier |= {id(t) for t in node.output_tensors}
    return reached


def _embeddings(model: Any) -> list[Any]:
    return [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Embedding)]


def _losses(model: Any, outputs: Any) -> Any:
    """Each output's loss name, in the outputs' structure: one loss for all, a list in order, or a dict by
    output name (a dict output's keys, else the output layers' names)."""
    loss = model.loss
    if isinstance(outputs, dict):
        names = list(outputs)
    else:
        names = list(getattr(model, "output_names", None) or []) if isinstance(outputs, (list, tuple)) else []
    if isinstance(loss, dict):
        found = [loss.get(name) for name in names] if names else list(loss.values())[:1]
    elif isinstance(loss, (list, tuple)):
        found = list(loss)
    else:
        found = [loss] * max(1, len(names) or len(keras.tree.flatten(outputs)))
    found = [_loss_name(x) for x in found]
    if isinstance(outputs, dict):
        return dict(zip(names, found))
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(found[i] if i < len(found) else "" for i in range(len(outputs)))
    return found[0] if found else ""


def _loss_name(loss: Any) -> str:
    if loss is None or isinstance(loss, str):
        return (loss or "").lower()
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", "") or type(loss).__name__).lower()


def _shape(tensor: Any) -> tuple[int, ...]:
    dims = tuple(tensor.shape[1:])
    if any(d is None for d in dims):
        raise TpulabError(f"the model's input or output {tensor.name!r} has an unknown size {tuple(tensor.shape)}: "
                          "give keras.Input a full shape (or, for one input, pass --input-shape), or return "
                          "(model, (x, y)) with your data")
    return dims


def _input(rng: np.random.Generator, n: int, tensor: Any, vocabulary: int | None) -> np.ndarray:
    shape = (n, *_shape(tensor))
    if "int" in str(tensor.dtype):
        return rng.integers(0, vocabulary or INDICES, size=shape).astype(str(tensor.dtype))
    return rng.random(shape, dtype=np.float32)


def _target(rng: np.random.Generator, n: int, tensor: Any, loss: str) -> np.ndarray:
    dims = _shape(tensor)
    if not dims and ("sparse" in loss or "categorical" in loss):  # no class axis to draw labels from: one class
        dims = (1,)
    if "sparse" in loss:  # integer class labels, one per output position
        return rng.integers(0, dims[-1], size=(n, *dims[:-1]), dtype=np.int32)
    if "categorical" in loss:  # one-hot rows
        return np.eye(dims[-1], dtype=np.float32)[rng.integers(0, dims[-1], size=(n, *dims[:-1]))]
    if "binary" in loss or "hinge" in loss:
        return rng.integers(0, 2, size=(n, *dims)).astype(np.float32)
    return rng.random((n, *dims), dtype=np.float32)


def _plain(data: Any) -> Any:
    """Lists as tuples: tf.data takes a list for one tensor, a tuple for several."""
    return tuple(data) if isinstance(data, list) else data
