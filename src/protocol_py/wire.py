"""Fast protobuf wire codec for the generated betterproto2 classes (issue 12).

betterproto2's own codec is generic pure Python that copies every nested field several times;
it decodes a long conversation about 300x slower than google's upb. This module encodes and
decodes the *same* generated classes (plugin authors and kernels keep them) with per-class field
tables built once from betterproto2's own metadata, reading the buffer in place:

* :func:`decode` returns exactly what ``cls.parse(data)`` returns, field for field, including
  ``_unknown_fields`` (the raw bytes of fields the class does not know, in wire order), a
  duplicated singular field (the last one wins, as in betterproto2), both members of a oneof
  sent together (betterproto2 keeps both; DESIGN's sharp edges), unknown enum numbers and map
  entries without a value. Map entries keep their wire order, so a ``google.protobuf.Struct``
  renders its JSON keys in the order the kernel sent them (upb's maps do not keep that order,
  which is why upb does not carry the request here).
* :func:`encode` returns exactly ``bytes(message)``.

Anything the tables do not cover (a field number seen with another wire type, groups, a
truncated field, a value of an unexpected Python type when encoding, nesting deeper than
:data:`MAX_FAST_DEPTH`) falls back to betterproto2 for the whole message, so the result never
differs from betterproto2's, errors included. Well-formedness is not this module's job: the
server checks each request body with upb first (:func:`protocol_py.server.limits.decode_request`).

:func:`decode_checked` also says whether the decoded message is *clean*: every enum number a
known member and every map entry complete, so :mod:`protocol_py.validation` may skip its
field-by-field Python type check (see :func:`mark_decoded`).
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar

import betterproto2
from grpclib.encoding.proto import ProtoCodec

__all__ = [
    "MAX_FAST_DEPTH",
    "WireCodec",
    "decode",
    "decode_checked",
    "encode",
    "mark_decoded",
    "take_wire_clean",
    "wire_size",
]

M = TypeVar("M", bound=betterproto2.Message)

MAX_FAST_DEPTH: Final = 64
"""Deepest message nesting, in message levels, decoded by the fast path; a deeper message is
decoded by betterproto2 (same result) and reported as not clean, so validation walks it and
reports its depth as it always did."""

_LARGE_STRING: Final = 1 << 20
"""Strings of this many bytes or more (1 MiB) are decoded from a memoryview, without the
intermediate bytes copy."""

# field kinds
_K_STR, _K_BYTES, _K_MSG, _K_UNWRAP = 0, 1, 2, 3
_K_INT, _K_UINT, _K_SINT, _K_BOOL, _K_ENUM = 4, 5, 6, 7, 8
_K_FIX = 9  # fixed-width: arg = struct format
_K_MAP = 10

_VARINT_TYPES: Final = {
    betterproto2.TYPE_INT32: (_K_INT, 32),
    betterproto2.TYPE_INT64: (_K_INT, 64),
    betterproto2.TYPE_UINT32: (_K_UINT, 32),
    betterproto2.TYPE_UINT64: (_K_UINT, 64),
    betterproto2.TYPE_SINT32: (_K_SINT, 32),
    betterproto2.TYPE_SINT64: (_K_SINT, 64),
    betterproto2.TYPE_BOOL: (_K_BOOL, 64),
    betterproto2.TYPE_ENUM: (_K_ENUM, 64),
}
_FIXED_TYPES: Final = {
    betterproto2.TYPE_DOUBLE: ("<d", 1, 8),
    betterproto2.TYPE_FLOAT: ("<f", 5, 4),
    betterproto2.TYPE_FIXED32: ("<I", 5, 4),
    betterproto2.TYPE_FIXED64: ("<Q", 1, 8),
    betterproto2.TYPE_SFIXED32: ("<i", 5, 4),
    betterproto2.TYPE_SFIXED64: ("<q", 1, 8),
}
_PY_TYPES: Final = {
    betterproto2.TYPE_STRING: str,
    betterproto2.TYPE_BYTES: bytes,
    betterproto2.TYPE_BOOL: bool,
    betterproto2.TYPE_DOUBLE: float,
    betterproto2.TYPE_FLOAT: float,
}


class _Fallback(Exception):
    """The fast path does not cover this input: use betterproto2 for the whole message."""


def _meta(cls: type[betterproto2.Message]) -> Any:
    return getattr(cls, "_betterproto")  # noqa: B009  (a classproperty mypy cannot see)


# -- decoding -----------------------------------------------------------------------------------


class _DecodePlan:
    """Per-class decoding table: wire tag -> (kind, field name, argument, repeated)."""

    __slots__ = ("cls", "defaults", "dicts", "fields", "lists", "numbers")

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls
        self.fields: dict[int, tuple[int, str, Any, bool]] = {}
        self.numbers: set[int] = set()
        self.defaults: dict[str, Any] = {"_unknown_fields": b""}
        self.lists: list[str] = []
        self.dicts: list[str] = []


_decode_plans: dict[type[Any], _DecodePlan] = {}
_plans_lock = threading.Lock()


def _enum_arg(enum_cls: type[Any]) -> tuple[type[Any], dict[int, Any]]:
    return enum_cls, {int(member): member for member in enum_cls}


def _scalar_entry(proto_type: str, field_cls: Any) -> tuple[int, int, Any]:
    """(kind, wire type, argument) of a non-message field type."""
    if proto_type == betterproto2.TYPE_STRING:
        return _K_STR, 2, None
    if proto_type == betterproto2.TYPE_BYTES:
        return _K_BYTES, 2, None
    if proto_type in _VARINT_TYPES:
        kind, bits = _VARINT_TYPES[proto_type]
        if kind == _K_ENUM:
            return kind, 0, _enum_arg(field_cls)
        return kind, 0, bits
    if proto_type in _FIXED_TYPES:
        fmt, wire, size = _FIXED_TYPES[proto_type]
        return _K_FIX, wire, (fmt, size)
    raise TypeError(f"unsupported proto type {proto_type}")


def _decode_plan(cls: type[Any]) -> _DecodePlan:
    plan = _decode_plans.get(cls)
    if plan is not None:
        return plan
    with _plans_lock:
        plan = _decode_plans.get(cls)
        if plan is None:
            plan = _build_decode_plan(cls)
            _decode_plans[cls] = plan
    return plan


def _build_decode_plan(cls: type[Any]) -> _DecodePlan:
    meta_all = _meta(cls)
    plan = _DecodePlan(cls)
    for name, meta in meta_all.meta_by_field_name.items():
        number = meta.number
        plan.numbers.add(number)
        field_cls = meta_all.cls_by_field.get(name)
        proto_type = meta.proto_type
        if meta.repeated:
            plan.lists.append(name)
        elif meta.map_meta is not None:
            plan.dicts.append(name)
        else:
            default = meta_all.default_gen[name]()
            if isinstance(default, (list, dict)):
                raise TypeError(f"{cls.__name__}.{name}: mutable default")  # never generated
            plan.defaults[name] = default
        if meta.map_meta is not None:
            key_meta, value_meta = meta.map_meta
            value_cls = meta_all.cls_by_field[f"{name}.value"]
            entry_plan = _DecodePlan(field_cls)
            entry_plan.numbers = {1, 2}
            kind, wire, arg = _scalar_entry(key_meta.proto_type, None)
            entry_plan.fields[(1 << 3) | wire] = (kind, "key", arg, False)
            entry_plan.defaults["key"] = _meta(field_cls).default_gen["key"]()
            entry_plan.defaults["value"] = _meta(field_cls).default_gen["value"]()
            if value_meta.proto_type == betterproto2.TYPE_MESSAGE:
                if value_meta.unwrap is not None:
                    value = (_K_UNWRAP, "value", value_meta.unwrap, False)
                else:
                    value = (_K_MSG, "value", value_cls, False)
                entry_plan.fields[(2 << 3) | 2] = value
            else:
                kind, wire, arg = _scalar_entry(value_meta.proto_type, value_cls)
                entry_plan.fields[(2 << 3) | wire] = (kind, "value", arg, False)
            plan.fields[(number << 3) | 2] = (_K_MAP, name, entry_plan, False)
            continue
        if proto_type == betterproto2.TYPE_MESSAGE:
            if meta.unwrap is not None:
                plan.fields[(number << 3) | 2] = (_K_UNWRAP, name, meta.unwrap, meta.repeated)
            else:
                plan.fields[(number << 3) | 2] = (_K_MSG, name, field_cls, meta.repeated)
            continue
        kind, wire, arg = _scalar_entry(proto_type, field_cls)
        plan.fields[(number << 3) | wire] = (kind, name, arg, meta.repeated)
        if meta.repeated and wire != 2:
            # packed encoding (proto3's default for repeated scalars)
            plan.fields[(number << 3) | 2] = (kind + 100, name, (arg, wire), True)
    return plan


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if shift >= 70:
            raise _Fallback
        byte = data[pos]  # IndexError at the end of the buffer: caught as a fallback
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    sign = 1 << (bits - 1)
    return (value ^ sign) - sign


class _State:
    """Per-call decoding state: whether the result is clean (see :func:`decode_checked`)."""

    __slots__ = ("clean",)

    def __init__(self) -> None:
        self.clean = True


def _scalar(kind: int, arg: Any, raw: int, st: _State) -> Any:
    """A varint-encoded value of ``kind`` (bits or enum table in ``arg``)."""
    if kind == _K_INT:
        return _signed(raw, arg)
    if kind == _K_ENUM:
        value = _signed(raw, 64)
        member = arg[1].get(value)
        if member is None:
            st.clean = False
            return arg[0](value)
        return member
    if kind == _K_UINT:
        return raw & ((1 << arg) - 1)
    if kind == _K_BOOL:
        return raw > 0
    # _K_SINT
    raw &= (1 << arg) - 1
    return (raw >> 1) ^ (-(raw & 1))


def _fill(
    plan: _DecodePlan, data: bytes, pos: int, end: int, d: dict[str, Any], st: _State, depth: int
) -> None:
    """Decode the fields in ``data[pos:end]`` into the attribute dict ``d``."""
    if depth > MAX_FAST_DEPTH:
        raise _Fallback
    fields = plan.fields
    while pos < end:
        start = pos
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(data, pos)
        entry = fields.get(tag)
        if entry is None:
            if (tag >> 3) in plan.numbers:
                raise _Fallback  # a known field with another wire type: betterproto2 decides
            wire = tag & 7
            if wire == 0:
                _, pos = _varint(data, pos)
            elif wire == 2:
                size, pos = _varint(data, pos)
                pos += size
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise _Fallback  # groups
            if pos > end:
                raise _Fallback
            d["_unknown_fields"] += data[start:pos]
            continue
        kind, name, arg, repeated = entry
        if kind <= _K_UNWRAP or kind == _K_MAP:
            size = data[pos]
            if size < 0x80:
                pos += 1
            else:
                size, pos = _varint(data, pos)
            nxt = pos + size
            if nxt > end:
                raise _Fallback
            if kind == _K_STR:
                if size < _LARGE_STRING:
                    value: Any = data[pos:nxt].decode("utf-8")
                else:
                    value = str(memoryview(data)[pos:nxt], "utf-8")
            elif kind == _K_MSG:
                sub = _decode_plan(arg)
                value = object.__new__(arg)
                sd = value.__dict__
                sd.update(sub.defaults)
                for list_name in sub.lists:
                    sd[list_name] = []
                for dict_name in sub.dicts:
                    sd[dict_name] = {}
                _fill(sub, data, pos, nxt, sd, st, depth + 1)
            elif kind == _K_BYTES:
                value = data[pos:nxt]
            elif kind == _K_MAP:
                ed = dict(arg.defaults)
                _fill(arg, data, pos, nxt, ed, st, depth + 1)
                if ed["value"] is None:
                    st.clean = False  # an entry without its message value
                d[name][ed["key"]] = ed["value"]
                pos = nxt
                continue
            else:  # _K_UNWRAP: Duration / Timestamp as datetime values
                value = arg().parse(data[pos:nxt]).to_wrapped()
            pos = nxt
        elif kind == _K_FIX:
            fmt, size = arg
            nxt = pos + size
            if nxt > end:
                raise _Fallback
            value = struct.unpack_from(fmt, data, pos)[0]
            pos = nxt
        elif kind < 100:
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                raw, pos = _varint(data, pos)
            if pos > end:
                raise _Fallback
            value = _scalar(kind, arg, raw, st)
        else:  # packed repeated scalars
            size, pos = _varint(data, pos)
            nxt = pos + size
            if nxt > end:
                raise _Fallback
            items = d[name]
            (inner, wire), real = arg, kind - 100
            if real == _K_FIX:
                fmt, width = inner
                while pos < nxt:
                    items.append(struct.unpack_from(fmt, data, pos)[0])
                    pos += width
                if pos != nxt:
                    raise _Fallback
            else:
                while pos < nxt:
                    raw, pos = _varint(data, pos)
                    items.append(_scalar(real, inner, raw, st))
                if pos != nxt:
                    raise _Fallback
            continue
        if repeated:
            d[name].append(value)
        else:
            d[name] = value
    if pos != end:
        raise _Fallback  # the last field ran past the end of its message


def _decode(cls: type[M], data: bytes, st: _State) -> M:
    plan = _decode_plan(cls)
    message = object.__new__(cls)
    d = message.__dict__
    d.update(plan.defaults)
    for name in plan.lists:
        d[name] = []
    for name in plan.dicts:
        d[name] = {}
    _fill(plan, data, 0, len(data), d, st, 1)
    return message


def decode_checked(cls: type[M], data: bytes) -> tuple[M, bool]:
    """Decode ``data`` as ``cls``; equal to ``cls.parse(data)`` in every field.

    Args:
        cls: A generated message class.
        data: The serialized message (``bytes``; a ``bytearray`` or ``memoryview`` is copied).

    Returns:
        ``(message, clean)``: ``clean`` is True when every enum field holds a known member,
        every map entry carried its message value and nesting stayed within
        :data:`MAX_FAST_DEPTH` levels, i.e. when a Python-type walk of the message would find
        nothing to report or fix.

    Raises:
        Whatever ``cls.parse(data)`` raises for input the fast path hands back to it.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    st = _State()
    try:
        return _decode(cls, data, st), st.clean
    except (_Fallback, IndexError, UnicodeDecodeError, struct.error, RecursionError):
        return cls.parse(data), False


