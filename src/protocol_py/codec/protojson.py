"""proto3 JSON for the generated protocol messages (protobuf's proto3 JSON mapping;
docs/decisions.md#d5).

One place for reading and writing the proto3-JSON form of every ``common.v1``, ``content.v1`` and
``model.v1`` message. Use it instead of betterproto2's ``to_dict``/``from_dict``:

* betterproto2 0.10 derives JSON names with a snake/camel round trip that breaks on a digit
  after an underscore. It writes ``cache_write_1h_tokens`` as ``cacheWrite1HTokens`` where
  protoc's ``json_name`` is ``cacheWrite1hTokens`` (google's parser rejects betterproto2's
  spelling), and its ``from_dict`` reads back neither spelling nor the proto field name
  (``from_dict`` ignores ``json_name``: https://github.com/betterproto/python-betterproto2/issues/129).
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
* Messages built in Python are checked by :mod:`protocol_py.codec.type_check`
  (:func:`~protocol_py.codec.type_check.with_defaults`,
  :func:`~protocol_py.codec.type_check.check_message`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import betterproto2

from protocol_py.codec import durations, metadata
from protocol_py.codec.structs import check_json, to_struct
from protocol_py.codec.type_check import (
    INT_RANGES,
    INT_TYPES,
    MAX_MESSAGE_DEPTH,
    M,
    _join,
    check_message,
)
from protocol_py.errors import InvalidValueError, ValidationError, Violation
from protocol_py_gen.google import protobuf as wkt

__all__ = [
    "decode",
    "decode_lenient",
    "decode_or_raise",
    "dumps",
    "encode",
    "field_keys",
    "json_name",
    "json_type",
]

_BASE64_RE = re.compile(r"^[A-Za-z0-9+/\-_]*={0,2}$")
_INT_STRING_RE = re.compile(r"^-?[0-9]+$")
_NUMBER_RE = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


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
    for name in metadata.fields(cls):
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
    return {_bp_name(name): (json_name(name), name) for name in metadata.fields(cls)}


def _fix_names(message: betterproto2.Message, data: dict[str, Any]) -> dict[str, Any]:
    """Rename the keys of ``message.to_dict()`` output to protoc's json_name, recursively, and
    write its Durations as protobuf does (:func:`protocol_py.codec.durations.to_json`)."""
    cls = type(message)
    if metadata.is_well_known(cls):
        return data  # Struct contents and the other well-known types keep their own JSON
    fields = metadata.fields(cls)
    renames = _renames(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        name, field_name = renames[key]
        out[name] = _fix_value(fields[field_name], value, getattr(message, field_name))
    return out


def _fix_value(field: metadata.Field, value: Any, held: Any) -> Any:
    """The JSON ``value`` of ``field``, from ``to_dict``; ``held`` is the field's value."""
    value_meta = field.map_value
    if value_meta is not None:
        # to_dict keeps the held map's order: its entries pair up with the held ones
        pairs = zip(value.items(), held.values(), strict=True)
        if _is_duration(value_meta):
            return {k: durations.to_json(h) for (k, _), h in pairs}
        if value_meta.proto_type != "message" or value_meta.unwrap:
            return value
        return {k: _fix_names(h, v) for (k, v), h in pairs}
    if _is_duration(field):
        return [durations.to_json(d) for d in held] if field.repeated else durations.to_json(held)
    if field.proto_type != "message" or field.unwrap:
        return value
    if field.repeated:
        return [_fix_names(m, v) for m, v in zip(held, value, strict=True)]
    return _fix_names(held, value)


def _is_duration(field: metadata.Field) -> bool:
    return field.unwrap is not None and field.unwrap() is wkt.Duration


