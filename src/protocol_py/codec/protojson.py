"""proto3 JSON for the generated protocol messages (protobuf's proto3 JSON mapping; DESIGN D5).

One place for reading and writing the proto3-JSON form of every ``common.v1``, ``content.v1`` and
``model.v1`` message. Use it instead of betterproto2's ``to_dict``/``from_dict``:

* betterproto2 0.10 derives JSON names with a snake/camel round trip that breaks on a digit
  after an underscore. It writes ``cache_write_1h_tokens`` as ``cacheWrite1HTokens`` where
  protoc's ``json_name`` is ``cacheWrite1hTokens`` (google's parser rejects betterproto2's
  spelling), and its ``from_dict`` reads back neither spelling nor the proto field name.
* ``from_dict`` is lenient: wrong JSON types and several members of one oneof go through.

Public functions:

* :func:`decode` / :func:`decode_or_raise`: strict decoding of a parsed JSON object. Every
  problem becomes a ``json.*`` :class:`~protocol_py.errors.Violation`: ``json.unknown_field``,
  ``json.invalid`` (wrong JSON type, out-of-range integer, bad base64 or number text),
  ``json.unknown_enum``, ``json.duplicate_field`` (one field under two spellings) and
  ``json.oneof_multiple``. Accepted keys per field: protoc's ``json_name``, the proto field
  name, and betterproto2's own spelling where it differs.
* :func:`encode` / :func:`dumps`: the proto3-JSON object/text with protoc's ``json_name`` for
  every field at every depth (nested messages, repeated fields, maps); the contents of
  ``google.protobuf.Struct`` values are left as they are.
* :func:`json_name`, :func:`field_keys` and :func:`json_type`: the naming rule, the accepted keys
  of a message, and the JSON type name of a parsed value (for messages).
* :func:`with_defaults` and :func:`check_message`: the Python-side counterpart of strict
  decoding, for a message built in code. betterproto2 lets any field hold any Python value;
  ``with_defaults`` reads ``None`` in a field without proto3 presence as that field's default
  (what the message means on the wire), and ``check_message`` also checks every field's Python
  type and reports unknown enum numbers.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import betterproto2

from protocol_py.codec.structs import check_json, to_struct
from protocol_py.errors import InvalidValueError, ValidationError, Violation
from protocol_py_gen.google import protobuf as wkt

__all__ = [
    "check_message",
    "decode",
    "decode_lenient",
    "decode_or_raise",
    "dumps",
    "encode",
    "field_keys",
    "json_name",
    "json_type",
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

_BASE64_RE = re.compile(r"^[A-Za-z0-9+/\-_]*={0,2}$")
_INT_STRING_RE = re.compile(r"^-?[0-9]+$")
_NUMBER_RE = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _meta(cls: type[betterproto2.Message]) -> Any:
    """betterproto2's per-class field metadata (typed loosely: its classproperty defeats mypy)."""
    return getattr(cls, "_betterproto")  # noqa: B009


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_wkt(cls: type) -> bool:
    return cls.__module__.startswith("protocol_py_gen.google")


def json_name(field_name: str) -> str:
    """protoc's ``json_name`` of a field: drop each underscore and upper-case the character after
    it (digits are unchanged, so ``cache_write_1h_tokens`` -> ``cacheWrite1hTokens``).

    ``field_name`` may be the Python attribute name: the trailing underscore betterproto2 adds
    to Python keywords (``from_``) is dropped first.

    Raises:
        InvalidValueError: ``field_name`` is not a str (rule ``value.wrong_type``).
    """
    if not isinstance(field_name, str):
        raise InvalidValueError(
            f"field_name: expected str, got {type(field_name).__name__}", rule="value.wrong_type"
        )
    out: list[str] = []
    upper = False
    for ch in field_name.rstrip("_"):
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def _bp_name(field_name: str) -> str:
    """The key betterproto2's ``to_dict`` writes for a field."""
    return str(betterproto2.Casing.CAMEL(field_name)).rstrip("_")


