"""Type check of messages built in Python: proto3 defaults for ``None``, every field's Python
type, unknown enum numbers (the counterpart, for a message built in code, of the strict
proto3-JSON decoding of :mod:`protocol_py.codec.protojson`).

betterproto2 lets any field hold any Python value. :func:`with_defaults` reads ``None`` in a
field without proto3 presence as that field's default (what the message means on the wire);
:func:`check_message` also checks every field's Python type and integer range, refuses a message
that contains itself or nests more than :data:`MAX_MESSAGE_DEPTH` deep, and reports unknown enum
numbers as ``enum.unknown_value`` violations (proto3 keeps such numbers; validators decide).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any, TypeVar

import betterproto2

from protocol_py.codec import metadata
from protocol_py.errors import InvalidValueError, Violation

__all__ = [
    "INT_RANGES",
    "INT_TYPES",
    "MAX_MESSAGE_DEPTH",
    "check_message",
    "with_defaults",
]

M = TypeVar("M", bound=betterproto2.Message)

INT_TYPES = frozenset(
    {
        "int32",
        "int64",
        "uint32",
        "uint64",
        "sint32",
        "sint64",
        "fixed32",
        "fixed64",
        "sfixed32",
        "sfixed64",
    }
)
"""betterproto2 proto type names of the integer scalars."""

INT_RANGES: dict[str, tuple[int, int]] = {
    "int32": (-(2**31), 2**31 - 1),
    "sint32": (-(2**31), 2**31 - 1),
    "sfixed32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "sint64": (-(2**63), 2**63 - 1),
    "sfixed64": (-(2**63), 2**63 - 1),
    "uint32": (0, 2**32 - 1),
    "fixed32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "fixed64": (0, 2**64 - 1),
}
"""Inclusive ``(min, max)`` of each integer scalar type."""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_error(path: str, expected: str, value: Any) -> InvalidValueError:
    return InvalidValueError(
        f"{path or 'value'}: expected {expected}, got {type(value).__name__} {value!r:.60}",
        path=path,
        rule="value.wrong_type",
    )


def _check_scalar(kind: str, cls: Any, value: Any, path: str) -> None:
    if kind == "string":
        if not isinstance(value, str):
            raise _type_error(path, "str", value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _type_error(path, "bool", value)
    elif kind in INT_TYPES or kind == "enum":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(path, "an enum value" if kind == "enum" else "int", value)
        lo, hi = INT_RANGES["int32" if kind == "enum" else kind]
        if not lo <= value <= hi:
            raise InvalidValueError(
                f"{path or 'value'}: {int(value)} is outside the {kind} range [{lo}, {hi}]",
                path=path,
                rule="value.out_of_range",
            )
    elif kind in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(path, "float", value)
    elif kind == "bytes":
        if not isinstance(value, (bytes, bytearray)):
            raise _type_error(path, "bytes", value)
    elif kind == "message" and cls is not None and not isinstance(value, cls):
        raise _type_error(path, cls.__name__, value)


def _enum_known(enum_cls: type[betterproto2.Enum], value: int) -> bool:
    return bool(getattr(value, "name", "x")) and any(m.value == value for m in enum_cls)


MAX_MESSAGE_DEPTH = 100
"""Deepest nesting of messages :func:`check_message` accepts (the top-level message is level 1);
protobuf's default recursion limit. ``google.protobuf.Struct`` contents are limited separately
(:data:`protocol_py.codec.structs.MAX_DEPTH`)."""

_PLAIN_TYPES: dict[str, type] = {"string": str, "bool": bool, "bytes": bytes, "double": float}
"""Scalar proto types whose exact Python type needs no further check (no range, no enum)."""


_is_wkt_cached = functools.cache(metadata.is_well_known)


_SCALAR_DEFAULTS: dict[str, Any] = {"string": "", "bool": False, "bytes": b"", "double": 0.0}


def _map_default(proto_type: str, value_cls: Any) -> Any:
    """The default of a map's value type (a map entry on the wire may omit its value)."""
    if proto_type == "message":
        return value_cls()
    if proto_type == "enum":
        return value_cls(0)
    return _SCALAR_DEFAULTS.get(proto_type, 0.0 if proto_type == "float" else 0)


@functools.cache
def _flat_fields(cls: type) -> tuple[tuple[str, type], ...] | None:
    """(field, exact Python type) when every field of ``cls`` is a plain non-repeated string,
    bool, bytes or double (TextDelta, ToolCallDelta, ...); None otherwise."""
    if not (isinstance(cls, type) and issubclass(cls, betterproto2.Message)) or _is_wkt_cached(cls):
        return None
    flat: list[tuple[str, type]] = []
    for field in metadata.fields(cls).values():
        plain = _PLAIN_TYPES.get(field.proto_type)
        if plain is None or field.repeated or field.map_value is not None:
            return None
        flat.append((field.name, plain))
    return tuple(flat)