def decode(cls: type[M], data: bytes) -> M:
    """Decode ``data`` as ``cls``; equal to ``cls.parse(data)`` (see :func:`decode_checked`)."""
    return decode_checked(cls, data)[0]


# -- "clean" marks for validation ----------------------------------------------------------------

_marks: dict[int, tuple[weakref.ref[betterproto2.Message], int, bool]] = {}
_marks_lock = threading.Lock()


def _forget(key: int) -> Callable[[Any], None]:
    def drop(ref: Any) -> None:
        with _marks_lock:
            mark = _marks.get(key)
            if mark is not None and mark[0] is ref:
                del _marks[key]

    return drop


def mark_decoded(message: betterproto2.Message, size: int, clean: bool) -> None:
    """Record that ``message`` was just decoded from ``size`` bytes of wire data, and whether
    it was clean (see :func:`decode_checked`); the mark goes with the message (weakly held).

    Only the server marks requests, right after decoding them and before anything else can
    change them. :func:`wire_size` reads the size (for :func:`protocol_py.offload.run_cpu`);
    :mod:`protocol_py.validation` skips its Python-type walk of a clean message once
    (:func:`take_wire_clean`).
    """
    key = id(message)
    with _marks_lock:
        _marks[key] = (weakref.ref(message, _forget(key)), size, clean)