@functools.cache
def _keys_of(cls: type[betterproto2.Message]) -> dict[str, str]:
    keys: dict[str, str] = {}
    for name in _meta(cls).meta_by_field_name:
        keys[json_name(name)] = name
        keys[name.rstrip("_")] = name
        keys.setdefault(_bp_name(name), name)
    return keys


def field_keys(message_type: type[betterproto2.Message]) -> dict[str, str]:
    """The JSON keys :func:`decode` accepts for ``message_type`` -> Python field name: protoc's
    ``json_name``, the proto field name, and betterproto2's ``to_dict`` spelling where it differs
    (``cacheWrite1HPerMtok``).

    Raises:
        InvalidValueError: ``message_type`` is not a generated message class
            (rule ``value.wrong_type``).
    """
    _check_type(message_type)
    return dict(_keys_of(message_type))


def _check_type(message_type: Any) -> None:
    if not (isinstance(message_type, type) and issubclass(message_type, betterproto2.Message)):
        raise InvalidValueError(
            f"message_type: expected a generated message class, got {message_type!r}",
            rule="value.wrong_type",
        )


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


@functools.cache
def _renames(cls: type[betterproto2.Message]) -> dict[str, tuple[str, str]]:
    """betterproto2's ``to_dict`` key -> (json_name, field name)."""
    return {_bp_name(name): (json_name(name), name) for name in _meta(cls).meta_by_field_name}


