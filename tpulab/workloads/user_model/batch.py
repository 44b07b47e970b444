"""A batch of the user's module, of any nesting, without a framework: dicts, tuples, lists, named tuples and
dataclasses (a dict in a tuple, a dict of tuples, a dataclass of tensors) go through one pytree library, optree
(Keras brings it), so that tpulab slices, draws and names any structure's tensors as it would one tensor's.

A dataclass is no pytree node of optree's own: each one a batch holds is registered at first sight, by its fields,
in tpulab's namespace (no one else's trees change).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import optree

NAMESPACE = "tpulab"


class Inputs(NamedTuple):
    """What the module is called with: `module(*args, **kwargs)`, each of any nesting (itself a pytree)."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = {}


def leaves(tree: Any) -> list[Any]:
    """The tree's leaves in order (a dataclass's fields included)."""
    return optree.tree_leaves(registered(tree), namespace=NAMESPACE)


def map_leaves(f: Callable[[Any], Any], tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> Any:
    """The same structure, `f` of each leaf (and of each subtree `is_leaf` takes for one)."""
    return optree.tree_map(f, registered(tree), is_leaf=is_leaf, namespace=NAMESPACE)


def named_leaves(x: Inputs) -> list[tuple[str, Any]]:
    """Each leaf with where it is: 'input_ids' (by name), 'input 1', "input 1['x'][0]", 'input 1.features'."""
    roots = [(f"input {i}", a) for i, a in enumerate(x.args, 1)] + [(str(k), v) for k, v in x.kwargs.items()]
    named = []
    for root, tree in roots:
        where, found, _ = optree.tree_flatten_with_accessor(registered(tree), namespace=NAMESPACE)
        named += [(accessor.codify(root), leaf) for accessor, leaf in zip(where, found)]
    return named


def registered(tree: Any) -> Any:
    """The tree, once every dataclass in it is a pytree node in tpulab's namespace (a dataclass's fields may hold
    more dataclasses: each level is registered in turn)."""
    while new := {type(leaf) for leaf in optree.tree_leaves(tree, namespace=NAMESPACE)
                  if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type)}:
        for cls in new:
            _register(cls)
    return tree


def _register(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls) if f.init)  # what its constructor takes back

    def flatten(d: Any) -> tuple[list[Any], tuple[str, ...], tuple[str, ...]]:
        return [getattr(d, n) for n in names], names, names

    def unflatten(keys: Any, values: Any) -> Any:
        return cls(**dict(zip(keys, values)))

    optree.register_pytree_node(cls, flatten, unflatten, namespace=NAMESPACE)


def called(x: Inputs) -> str:
    """How the module is called on such a batch, in words: 'one positional dict input, module(batch) (keys x, y)'."""
    if x.kwargs:
        return f"inputs by name, module(**batch) ({', '.join(map(str, x.kwargs))})"
    if len(x.args) == 1 and isinstance(x.args[0], Mapping):
        return f"one positional dict input, module(batch) (keys {', '.join(map(str, x.args[0]))})"
    if len(x.args) == 1:
        one = x.args[0]
        return "one positional input, module(x)" + ("" if len(leaves(one)) == 1 else f" (a {type(one).__name__})")
    return f"{len(x.args)} positional inputs, module(" + ", ".join(f"x{i}" for i in range(1, len(x.args) + 1)) + ")"