def _mark(message: betterproto2.Message) -> tuple[Any, int, bool] | None:
    mark = _marks.get(id(message))
    return mark if mark is not None and mark[0]() is message else None


def wire_size(message: betterproto2.Message) -> int:
    """Bytes ``message`` was decoded from (:func:`mark_decoded`), or 0 when not marked."""
    with _marks_lock:
        mark = _mark(message)
    return mark[1] if mark is not None else 0


def take_wire_clean(message: betterproto2.Message) -> bool:
    """True (once) if ``message`` was marked clean by :func:`mark_decoded`."""
    with _marks_lock:
        mark = _mark(message)
        if mark is None or not mark[2]:
            return False
        _marks[id(message)] = (mark[0], mark[1], False)
    return True


# -- encoding -----------------------------------------------------------------------------------

_SMALL: Final = [bytes([i]) for i in range(128)]


def _encode_varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL[value]
    if value < 0:
        if value < -(1 << 63):
            raise _Fallback
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


# encode kinds
_E_STR, _E_BYTES, _E_MSG, _E_UNWRAP, _E_VARINT, _E_SINT, _E_FIX, _E_MAP = range(8)


class _EncodePlan:
    __slots__ = ("fields",)

    def __init__(self) -> None:
        # (name, kind, tag bytes, argument, repeated, packed, default, python type or None)
        self.fields: list[tuple[str, int, bytes, Any, bool, bool, Any, Any]] = []


