"""A JSON value checked against the dataclass it is to become, by that dataclass's own annotations.

Records and sweeps arrive from files other people wrote. What the views later take for a number must be one,
finite (NaN, an infinity and a 400-digit integer are not figures); what they take for a list must be one; and
nothing nests deeper than a record can. The annotations are the one declaration of what each field holds:
nothing here lists the fields again.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Union

MAX_DEPTH = 32  # objects within objects: a record nests a few levels (summary, profile, an op), never this many
MAX_INT = 2**63  # SQLite's integers, and far past any count, size or byte figure a run has
MAY_BE_NAN = "may be NaN"  # in `Annotated[float, MAY_BE_NAN]`: a model's output, NaN (or infinite) when it diverged


def problem(value: Any, kind: Any, where: str = "", depth: int = 0) -> str | None:
    """Why `value` (parsed JSON) cannot be a `kind` (an annotation: a dataclass, a union, list[X], ...), naming
    the key where it fails; None when it can."""
    if depth > MAX_DEPTH:
        return f"{where or 'the value'} nests deeper than {MAX_DEPTH} levels"
    at = where or "the value"
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Annotated:
        return _number(value, at, nan=MAY_BE_NAN in args[1:]) if args[0] is float else \
            problem(value, args[0], where, depth)
    if kind is Any:
        return _any(value, at, depth)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        found = [problem(value, a, where, depth) for a in args if a is not type(None)]
        return None if None in found else found[0]
    if dataclasses.is_dataclass(kind):
        return _object(value, kind, where, depth)
    if origin is list:
        if not isinstance(value, list):
            return _wrong(at, "a list", value)
        return next((p for i, v in enumerate(value) if (p := problem(v, args[0], f"{at}[{i}]", depth + 1))), None)
    if origin is dict:
        if not isinstance(value, dict):
            return _wrong(at, "an object", value)
        return next((p for k, v in value.items() if (p := problem(v, args[1], f"{at}.{k[:40]}", depth + 1))), None)
    if kind is float:
        return _number(value, at, nan=False)
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) < MAX_INT
        return None if ok else _wrong(at, "a whole number", value)
    if kind in (str, bool):
        return None if isinstance(value, kind) else _wrong(at, f"a {kind.__name__}", value)
    if kind is type(None):
        return None if value is None else _wrong(at, "null", value)
    raise TypeError(f"{at}: no check for {kind!r}")  # a field of a type added to the records: add its check


def _object(value: Any, cls: Any, where: str, depth: int) -> str | None:
    if not isinstance(value, dict):
        return _wrong(where or "the value", "an object", value)
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        at = f"{where}.{f.name}" if where else f.name
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                return f"missing {at}"
            continue
        found = problem(value[f.name], hints[f.name], at, depth + 1)
        if found:
            return found
    return None


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _number(value: Any, at: str, nan: bool) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _wrong(at, "a number", value)
    if isinstance(value, int):
        return None if abs(value) < MAX_INT else f"{at} is too large a number"
    return None if nan or math.isfinite(value) else f"{at} should be a finite number, found {value}"


def _any(value: Any, at: str, depth: int) -> str | None:
    """Anything JSON holds, within the depth, its numbers finite and in range."""
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := problem(v, Any, f"{at}.{k[:40]}", depth + 1))), None)
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := problem(v, Any, f"{at}[{i}]", depth + 1))), None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value, at, nan=False)
    return None


def _wrong(at: str, wanted: str, value: Any) -> str:
    found = "null" if value is None else {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(
        type(value), "a number")
    return f"{at} should be {wanted}, found {found}"
