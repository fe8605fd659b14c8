"""betterproto2's metadata of the generated message classes, read in one place.

betterproto2 keeps what it knows about a generated message class in a private class property,
``Message._betterproto`` (a ``ProtoClassMetadata``): each field's ``FieldMetadata`` (number,
proto type, repeated, optional, oneof group, map key and value types, wrapped well-known type)
in declaration order, the class of each message, enum or map field (for a map, its generated
``Entry`` class, and the value class under the key ``"<field>.value"``), and each field's
default factory (``NoneType`` for a field with proto3 presence). A decoded message keeps the raw
bytes of the fields its class does not know in the instance attribute ``_unknown_fields``. None
of this is betterproto2's public API. The proto3 JSON mapping, the type check, the generated
wire functions, the request rules and the server's limits need it: this module is the only one
that reads it; the others call :func:`fields`, :func:`field_number`, :func:`oneof_members`,
:func:`is_well_known` and :data:`UNKNOWN_FIELDS`.

Written against betterproto2 0.10.0; ``pyproject.toml`` pins ``betterproto2>=0.10,<0.11``.
Before widening the pin, run ``tests/codec/test_metadata.py``: it checks each function here
against the generated classes and against betterproto2's own encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import betterproto2

__all__ = [
    "UNKNOWN_FIELDS",
    "Field",
    "field_number",
    "fields",
    "is_well_known",
    "oneof_members",
]

UNKNOWN_FIELDS: Final = "_unknown_fields"
"""The attribute where a message decoded by betterproto2 keeps the raw bytes (wire order) of
the fields its class does not know; ``bytes(message)`` writes them back after the known fields.
"""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a generated message class, as betterproto2 declares it.

    Attributes:
        name: The Python attribute name (a Python keyword gets betterproto2's trailing ``_``).
        number: The field number.
        proto_type: betterproto2's type name: ``"string"``, ``"int64"``, ``"message"``,
            ``"enum"``, ``"map"``, ... (the ``betterproto2.TYPE_*`` constants).
        repeated: A repeated field (never a map).
        optional: betterproto2's ``optional`` flag, set on every singular field with presence
            (proto3 ``optional``, message fields, oneof members).
        group: The oneof the field belongs to, or None.
        unwrap: For a wrapped well-known type held as a plain Python value (Timestamp as
            ``datetime``, Duration as ``timedelta``, wrapper types), a function returning the
            message class; None otherwise.
        cls: The field's Python class: the message or enum class, the plain type of a scalar,
            betterproto2's generated entry class for a map (see :attr:`map_value`).
        default: Makes the value an unset field reads as (a fresh list or dict for a repeated
            or map field; None for a field with presence).
        presence: True when unset reads as None (``optional``, message fields, oneof members);
            False for plain scalars, enums, repeated fields and maps, unset at their default.
        map_key: For a map field, its entries' key (field 1, no class); None otherwise.
        map_value: For a map field, its entries' value (field 2; ``cls`` the value's message
            or enum class); None otherwise.
    """

    name: str
    number: int
    proto_type: str
    repeated: bool
    optional: bool
    group: str | None
    unwrap: Callable[[], type] | None
    cls: Any
    default: Callable[[], Any]
    presence: bool
    map_key: Field | None = None
    map_value: Field | None = None


def _class_metadata(cls: type[betterproto2.Message]) -> Any:
    """``cls._betterproto`` (a classproperty, which mypy cannot type)."""
    return getattr(cls, "_betterproto")  # noqa: B009


def _entry_field(
    name: str, meta: betterproto2.FieldMetadata, cls: Any, default: Callable[[], Any]
) -> Field:
    return Field(
        name=name,
        number=meta.number,
        proto_type=meta.proto_type,
        repeated=False,
        optional=False,
        group=None,
        unwrap=meta.unwrap,
        cls=cls,
        default=default,
        presence=default is type(None),
    )


_FIELDS: dict[type, Mapping[str, Field]] = {}
_ONEOFS: dict[tuple[type, str], tuple[str, ...]] = {}


def fields(cls: type[betterproto2.Message]) -> Mapping[str, Field]:
    """The fields of the generated message class ``cls``, name -> :class:`Field`, in
    declaration order (built once per class; do not modify the mapping).

    Raises:
        AttributeError: ``cls`` is not a generated message class.
    """
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = _read_fields(cls)
    return found


def _read_fields(cls: type[betterproto2.Message]) -> dict[str, Field]:
    meta_all = _class_metadata(cls)
    out: dict[str, Field] = {}
    for name, meta in meta_all.meta_by_field_name.items():
        default = meta_all.default_gen[name]
        field_cls = meta_all.cls_by_field.get(name)
        map_key = map_value = None
        if meta.map_meta is not None:
            key_meta, value_meta = meta.map_meta
            entry = _class_metadata(field_cls).default_gen
            map_key = _entry_field("key", key_meta, None, entry["key"])
            map_value = _entry_field(
                "value", value_meta, meta_all.cls_by_field[f"{name}.value"], entry["value"]
            )
        out[name] = Field(
            name=name,
            number=meta.number,
            proto_type=meta.proto_type,
            repeated=bool(meta.repeated),
            optional=bool(meta.optional),
            group=meta.group,
            unwrap=meta.unwrap,
            cls=field_cls,
            default=default,
            presence=default is type(None),
            map_key=map_key,
            map_value=map_value,
        )
    return out


def field_number(cls: type[betterproto2.Message], name: str) -> int:
    """The number of field ``name`` of ``cls``.

    Raises:
        KeyError: ``cls`` has no field ``name``.
    """
    return fields(cls)[name].number


def oneof_members(cls: type[betterproto2.Message], group: str) -> tuple[str, ...]:
    """The member names of oneof ``group`` of ``cls``, in declaration order (built once); empty
    when ``cls`` has no such oneof."""
    key = (cls, group)
    found = _ONEOFS.get(key)
    if found is None:
        found = _ONEOFS[key] = tuple(f.name for f in fields(cls).values() if f.group == group)
    return found


def is_well_known(cls: type) -> bool:
    """True for a ``google.protobuf`` well-known type (generated under
    ``protocol_py_gen.google``): Struct, Value, Timestamp, Duration, ..., whose proto3 JSON
    mappings are their own."""
    return cls.__module__.startswith("protocol_py_gen.google")