_encode_plans: dict[type[Any], _EncodePlan] = {}


def _encode_kind(proto_type: str, unwrap: Any) -> tuple[int, int, Any]:
    """(kind, wire type, argument) for encoding one value of ``proto_type``."""
    if proto_type == betterproto2.TYPE_STRING:
        return _E_STR, 2, None
    if proto_type == betterproto2.TYPE_BYTES:
        return _E_BYTES, 2, None
    if proto_type == betterproto2.TYPE_MESSAGE:
        return (_E_UNWRAP, 2, unwrap) if unwrap is not None else (_E_MSG, 2, None)
    if proto_type in (betterproto2.TYPE_SINT32, betterproto2.TYPE_SINT64):
        return _E_SINT, 0, None
    if proto_type in _VARINT_TYPES:
        return _E_VARINT, 0, None
    fmt, wire, _ = _FIXED_TYPES[proto_type]
    return _E_FIX, wire, struct.Struct(fmt).pack


def _encode_plan(cls: type[Any]) -> _EncodePlan:
    plan = _encode_plans.get(cls)
    if plan is not None:
        return plan
    meta_all = _meta(cls)
    plan = _EncodePlan()
    for name, meta in meta_all.meta_by_field_name.items():
        default = meta_all.default_gen[name]()
        plain = not (meta.optional or meta.group or meta.repeated)
        py_type = _PY_TYPES.get(meta.proto_type) if plain else None
        if meta.map_meta is not None:
            key_meta, value_meta = meta.map_meta
            key = _encode_kind(key_meta.proto_type, None)
            value = _encode_kind(value_meta.proto_type, value_meta.unwrap)
            tag = _encode_varint((meta.number << 3) | 2)
            plan.fields.append((name, _E_MAP, tag, (key, value), False, False, default, None))
            continue
        kind, wire, arg = _encode_kind(meta.proto_type, meta.unwrap)
        packed = meta.repeated and wire != 2
        tag = _encode_varint((meta.number << 3) | (2 if packed else wire))
        plan.fields.append((name, kind, tag, arg, meta.repeated, packed, default, py_type))
    _encode_plans[cls] = plan
    return plan