def _fix(
    message: betterproto2.Message,
    path: str,
    out: list[Violation] | None,
    active: set[int],
) -> betterproto2.Message:
    """The message with defaults for ``None`` (a copy only when something changed); with ``out``
    also check Python types (raising) and report unknown enum numbers (appending)."""
    cls = type(message)
    if _is_wkt_cached(cls):
        return message
    if id(message) in active:
        raise InvalidValueError(
            f"{path or 'value'}: the message contains itself (a reference cycle)",
            path=path,
            rule="value.cyclic",
        )
    if len(active) >= MAX_MESSAGE_DEPTH:  # ``active`` holds the messages on the current path
        raise InvalidValueError(
            f"{path or 'value'}: messages nested more than {MAX_MESSAGE_DEPTH} levels deep "
            "(protobuf's default recursion limit)",
            path=path,
            rule="value.too_deep",
        )
    active.add(id(message))
    changes: dict[str, Any] = {}
    for field in metadata.fields(cls).values():
        name = field.name
        value = getattr(message, name, None)
        if value is None:
            if not field.presence:
                changes[name] = field.default()
            continue
        plain = _PLAIN_TYPES.get(field.proto_type)
        if plain is not None and type(value) is plain and not field.repeated:
            continue  # the common case, checked without building a path
        where = _join(path, name)
        key_meta, value_meta = field.map_key, field.map_value
        if key_meta is not None and value_meta is not None:
            if not isinstance(value, Mapping):
                if out is None:
                    continue
                raise _type_error(where, "dict", value)
            value_cls = value_meta.cls
            new_map: dict[Any, Any] | None = None
            for key, given in value.items():
                item_path = f"{where}.{key}"
                item = given
                if item is None:
                    # a map entry without its value field: the value's default (proto3)
                    item = _map_default(value_meta.proto_type, value_cls)
                    new_map = dict(value) if new_map is None else new_map
                    new_map[key] = item
                if out is not None:
                    _check_scalar(key_meta.proto_type, None, key, item_path)
                    _check_scalar(value_meta.proto_type, value_cls, item, item_path)
                if isinstance(item, betterproto2.Message):
                    fixed = _fix(item, item_path, out, active)
                    if fixed is not item:
                        new_map = dict(value) if new_map is None else new_map
                        new_map[key] = fixed
            if new_map is not None:
                changes[name] = new_map
            continue
        if field.repeated:
            if not isinstance(value, list):
                if out is None:
                    continue
                raise _type_error(where, "list", value)
            new_list: list[Any] | None = None
            for i, item in enumerate(value):
                item_path = f"{where}[{i}]"
                fixed_item = _fix_item(field, item, item_path, out=out, active=active)
                if fixed_item is not item:
                    new_list = list(value) if new_list is None else new_list
                    new_list[i] = fixed_item
            if new_list is not None:
                changes[name] = new_list
            continue
        fixed_value = _fix_item(field, value, where, out=out, active=active)
        if fixed_value is not value:
            changes[name] = fixed_value
    active.discard(id(message))
    if not changes:
        return message
    copied = copy.copy(message)
    for name, value in changes.items():
        setattr(copied, name, value)
    return copied


def _fix_item(
    field: metadata.Field,
    item: Any,
    path: str,
    *,
    out: list[Violation] | None,
    active: set[int],
) -> Any:
    kind, field_cls = field.proto_type, field.cls
    if out is not None:
        if item is None:
            raise _type_error(path, "a value (None is not an element)", item)
        _check_scalar(kind, field_cls, item, path)
        if kind == "enum" and field_cls is not None and not _enum_known(field_cls, item):
            out.append(
                Violation(
                    path,
                    "enum.unknown_value",
                    f"{int(item)} is not a value of {field_cls.__name__}",
                )
            )
    if kind == "message" and isinstance(item, betterproto2.Message):
        return _fix(item, path, out, active)
    return item


def with_defaults(message: M) -> M:
    """``message`` with every ``None`` in a field without proto3 presence (a plain scalar, an
    enum, a repeated field, a map) replaced by that field's default, at every depth.

    That is what the message means on the wire: ``ModelSpec(id=None)`` encodes exactly as
    ``ModelSpec(id="")``. Fields with presence (``optional``, message fields, oneof members)
    keep ``None`` (absent). The input is never modified; a copy is made only along the paths
    that change, and the message itself is returned when nothing does. Values of the wrong Python
    type are left as they are (see :func:`check_message`).

    Raises:
        InvalidValueError: ``message`` is not a generated message (rule ``value.wrong_type``),
            contains itself (``value.cyclic``) or nests more than :data:`MAX_MESSAGE_DEPTH`
            messages deep (``value.too_deep``).
    """
    if not isinstance(message, betterproto2.Message):
        raise _type_error("", "a generated message", message)
    return _fix(message, "", None, set())  # type: ignore[return-value]


def check_message(message: M, *, path: str = "") -> tuple[M, list[Violation]]:
    """Check a message built in Python: :func:`with_defaults`, plus every field's Python type.

    Returns:
        ``(message with defaults, violations)``: one ``enum.unknown_value`` violation per enum
        field holding a number outside its enum (proto3 keeps such numbers; validators decide).

    Raises:
        InvalidValueError: ``message`` is not a generated message, a field holds a value of the
            wrong Python type (a ``str`` in an int64 field, ``None`` inside a repeated field; rule
            ``value.wrong_type``), an integer outside its type's range (``value.out_of_range``),
            the message contains itself (``value.cyclic``), or messages are nested more than
            :data:`MAX_MESSAGE_DEPTH` deep (``value.too_deep``). ``path`` prefixes the error's path.
    """
    flat = _flat_fields(type(message))
    if flat is not None and all(type(getattr(message, n)) is t for n, t in flat):
        return message, []  # fast path: a message of plain scalars, each of its exact type
    if not isinstance(message, betterproto2.Message):
        raise _type_error(path, "a generated message", message)
    out: list[Violation] = []
    fixed = _fix(message, path, out, set())
    return fixed, out  # type: ignore[return-value]