def encode(message: betterproto2.Message) -> dict[str, Any]:
    """The proto3-JSON object of ``message`` (the proto3 JSON mapping).

    Same values as betterproto2's ``to_dict()``: fields at their default are omitted (proto3
    presence: an ``optional`` field or a oneof member that is set is kept even at its default),
    64-bit integers are decimal strings, bytes are base64, enums are their proto names,
    Timestamp is RFC 3339 / ISO 8601 text and Duration ``"1.500s"`` (seconds with 0, 3, 6 or 9
    fractional digits, ``"-1.500s"`` when negative: :mod:`protocol_py.codec.durations`, where
    betterproto2 wrote a negative one's fraction wrong). Keys are protoc's
    ``json_name`` (:func:`json_name`) at every depth, so google's ``json_format.Parse`` accepts
    the result.

    ``None`` in a field without proto3 presence is that field's default
    (:func:`~protocol_py.codec.type_check.with_defaults`).

    Raises:
        InvalidValueError: ``message`` is not a generated message, or a field holds a value of
            the wrong Python type (rule ``value.wrong_type``; see
            :func:`~protocol_py.codec.type_check.check_message`).
    """
    if not isinstance(message, betterproto2.Message):
        raise InvalidValueError(
            f"message: expected a generated message, got {type(message).__name__}",
            rule="value.wrong_type",
        )
    checked, _unknown = check_message(message)
    return _fix_names(checked, checked.to_dict())


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
        if cls is wkt.Duration:  # betterproto2 refuses every negative one
            durations.from_json(value)
        else:
            cls.from_dict(value)
    except Exception as exc:  # the decoder's own errors are untyped
        out.append(Violation(path, "json.invalid", f"not a valid {name}: {exc}"))


def _json_message(
    cls: type[betterproto2.Message], data: Any, path: str, out: list[Violation], depth: int = 1
) -> None:
    if metadata.is_well_known(cls):
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
    fields = metadata.fields(cls)
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
        meta = fields[field_name]
        if meta.group is not None:
            groups.setdefault(meta.group, []).append(field_name)
        field_cls = meta.cls
        if meta.map_key is not None and meta.map_value is not None:
            if not isinstance(value, Mapping):
                out.append(
                    Violation(where, "json.invalid", f"expected an object, got {json_type(value)}")
                )
                continue
            key_meta, value_meta = meta.map_key, meta.map_value
            value_cls = value_meta.cls
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
    if metadata.is_well_known(cls):
        if cls is wkt.Struct:
            return cls(fields=to_struct(data).fields)  # type: ignore[call-arg]
        if cls is wkt.Empty:
            return cls()
        if cls is wkt.Duration:
            seconds, nanos = durations.split(durations.from_json(data))
            return cls(seconds=seconds, nanos=nanos)  # type: ignore[call-arg]
        return cls.from_dict(data)
    fields = metadata.fields(cls)
    keys = _keys_of(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        name = keys[key]
        meta = fields[name]
        field_cls = meta.cls

        def one(item: Any, meta: Any = meta, field_cls: Any = field_cls) -> Any:
            if meta.proto_type == "message" and meta.unwrap:
                # Timestamp/Duration: betterproto2 holds them as datetime/timedelta
                if meta.unwrap() is wkt.Duration:
                    return durations.from_json(item)
                return meta.unwrap().from_dict(item).to_wrapped()
            if meta.proto_type == "message":
                return _build(field_cls, item)
            return _build_scalar(meta.proto_type, field_cls, item)

        if meta.map_key is not None and meta.map_value is not None:
            key_meta, value_meta = meta.map_key, meta.map_value
            value_cls = value_meta.cls
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
    if metadata.is_well_known(cls) or not isinstance(data, Mapping):
        found: list[Violation] = []
        _json_message(cls, data, path, found)
        if found:
            pruned.append(path)
            return _DROP
        return data
    fields = metadata.fields(cls)
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
        meta = fields[field_name]
        field_cls = meta.cls
        is_message = (
            meta.proto_type == "message"
            and meta.map_value is None
            and not meta.unwrap
            and field_cls is not None
            and not metadata.is_well_known(field_cls)
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
        group = fields[field_name].group
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