def _value_bytes(kind: int, arg: Any, value: Any) -> bytes:
    """The encoded value (without tag; length-delimited kinds without their length)."""
    if kind == _E_STR:
        if type(value) is not str:
            raise _Fallback
        return value.encode("utf-8")
    if kind == _E_MSG:
        if not isinstance(value, betterproto2.Message):
            raise _Fallback
        return _encode(value)
    if kind == _E_VARINT:
        if not isinstance(value, int):
            raise _Fallback
        return _encode_varint(value)
    if kind == _E_BYTES:
        if type(value) is not bytes:
            raise _Fallback
        return value
    if kind == _E_FIX:
        if not isinstance(value, (int, float)):
            raise _Fallback
        packed: bytes = arg(value)
        return packed
    if kind == _E_SINT:
        if not isinstance(value, int):
            raise _Fallback
        return _encode_varint(value << 1 if value >= 0 else (value << 1) ^ (~0))
    # _E_UNWRAP
    return bytes(arg().from_wrapped(value))


def _encode(message: betterproto2.Message) -> bytes:
    plan = _encode_plan(type(message))
    d = message.__dict__
    parts: list[bytes] = []
    append = parts.append
    for name, kind, tag, arg, repeated, packed, default, py_type in plan.fields:
        value = d[name]
        if value is None:
            continue
        if py_type is not None and type(value) is not py_type:
            raise _Fallback  # betterproto2 decides what a mistyped value becomes
        if value == default:
            continue
        if repeated:
            if type(value) is not list:
                raise _Fallback
            if packed:
                body = b"".join([_value_bytes(kind, arg, item) for item in value])
                append(tag)
                append(_encode_varint(len(body)))
                append(body)
            else:
                for item in value:
                    body = _value_bytes(kind, arg, item)
                    append(tag)
                    append(_encode_varint(len(body)))
                    append(body)
        elif kind == _E_MAP:
            if type(value) is not dict:
                raise _Fallback
            (k_kind, k_wire, k_arg), (v_kind, v_wire, v_arg) = arg
            k_tag, v_tag = _SMALL[(1 << 3) | k_wire], _SMALL[(2 << 3) | v_wire]
            for key, item in value.items():
                k_body = _value_bytes(k_kind, k_arg, key)
                v_body = _value_bytes(v_kind, v_arg, item)
                entry = b"".join(
                    (
                        k_tag,
                        _encode_varint(len(k_body)) if k_wire == 2 else b"",
                        k_body,
                        v_tag,
                        _encode_varint(len(v_body)) if v_wire == 2 else b"",
                        v_body,
                    )
                )
                append(tag)
                append(_encode_varint(len(entry)))
                append(entry)
        else:
            body = _value_bytes(kind, arg, value)
            append(tag)
            if kind <= _E_UNWRAP:
                append(_encode_varint(len(body)))
            append(body)
    unknown = d.get("_unknown_fields")
    if unknown:
        append(unknown)
    return b"".join(parts)