def _fix_names(cls: type[betterproto2.Message], data: dict[str, Any]) -> dict[str, Any]:
    """Rename the keys of ``cls.to_dict()`` output to protoc's json_name, recursively."""
    if _is_wkt(cls):
        return data  # Struct contents and the other well-known types keep their own JSON
    meta_all = _meta(cls)
    renames = _renames(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name, field_name = renames[key]
        out[name] = _fix_value(meta_all, field_name, value)
    return out


def _fix_value(meta_all: Any, field_name: str, value: Any) -> Any:
    meta = meta_all.meta_by_field_name[field_name]
    if meta.map_meta is not None:
        value_meta = meta.map_meta[1]
        if value_meta.proto_type != "message" or value_meta.unwrap:
            return value
        sub = meta_all.cls_by_field[f"{field_name}.value"]
        return {k: _fix_names(sub, v) for k, v in value.items()}
    if meta.proto_type != "message" or meta.unwrap:
        return value
    sub = meta_all.cls_by_field[field_name]
    if meta.repeated:
        return [_fix_names(sub, v) for v in value]
    return _fix_names(sub, value)


def encode(message: betterproto2.Message) -> dict[str, Any]:
    """The proto3-JSON object of ``message`` (the proto3 JSON mapping).

    Same values as betterproto2's ``to_dict()``: fields at their default are omitted (proto3
    presence: an ``optional`` field or a oneof member that is set is kept even at its default),
    64-bit integers are decimal strings, bytes are base64, enums are their proto names,
    Timestamp is RFC 3339 / ISO 8601 text and Duration ``"1.5s"`` (seconds). Keys are protoc's
    ``json_name`` (:func:`json_name`) at every depth, so google's ``json_format.Parse`` accepts
    the result.

    ``None`` in a field without proto3 presence is that field's default (:func:`with_defaults`).

    Raises:
        InvalidValueError: ``message`` is not a generated message, or a field holds a value of
            the wrong Python type (rule ``value.wrong_type``; see :func:`check_message`).
    """
    if not isinstance(message, betterproto2.Message):
        raise InvalidValueError(
            f"message: expected a generated message, got {type(message).__name__}",
            rule="value.wrong_type",
        )
    checked, _unknown = check_message(message)
    return _fix_names(type(checked), checked.to_dict())


def dumps(message: betterproto2.Message, indent: int | None = None) -> str:
    """:func:`encode` rendered as JSON text (UTF-8 characters kept, ``indent`` spaces per level
    or one line when ``None``).

    Raises:
        InvalidValueError: ``message`` is not a generated message or holds a wrongly typed field
            (rule ``value.wrong_type``), or a Struct inside it holds NaN or Infinity
            (``json.not_finite``).
    """
    try:
        return json.dumps(encode(message), indent=indent, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:  # NaN or Infinity inside a Struct: not JSON
        raise InvalidValueError(
            f"message: not representable as JSON: {exc}", rule="json.not_finite"
        ) from None


# ---------------------------------------------------------------------------------------------
# Strict decoding
# ---------------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A short rendering of a JSON value for a message (any Python value is tolerated)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_type(value: Any) -> str:
    """The JSON type of a parsed value, for messages: ``null``, ``boolean``, ``number``,
    ``string``, ``array``, ``object``, or the Python type name of anything else."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _json_scalar(kind: str, cls: Any, value: Any, path: str, out: list[Violation]) -> None:
    def bad(expected: str) -> None:
        out.append(
            Violation(
                path,
                "json.invalid",
                f"expected {expected}, got JSON {json_type(value)} {_show(value)}",
            )
        )

    if kind == "string":
        if not isinstance(value, str):
            bad("a string")
    elif kind == "bool":
        if not isinstance(value, bool):
            bad("true or false")
    elif kind in INT_TYPES:
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif (isinstance(value, float) and math.isfinite(value) and value.is_integer()) or (
            isinstance(value, str) and _INT_STRING_RE.match(value)
        ):
            number = int(value)
        if number is None:
            bad(f"an integer ({kind}, as a number or a decimal string)")
            return
        lo, hi = INT_RANGES[kind]
        if not lo <= number <= hi:
            bad(f"an integer within the {kind} range")
    elif kind in ("double", "float"):
        if isinstance(value, bool):
            bad("a number")
        elif isinstance(value, (int, float)):
            if not math.isfinite(value):  # a JSON number only overflows (1e400)
                out.append(
                    Violation(
                        path,
                        "json.invalid",
                        "not a finite number: the JSON number is beyond the range of a double",
                    )
                )
        elif isinstance(value, str):
            if value in _FLOAT_WORDS:
                return
            if not _NUMBER_RE.match(value) or not math.isfinite(float(value)):
                bad("a number")
        else:
            bad("a number")
    elif kind == "bytes":
        if not isinstance(value, str) or not _BASE64_RE.match(value):
            bad("base64 text")
            return
        try:
            text = value.replace("-", "+").replace("_", "/")
            base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            bad("base64 text")
    elif kind == "enum":
        if isinstance(value, bool):
            bad(f"a {cls.__name__} name")
        elif isinstance(value, int):
            if not -(2**31) <= value < 2**31:
                bad(f"a {cls.__name__} number within int32")
        elif isinstance(value, str):
            if value not in cls.betterproto_renamed_proto_names_to_value():
                out.append(
                    Violation(
                        path,
                        "json.unknown_enum",
                        f"{value!r} is not a value of {cls.__name__}",
                    )
                )
        else:
            bad(f"a {cls.__name__} name")


def _json_wkt(cls: type[betterproto2.Message], value: Any, path: str, out: list[Violation]) -> None:
    """Well-known types keep their special JSON mappings."""
    name = cls.__name__
    shapes: dict[str, tuple[type, str]] = {
        "Struct": (Mapping, "an object"),
        "Empty": (Mapping, "an object"),
        "ListValue": (list, "an array"),
        "Timestamp": (str, 'an RFC 3339 string ("2026-01-01T00:00:00Z")'),
        "Duration": (str, 'a duration string ("1.5s")'),
    }
    if name in shapes and not isinstance(value, shapes[name][0]):
        out.append(
            Violation(
                path, "json.invalid", f"expected {shapes[name][1]}, got JSON {json_type(value)}"
            )
        )
        return
    if name == "Empty" and value:
        out.append(Violation(path, "json.invalid", "google.protobuf.Empty is the empty object {}"))
        return
    if name in ("Struct", "Value", "ListValue"):
        try:
            check_json(value, path=path)
        except InvalidValueError as exc:
            out.append(Violation(exc.path or path, exc.rule or "json.invalid", str(exc)))
        return
    try:
        cls.from_dict(value)
    except Exception as exc:  # the decoder's own errors are untyped
        out.append(Violation(path, "json.invalid", f"not a valid {name}: {exc}"))


def _json_message(
    cls: type[betterproto2.Message], data: Any, path: str, out: list[Violation], depth: int = 1
) -> None:
    if _is_wkt(cls):
        _json_wkt(cls, data, path, out)
        return
    if depth > MAX_MESSAGE_DEPTH:
        out.append(
            Violation(
                path,
                "json.too_deep",
                f"messages nested more than {MAX_MESSAGE_DEPTH} levels deep (protobuf's default "
                "recursion limit)",
            )
        )
        return
    if not isinstance(data, Mapping):
        out.append(
            Violation(
                path,
                "json.invalid",
                f"expected a JSON object ({cls.__name__}), got JSON {json_type(data)}",
            )
        )
        return
    meta_all = _meta(cls)
    by_key = _keys_of(cls)
    seen: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for key, value in data.items():
        where = _join(path, str(key))
        field_name = by_key.get(key) if isinstance(key, str) else None
        if field_name is None:
            out.append(
                Violation(
                    where,
                    "json.unknown_field",
                    f"{key!r} is not a field of {cls.__name__}",
                )
            )
            continue
        where = _join(path, field_name)
        if field_name in seen:
            out.append(
                Violation(
                    where,
                    "json.duplicate_field",
                    f"field {field_name} is given twice (as {seen[field_name]!r} and {key!r})",
                )
            )
            continue
        seen[field_name] = key
        if value is None:
            continue  # proto3 JSON: null is the field's default
        meta = meta_all.meta_by_field_name[field_name]
        if meta.group is not None:
            groups.setdefault(meta.group, []).append(field_name)
        field_cls = meta_all.cls_by_field.get(field_name)
        if meta.map_meta is not None:
            if not isinstance(value, Mapping):
                out.append(
                    Violation(where, "json.invalid", f"expected an object, got {json_type(value)}")
                )
                continue
            key_meta, value_meta = meta.map_meta
            value_cls = meta_all.cls_by_field.get(f"{field_name}.value")
            for map_key, item in value.items():
                item_path = f"{where}.{map_key}"
                _json_map_key(key_meta.proto_type, map_key, item_path, out)
                if value_meta.proto_type == "message":
                    _json_message(
                        value_meta.unwrap() if value_meta.unwrap else value_cls,
                        item,
                        item_path,
                        out,
                        depth + 1,
                    )
                else:
                    _json_scalar(value_meta.proto_type, value_cls, item, item_path, out)
            continue
        if meta.repeated:
            if not isinstance(value, list):
                out.append(
                    Violation(
                        where, "json.invalid", f"expected an array, got JSON {json_type(value)}"
                    )
                )
                continue
            items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        else:
            items = [(where, value)]
        for item_path, item in items:
            if meta.proto_type == "message":
                msg_cls = meta.unwrap() if meta.unwrap else field_cls
                assert msg_cls is not None
                _json_message(msg_cls, item, item_path, out, depth + 1)
            else:
                _json_scalar(meta.proto_type, field_cls, item, item_path, out)
    for group, members in groups.items():
        if len(members) > 1:
            out.append(
                Violation(
                    _join(path, members[1]),
                    "json.oneof_multiple",
                    f"oneof {group} has several members set: {', '.join(members)}",
                )
            )


def _json_map_key(kind: str, key: Any, path: str, out: list[Violation]) -> None:
    """proto3 JSON writes every map key as a string; integer and bool keys as their text."""
    if not isinstance(key, str):
        out.append(Violation(path, "json.invalid", f"map key {key!r} is not a string"))
    elif kind in INT_TYPES:
        _json_scalar(kind, None, key, path, out)
    elif kind == "bool" and key not in ("true", "false"):
        out.append(Violation(path, "json.invalid", f"expected a bool map key, got {key!r}"))


def _build_map_key(kind: str, key: str) -> Any:
    if kind in INT_TYPES:
        return int(key)
    if kind == "bool":
        return key == "true"
    return key


def _build_scalar(kind: str, cls: Any, value: Any) -> Any:
    if kind in INT_TYPES:
        return int(value)
    if kind in ("double", "float"):
        if isinstance(value, str):
            return _FLOAT_WORDS[value] if value in _FLOAT_WORDS else float(value)
        return float(value)
    if kind == "bytes":
        text = str(value).replace("-", "+").replace("_", "/")
        return base64.b64decode(text + "=" * (-len(text) % 4))
    if kind == "enum":
        if isinstance(value, str):
            return cls(cls.betterproto_renamed_proto_names_to_value()[value])
        return cls(value)
    return value


def _build(cls: type[M], data: Any) -> M:
    """Build a message from JSON already checked by :func:`_json_message` (betterproto2's own
    ``from_dict`` cannot read fields such as ``cache_write_1h_per_mtok``, so it is used only for
    the Timestamp and Duration well-known types)."""
    if _is_wkt(cls):
        if cls is wkt.Struct:
            return cls(fields=to_struct(data).fields)  # type: ignore[call-arg]
        if cls is wkt.Empty:
            return cls()
        return cls.from_dict(data)
    meta_all = _meta(cls)
    keys = _keys_of(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        name = keys[key]
        meta = meta_all.meta_by_field_name[name]
        field_cls = meta_all.cls_by_field.get(name)

        def one(item: Any, meta: Any = meta, field_cls: Any = field_cls) -> Any:
            if meta.proto_type == "message" and meta.unwrap:
                # Timestamp/Duration: betterproto2 holds them as datetime/timedelta
                return meta.unwrap().from_dict(item).to_wrapped()
            if meta.proto_type == "message":
                return _build(field_cls, item)
            return _build_scalar(meta.proto_type, field_cls, item)

        if meta.map_meta is not None:
            key_meta, value_meta = meta.map_meta
            value_cls = meta_all.cls_by_field.get(f"{name}.value")
            kwargs[name] = {
                _build_map_key(key_meta.proto_type, k): one(v, value_meta, value_cls)
                for k, v in value.items()
            }
        elif meta.repeated:
            kwargs[name] = [one(item) for item in value]
        else:
            kwargs[name] = one(value)
    return cls(**kwargs)


def decode(
    message_type: type[M], data: Mapping[str, Any], *, path: str = ""
) -> tuple[M | None, list[Violation]]:
    """Decode a parsed proto3-JSON object into ``message_type``, strictly (the proto3 JSON
    mapping).

    Unlike betterproto2's lenient ``from_dict``, unknown fields (``json.unknown_field``), wrong
    JSON types or out-of-range integers (``json.invalid``), unknown enum names
    (``json.unknown_enum``), a field given under both its JSON and proto name
    (``json.duplicate_field``) and several members of one oneof (``json.oneof_multiple``) are
    reported, all of them, each with its field path (``tiers[0].inputPerMtok`` below ``path``).
    Accepted keys are protoc's lowerCamelCase ``json_name``, the proto field name and
    betterproto2's own spelling (``cacheWrite1HPerMtok``; see :func:`field_keys`); ``null``
    means the default. 64-bit integers may be numbers or decimal strings, doubles numbers or
    ``"NaN"``/``"Infinity"``/``"-Infinity"``, bytes standard or URL-safe base64, enums names or
    numbers, Timestamp RFC 3339 text, Duration ``"1.5s"``. Unknown enum *numbers* are accepted
    here (proto3 keeps them) and reported by the validators as ``enum.unknown_value``.

    Returns:
        ``(message, violations)``: the message is ``None`` whenever ``violations`` is non-empty.

    Raises:
        InvalidValueError: ``message_type`` is not a generated message class.
    """
    _check_type(message_type)
    out: list[Violation] = []
    _json_message(message_type, data, path, out)
    if out:
        return None, out
    try:
        return _build(message_type, data), []
    except Exception as exc:  # defensive: report, never raise
        return None, [Violation(path, "json.invalid", f"cannot decode: {exc}")]


_DROP = object()


def _lenient(cls: type[betterproto2.Message], data: Any, path: str, pruned: list[str]) -> Any:
    """``data`` with every part that cannot be decoded as ``cls`` removed (``_DROP`` when
    ``data`` itself cannot be). Unknown fields and the second spelling of a duplicated field are
    left out without a pruned path (nothing that was given goes missing); a field whose value
    does not decode is removed and its path appended to ``pruned``."""
    if _is_wkt(cls) or not isinstance(data, Mapping):
        found: list[Violation] = []
        _json_message(cls, data, path, found)
        if found:
            pruned.append(path)
            return _DROP
        return data
    meta_all = _meta(cls)
    by_key = _keys_of(cls)
    seen: set[str] = set()
    kept: dict[str, Any] = {}
    names: dict[str, str] = {}
    for key, value in data.items():
        field_name = by_key.get(key) if isinstance(key, str) else None
        if field_name is None or field_name in seen:
            continue
        seen.add(field_name)
        where = _join(path, field_name)
        if value is None:
            kept[key] = None
            continue
        found = []
        _json_message(cls, {key: value}, path, found)
        if not found:
            kept[key] = value
            names[key] = field_name
            continue
        meta = meta_all.meta_by_field_name[field_name]
        field_cls = meta_all.cls_by_field.get(field_name)
        is_message = (
            meta.proto_type == "message"
            and meta.map_meta is None
            and not meta.unwrap
            and field_cls is not None
            and not _is_wkt(field_cls)
        )
        if not is_message:
            pruned.append(where)
            continue
        if meta.repeated:
            if not isinstance(value, list):
                pruned.append(where)
                continue
            inner = [
                _lenient(field_cls, item, f"{where}[{i}]", pruned) for i, item in enumerate(value)
            ]
            if any(item is _DROP for item in inner):
                # an item that is no message: the list is unusable (dropping one item would
                # shift the indices of the others)
                pruned.append(where)
                continue
            kept[key] = inner
        else:
            one = _lenient(field_cls, value, where, pruned)
            if one is _DROP:
                continue
            kept[key] = one
        names[key] = field_name
    groups: dict[str, list[str]] = {}
    for key, field_name in names.items():
        group = meta_all.meta_by_field_name[field_name].group
        if group is not None and kept.get(key) is not None:
            groups.setdefault(group, []).append(key)
    for keys in groups.values():
        if len(keys) > 1:  # which member was meant is unknown: none of them is kept
            for key in keys:
                del kept[key]
                pruned.append(_join(path, names[key]))
    return kept


def decode_lenient(
    message_type: type[M], data: Mapping[str, Any], *, path: str = ""
) -> tuple[M | None, list[Violation], list[str]]:
    """Decode what can be decoded: the strict :func:`decode` violations together with a message
    built from the parts of ``data`` that decode.

    Unknown fields and the second spelling of a field given twice are ignored; a field whose
    value cannot be decoded (wrong JSON type, out-of-range integer, unknown enum name, a
    malformed Timestamp, NaN inside a Struct, several members of one oneof) is treated as
    absent, and its path is listed. A repeated message field with an item that is not an object
    is dropped whole; inside a nested message only the offending fields are dropped.

    Returns:
        ``(message, violations, pruned)``: ``violations`` exactly as :func:`decode` reports them;
        ``message`` the partial message (``None`` only when ``data`` is not an object);
        ``pruned`` the field paths (proto names, ``tiers[0].batch_input_per_mtok``) that were
        treated as absent. With no violations this is :func:`decode`'s message and ``[]``.

    Raises:
        InvalidValueError: ``message_type`` is not a generated message class.
    """
    message, violations = decode(message_type, data, path=path)
    if message is not None:
        return message, violations, []
    pruned: list[str] = []
    kept = _lenient(message_type, data, path, pruned)
    if kept is _DROP:
        return None, violations, pruned
    try:
        return _build(message_type, kept), violations, pruned
    except Exception:  # defensive: the kept parts passed the strict checks
        return None, violations, [*pruned, path]


def decode_or_raise(message_type: type[M], data: Mapping[str, Any]) -> M:
    """Like :func:`decode`, but return the message or raise.

    Raises:
        ValidationError: the JSON is not a valid ``message_type``; ``violations`` lists every
            ``json.*`` problem (field path, rule id, message).
        InvalidValueError: ``message_type`` is not a generated message class.
    """
    message, violations = decode(message_type, data)
    if message is None:
        raise ValidationError(violations, what=f"{message_type.__name__} JSON")
    return message


# ---------------------------------------------------------------------------------------------
# Messages built in Python: proto3 defaults for None, Python types, unknown enum numbers
# ---------------------------------------------------------------------------------------------


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


@functools.cache
def _is_wkt_cached(cls: type) -> bool:
    return _is_wkt(cls)


@functools.cache
def _meta_cached(cls: type[betterproto2.Message]) -> Any:
    return _meta(cls)


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
    if not (isinstance(cls, type) and issubclass(cls, betterproto2.Message)) or _is_wkt(cls):
        return None
    fields: list[tuple[str, type]] = []
    for name, meta in _meta(cls).meta_by_field_name.items():
        plain = _PLAIN_TYPES.get(meta.proto_type)
        if plain is None or meta.repeated or meta.map_meta is not None:
            return None
        fields.append((name, plain))
    return tuple(fields)


@functools.cache
def _no_presence(cls: type[betterproto2.Message]) -> frozenset[str]:
    """Fields whose default is not ``None``: proto3 fields without presence, read as their
    default when unset (scalars, enums, repeated fields and maps)."""
    gen = _meta(cls).default_gen
    return frozenset(name for name, make in gen.items() if make is not type(None))


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
    meta_all = _meta_cached(cls)
    no_presence = _no_presence(cls)
    changes: dict[str, Any] = {}
    for name, meta in meta_all.meta_by_field_name.items():
        value = getattr(message, name, None)
        if value is None:
            if name in no_presence:
                changes[name] = meta_all.default_gen[name]()
            continue
        plain = _PLAIN_TYPES.get(meta.proto_type)
        if plain is not None and type(value) is plain and not meta.repeated:
            continue  # the common case, checked without building a path
        where = _join(path, name)
        field_cls = meta_all.cls_by_field.get(name)
        if meta.map_meta is not None:
            if not isinstance(value, Mapping):
                if out is None:
                    continue
                raise _type_error(where, "dict", value)
            key_meta, value_meta = meta.map_meta
            value_cls = meta_all.cls_by_field.get(f"{name}.value")
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
        if meta.repeated:
            if not isinstance(value, list):
                if out is None:
                    continue
                raise _type_error(where, "list", value)
            new_list: list[Any] | None = None
            for i, item in enumerate(value):
                item_path = f"{where}[{i}]"
                fixed_item = _fix_item(meta, field_cls, item, item_path, out=out, active=active)
                if fixed_item is not item:
                    new_list = list(value) if new_list is None else new_list
                    new_list[i] = fixed_item
            if new_list is not None:
                changes[name] = new_list
            continue
        fixed_value = _fix_item(meta, field_cls, value, where, out=out, active=active)
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
    meta: Any,
    field_cls: Any,
    item: Any,
    path: str,
    *,
    out: list[Violation] | None,
    active: set[int],
) -> Any:
    if out is not None:
        if item is None:
            raise _type_error(path, "a value (None is not an element)", item)
        _check_scalar(meta.proto_type, field_cls, item, path)
        if meta.proto_type == "enum" and field_cls is not None and not _enum_known(field_cls, item):
            out.append(
                Violation(
                    path,
                    "enum.unknown_value",
                    f"{int(item)} is not a value of {field_cls.__name__}",
                )
            )
    if meta.proto_type == "message" and isinstance(item, betterproto2.Message):
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
