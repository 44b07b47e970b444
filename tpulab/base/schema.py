"""The record's one declaration, read, written and checked by pydantic: the dataclasses are the schema.

Records, sweeps and cards are dataclasses (`tpulab.base.events`, `tpulab.engine.card`); pydantic builds them from
JSON and writes them back by their own annotations, so nothing here lists a field. What arrives from a file
other people wrote is checked strictly: a number is a number (never a string or a boolean) and finite, unless its
field says it may be NaN (`MAY_BE_NAN`: a diverged loss); anything a field leaves open (`PLAIN`: a parameter's
value) holds finite numbers only. What JSON allows and no annotation can say is checked first, over the whole
value: how deep it nests, and that its whole numbers fit SQLite's. A problem is one line naming the field.

pydantic over msgspec: it validates the standard-library dataclasses the rest of tpulab already uses, with
`allow_inf_nan` per field, where msgspec would have each class rewritten as its `Struct` and cannot refuse an
infinity.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from typing import TYPE_CHECKING, Any, Mapping, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError
    from pydantic_core import CoreSchema

T = TypeVar("T")
MAX_DEPTH = 32  # objects within objects: a record nests a few levels (summary, profile, an op), never this many
MAX_INT = 2**63  # SQLite's integers, and far past any count, size or byte figure a run has
# A record class's pydantic config (`__pydantic_config__`, a plain dict: nothing is imported until a record is
# read): checked strictly where asked (`problem`), no infinity or NaN but where a field allows it, NaN written as
# JSON's `NaN` (as Python's `json` reads and writes it).
CONFIG = {"strict": True, "allow_inf_nan": False, "ser_json_inf_nan": "constants"}


class _MayBeNaN:
    """`Annotated[float, MAY_BE_NAN]`: a figure the model computed (a loss, a checksum), NaN when it diverged."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.float_schema(allow_inf_nan=True)


class _Plain:
    """`Annotated[Any, PLAIN]`: anything JSON holds (a parameter's value, a detection report), its numbers finite."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(_finite, core_schema.any_schema())


MAY_BE_NAN, PLAIN = _MayBeNaN(), _Plain()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"should be a finite number, found {value}")
    for inner in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
        _finite(inner)
    return value


_ADAPTERS: dict[type, Any] = {}  # each class's, built once (a few ms each)


def adapter(cls: type[T]) -> TypeAdapter[T]:
    found = _ADAPTERS.get(cls)
    if found is None:
        from pydantic import TypeAdapter

        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


def build(cls: type[T], data: Mapping[str, Any]) -> T:
    """An object from data tpulab wrote (its own events, records and cards), keys it does not know left out."""
    return adapter(cls).validate_python(data, strict=False)


def read(cls: type[T], text: str | bytes) -> T:
    """An object from the JSON text tpulab kept (the store's records): faster than parsing, then building."""
    return adapter(cls).validate_json(text, strict=False)


def plain(obj: Any) -> dict[str, Any]:
    """An object as JSON-ready Python (dicts, lists, numbers, strings), every field."""
    return adapter(type(obj)).dump_python(obj, warnings=False)  # a figure built as an int is written as one


SCALARS = (float, int, str, bool, type(None))


_SCALAR_FIELDS: dict[type, tuple[str, ...]] = {}  # each class's, read once: every saved or listed row asks


def scalar_fields(cls: type) -> tuple[str, ...]:
    """The fields of a dataclass that hold one number, word or flag (not a list, a mapping or an object): what a
    flat listing of it is, column by column, by its own declaration."""
    if cls not in _SCALAR_FIELDS:
        hints = typing.get_type_hints(cls)
        _SCALAR_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)
                                    if all(a in SCALARS for a in (typing.get_args(hints[f.name]) or (hints[f.name],))))
    return _SCALAR_FIELDS[cls]


def scalars(cls: type, obj: Any, prefix: str = "") -> dict[str, Any]:
    """`obj`'s scalar fields (`scalar_fields`), each named `prefix` + its name; every one None where `obj` is."""
    return {prefix + name: getattr(obj, name) if obj is not None else None for name in scalar_fields(cls)}


def checked(value: Any, cls: type[T]) -> T:
    """`value` (parsed JSON from someone else's file) as a `cls`; a `ValueError` in one line naming where it is not
    one."""
    found = _bounds(value, "", 0)
    if found:
        raise ValueError(found)
    from pydantic import ValidationError

    try:
        return adapter(cls).validate_json(json.dumps(value), strict=True)
    except ValidationError as e:
        raise ValueError(words(e)) from None


def problem(value: Any, cls: type) -> str | None:
    """Why `value` cannot be a `cls` (`checked`), or None when it can."""
    try:
        checked(value, cls)
    except ValueError as e:
        return str(e)
    return None


def _bounds(value: Any, at: str, depth: int) -> str | None:
    """What no annotation says: how deep `value` nests and how large its whole numbers are."""
    if depth > MAX_DEPTH:
        return f"{at or 'the value'} nests deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        return next((p for k, v in value.items() if (p := _bounds(v, f"{at}.{k[:40]}" if at else k[:40], depth + 1))),
                    None)
    if isinstance(value, list):
        return next((p for i, v in enumerate(value) if (p := _bounds(v, f"{at}[{i}]", depth + 1))), None)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_INT:
        return f"{at or 'the value'} is too large a number"
    return None


UNION_TAGS = ("float", "str", "int", "bool")
WANTED = {"float_type": "a number", "float_parsing": "a number", "int_type": "a whole number",
          "int_parsing": "a whole number", "int_from_float": "a whole number",
          "string_type": "a str", "bool_type": "a bool", "dict_type": "an object", "dataclass_type": "an object",
          "list_type": "a list", "none_required": "null"}


def words(e: ValidationError) -> str:
    """pydantic's first error as one line: 'summary.gflops_per_s should be a number, found a string'."""
    first = e.errors(include_url=False)[0]
    where = [p for p in first["loc"] if p not in UNION_TAGS]  # a union's member, named after the field's path
    at = "".join(f"[{p}]" if isinstance(p, int) else f".{str(p)[:40]}" for p in where).lstrip(".")
    kind, found = first["type"], first.get("input")
    if kind == "missing":
        return f"missing {at}"
    if kind == "finite_number":
        return f"{at} should be a finite number, found {found}"
    if kind in WANTED:
        return f"{at} should be {WANTED[kind]}, found {_kind(found)}"
    return f"{at or 'the value'} {first['msg'].removeprefix('Value error, ')}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object"}.get(type(value), "a number")