def encode(message: betterproto2.Message) -> bytes:
    """Serialize ``message``; exactly ``bytes(message)`` (betterproto2's encoding), faster.

    Raises:
        Whatever ``bytes(message)`` raises for a message holding values of the wrong type.
    """
    try:
        return _encode(message)
    except (_Fallback, KeyError, AttributeError, TypeError, ValueError, RecursionError):
        return bytes(message)


class WireCodec(ProtoCodec):
    """grpclib's protobuf codec using :func:`encode` / :func:`decode` for generated classes
    (other message types, e.g. grpclib's own health and reflection messages, go through
    grpclib's codec unchanged)."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        """Serialize ``message`` (a ``message_type``); TypeError for another type."""
        if isinstance(message, betterproto2.Message):
            if not isinstance(message, message_type):
                raise TypeError(
                    f"Message must be of type {message_type!r}, not {type(message)!r}"
                )
            return encode(message)
        data: bytes = super().encode(message, message_type)
        return data

    def decode(self, data: bytes, message_type: Any) -> Any:
        """Parse ``data`` as ``message_type``."""
        if isinstance(message_type, type) and issubclass(message_type, betterproto2.Message):
            return decode(message_type, data)
        return super().decode(data, message_type)


_: Callable[..., Any] = decode  # keep the public functions referenced for type checkers
