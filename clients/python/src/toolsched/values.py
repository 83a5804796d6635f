"""``google.protobuf.Struct`` <-> plain Python values.

toolsched carries tool arguments, function responses, structured results and
JSON Schemas as ``Struct``: JSON objects whose numbers are all doubles. These
functions turn them into ``dict``/``list``/``str``/``int``/``float``/``bool``/
``None`` and back, so that a client never handles ``Value`` messages or sees
``exit_code: 3.0``:

- a number that is integral and exactly representable (``|n| <= 2**53``)
  comes back as ``int``; any other number as ``float``;
- an ``int`` beyond ``2**53`` cannot travel exactly as a double and raises
  ``ValueError`` instead of being rounded silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Union

from google.protobuf import struct_pb2

__all__ = ["JSON", "JSONObject", "MAX_EXACT_INT", "from_struct", "from_value", "to_struct", "to_value"]

JSON = Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]]
"""A JSON value as plain Python data."""

JSONObject = dict[str, JSON]
"""A JSON object (what a ``Struct`` holds)."""

MAX_EXACT_INT = 2**53
"""Largest magnitude of an integer a double (the only number type of
``Struct``) holds exactly."""


def from_value(value: struct_pb2.Value) -> JSON:
    """One ``google.protobuf.Value`` as plain Python data."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        n = value.number_value
        if math.isfinite(n) and n.is_integer() and abs(n) <= MAX_EXACT_INT:
            return int(n)
        return n
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return from_struct(value.struct_value)
    if kind == "list_value":
        return [from_value(v) for v in value.list_value.values]
    # null_value, or unset (which proto3 JSON also reads as null)
    return None


def from_struct(struct: struct_pb2.Struct | None) -> JSONObject:
    """A ``Struct`` as a ``dict`` (an unset one as ``{}``)."""
    if struct is None:
        return {}
    return {key: from_value(v) for key, v in struct.fields.items()}


def _fill(target: struct_pb2.Value, value: object, path: str) -> None:
    # bool first: it is an int subclass.
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        if abs(value) > MAX_EXACT_INT:
            raise ValueError(
                f"{path}: {value} is beyond 2**53 and cannot be carried exactly by "
                "google.protobuf.Struct (its numbers are doubles); send it as a string"
            )
        target.number_value = float(value)
    elif isinstance(value, float):
        target.number_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value, path)
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        lst = target.list_value
        lst.SetInParent()
        for i, item in enumerate(value):
            _fill(lst.values.add(), item, f"{path}[{i}]")
    else:
        raise TypeError(f"{path}: {type(value).__name__} is not a JSON value")


def _fill_struct(target: struct_pb2.Struct, value: Mapping[str, object], path: str) -> None:
    target.SetInParent()
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"{path}: key {key!r} is not a string")
        _fill(target.fields[key], item, f"{path}.{key}")


def to_value(value: object) -> struct_pb2.Value:
    """Plain Python data as one ``google.protobuf.Value``."""
    out = struct_pb2.Value()
    _fill(out, value, "$")
    return out


def to_struct(value: Mapping[str, object]) -> struct_pb2.Struct:
    """A ``dict`` as a ``Struct``. Raises ``TypeError`` for what JSON cannot
    hold and ``ValueError`` for an integer beyond ``2**53``."""
    out = struct_pb2.Struct()
    _fill_struct(out, value, "$")
    return out
