"""Exact conversion between JSON and ``google.protobuf.Struct`` (docs/decisions.md#d5).

Tool arguments, tool input schemas, ``provider_options``, Configure's config and the config
schema are ``Struct`` on the wire. Every Struct number is an IEEE-754 double, so this module
enforces what a double can carry exactly and renders numbers back the way JSON wrote them:

* an integral number renders back as a JSON integer (``3``, never ``3.0``);
* an integer of magnitude above 2^53 is rejected, naming its path, instead of being rounded;
* ``NaN``, ``Infinity`` and ``-Infinity`` are rejected (they are not JSON);
* text with duplicate keys is not rejected (JSON allows it); the last value wins, as in ``json``.

All functions raise :class:`~protocol_py.errors.InvalidValueError` (a ``ValueError``) with the
offending path, and nothing else, for bad input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from protocol_py.errors import InvalidValueError
from protocol_py_gen.google.protobuf import ListValue, NullValue, Struct, Value

MAX_EXACT_INT = 2**53
"""Largest magnitude an integer may have to travel through a double exactly."""

MAX_DEPTH = 30
"""Deepest nesting of objects and arrays accepted (the top-level object is level 1).

Protobuf parsers refuse messages nested more than 100 levels deep, and every JSON level of a
Struct costs up to three message levels (Struct, map entry, Value). 30 JSON levels keep a tool
call's input inside a whole StreamCompletionRequest (five message levels above the Struct)
within that limit, so a value this module accepts is never refused by a peer's parser."""

JSONObject = dict[str, Any]


def _reject_constant(name: str) -> Any:
    raise InvalidValueError(f"not valid JSON: {name} is not a JSON number", rule="json.not_json")


def parse_json_object(text: str | bytes, *, path: str = "") -> JSONObject:
    """Parse JSON text that must be an object, and check it can travel as a Struct exactly.

    Args:
        text: JSON text (UTF-8 when bytes). Empty or whitespace-only text is the empty object,
            the way vendors send arguments of a parameterless tool call.
        path: Field path used in error messages, for example ``tool_use[0].input``.

    Returns:
        The parsed object.

    Raises:
        InvalidValueError: the text is not JSON (including ``NaN``/``Infinity``), is not an
            object, or holds an integer beyond 2^53.
    """
    if not isinstance(text, (str, bytes, bytearray)):
        raise InvalidValueError(
            f"{path or 'value'}: expected JSON text (str or bytes), got {type(text).__name__}",
            path=path,
            rule="value.wrong_type",
        )
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValueError(
                f"{path or 'value'}: not valid UTF-8: {exc}", path=path, rule="json.not_utf8"
            ) from None
    if not text.strip():
        return {}
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except InvalidValueError as exc:
        raise InvalidValueError(f"{path or 'value'}: {exc}", path=path, rule=exc.rule) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidValueError(
            f"{path or 'value'}: not valid JSON: {exc}", path=path, rule="json.not_json"
        ) from None
    if not isinstance(value, dict):
        raise InvalidValueError(
            f"{path or 'value'}: expected a JSON object, got {type(value).__name__}",
            path=path,
            rule="json.not_object",
        )
    check_json(value, path=path)
    return value


def _too_deep(where: str) -> InvalidValueError:
    return InvalidValueError(
        f"{where or 'value'}: nested more than {MAX_DEPTH} levels deep (deeper JSON would exceed "
        "protobuf's recursion limit of 100 message levels on the wire)",
        path=where,
        rule="json.too_deep",
    )


def _cyclic(where: str) -> InvalidValueError:
    return InvalidValueError(
        f"{where or 'value'}: the value contains itself (a reference cycle), which JSON cannot "
        "represent",
        path=where,
        rule="json.cyclic",
    )


def check_json(value: Any, *, path: str = "") -> None:
    """Check that a parsed JSON value can travel through a Struct exactly.

    Objects and arrays may be nested at most :data:`MAX_DEPTH` levels (the top-level value is
    level 1). A value may be shared by several parents, but must not contain itself.

    Raises:
        InvalidValueError: a non-JSON type (rule ``json.not_json``), a non-string key
            (``json.key_not_string``), a non-finite number (``json.not_finite``), an integer
            beyond 2^53 (``json.integer_beyond_2_53``), a reference cycle (``json.cyclic``) or
            nesting deeper than :data:`MAX_DEPTH` (``json.too_deep``), naming the path of the
            offending value.
    """
    _check(value, path, 1, set())


def _check(item: Any, where: str, depth: int, active: set[int]) -> None:
    if item is None or isinstance(item, (bool, str)):
        return
    if isinstance(item, int):
        if abs(item) > MAX_EXACT_INT:
            raise InvalidValueError(
                f"{where or 'value'}: integer {item} is beyond 2^53 and cannot be carried "
                "exactly in a google.protobuf.Struct (a double)",
                path=where,
                rule="json.integer_beyond_2_53",
            )
        return
    if isinstance(item, float):
        if not math.isfinite(item):
            raise InvalidValueError(
                f"{where or 'value'}: {item} is not a JSON number (NaN and Infinity are not "
                "valid JSON)",
                path=where,
                rule="json.not_finite",
            )
        return
    if not isinstance(item, (Mapping, list, tuple)):
        raise InvalidValueError(
            f"{where or 'value'}: {type(item).__name__} is not a JSON value",
            path=where,
            rule="json.not_json",
        )
    if id(item) in active:
        raise _cyclic(where)
    if depth > MAX_DEPTH:
        raise _too_deep(where)
    active.add(id(item))
    if isinstance(item, Mapping):
        for key, child in item.items():
            if not isinstance(key, str):
                raise InvalidValueError(
                    f"{where or 'value'}: object key {key!r} is not a string",
                    path=where,
                    rule="json.key_not_string",
                )
            _check(child, f"{where}.{key}" if where else key, depth + 1, active)
    else:
        for i, child in enumerate(item):
            _check(child, f"{where}[{i}]", depth + 1, active)
    active.discard(id(item))


def _to_value(item: Any) -> Value:
    if item is None:
        return Value(null_value=NullValue.NULL_VALUE)
    if isinstance(item, bool):
        return Value(bool_value=item)
    if isinstance(item, (int, float)):
        return Value(number_value=float(item))
    if isinstance(item, str):
        return Value(string_value=item)
    if isinstance(item, Mapping):
        return Value(struct_value=Struct(fields={k: _to_value(v) for k, v in item.items()}))
    return Value(list_value=ListValue(values=[_to_value(v) for v in item]))


def to_struct(obj: Mapping[str, Any], *, path: str = "") -> Struct:
    """Convert a parsed JSON object to a Struct, exactly.

    Raises:
        InvalidValueError: see :func:`check_json`; also when ``obj`` is not a mapping.
    """
    if not isinstance(obj, Mapping):
        raise InvalidValueError(
            f"{path or 'value'}: expected a JSON object, got {type(obj).__name__}",
            path=path,
            rule="json.not_object",
        )
    check_json(obj, path=path)
    return Struct(fields={k: _to_value(v) for k, v in obj.items()})


def _wrong(where: str, expected: str, value: Any) -> InvalidValueError:
    return InvalidValueError(
        f"{where or 'value'}: expected {expected}, got {type(value).__name__} {value!r:.60}",
        path=where,
        rule="value.wrong_type",
    )


_KINDS = ("null_value", "number_value", "string_value", "bool_value", "struct_value", "list_value")


def _from_value(value: Any, where: str, depth: int, active: set[int]) -> Any:
    if value is None:
        # A map entry with no value field is legal on the wire (the value takes its default, a
        # Value with no kind); betterproto2 decodes it as None. Read it as JSON null.
        return None
    if not isinstance(value, Value):
        raise _wrong(where, "a google.protobuf.Value", value)
    kinds = [k for k in _KINDS if getattr(value, k, None) is not None]
    if len(kinds) > 1:
        raise InvalidValueError(
            f"{where or 'value'}: a google.protobuf.Value holds exactly one kind, found "
            f"{', '.join(kinds)}",
            path=where,
            rule="json.value_multiple",
        )
    kind = kinds[0] if kinds else "null_value"
    item = getattr(value, kind, None)
    if kind == "struct_value":
        if not isinstance(item, Struct):
            raise _wrong(where, "a google.protobuf.Struct", item)
        return _from_struct(item, where, depth + 1, active)
    if kind == "list_value":
        if not isinstance(item, ListValue):
            raise _wrong(where, "a google.protobuf.ListValue", item)
        values = item.values
        if not isinstance(values, list):
            raise _wrong(where, "a list of google.protobuf.Value", values)
        if id(item) in active:
            raise _cyclic(where)
        if depth + 1 > MAX_DEPTH:
            raise _too_deep(where)
        active.add(id(item))
        out = [_from_value(v, f"{where}[{i}]", depth + 1, active) for i, v in enumerate(values)]
        active.discard(id(item))
        return out
    if kind == "string_value":
        if not isinstance(item, str):
            raise _wrong(where, "str", item)
        return item
    if kind == "bool_value":
        if not isinstance(item, bool):
            raise _wrong(where, "bool", item)
        return item
    if kind == "number_value":
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise _wrong(where, "a number (float)", item)
        if isinstance(item, int) and abs(item) > MAX_EXACT_INT:
            # betterproto2 lets an int in; the wire holds a double, which would round it
            raise InvalidValueError(
                f"{where or 'value'}: integer {item} is beyond 2^53 and cannot be carried "
                "exactly in a google.protobuf.Value (a double)",
                path=where,
                rule="json.integer_beyond_2_53",
            )
        number = float(item)
        if not math.isfinite(number):
            raise InvalidValueError(
                f"{where or 'value'}: {number} is not a JSON number",
                path=where,
                rule="json.not_finite",
            )
        if number.is_integer() and abs(number) <= MAX_EXACT_INT:
            return int(number)
        return number
    # null_value set, or a Value with no kind at all (read as JSON null, as protobuf does).
    return None


def _from_struct(struct: Struct, path: str, depth: int, active: set[int]) -> JSONObject:
    fields = struct.fields
    if not isinstance(fields, Mapping):
        raise _wrong(_join(path, "fields"), "a dict of str to google.protobuf.Value", fields)
    if id(struct) in active:
        raise _cyclic(path)
    if depth > MAX_DEPTH:
        raise _too_deep(path)
    active.add(id(struct))
    out: JSONObject = {}
    for key, value in fields.items():
        if not isinstance(key, str):
            raise _wrong(path, "str keys", key)
        out[key] = _from_value(value, _join(path, key), depth, active)
    active.discard(id(struct))
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def from_struct(struct: Struct | None, *, path: str = "") -> JSONObject:
    """Convert a Struct back to a JSON object; integral numbers come back as ``int``.

    ``None`` (an absent Struct field) converts to the empty object. A Value with no kind set, and
    a map entry with no Value at all (legal on the wire; betterproto2 gives ``None``), read as
    JSON null (as protobuf's JSON mapping does). A ``number_value`` holding a Python
    ``int`` (betterproto2 accepts one) is read as the double the wire would carry; one beyond
    2^53, which the double would round, is rejected.

    Raises:
        InvalidValueError: the Struct holds NaN or Infinity (rule ``json.not_finite``; possible on
            the wire, not in JSON), an ``int`` beyond 2^53 (``json.integer_beyond_2_53``), a
            Value with several kinds set (``json.value_multiple``), a field of the wrong Python
            type (``value.wrong_type``), a reference cycle (``json.cyclic``) or nesting deeper
            than :data:`MAX_DEPTH` (``json.too_deep``); the error names the offending path.
    """
    if struct is None:
        return {}
    if not isinstance(struct, Struct):
        raise _wrong(path, "a google.protobuf.Struct", struct)
    return _from_struct(struct, path, 1, set())


def dumps(obj: Any) -> str:
    """Render parsed JSON compactly and deterministically (keys in insertion order, no spaces,
    non-ASCII kept), the form used when a tool call's arguments are sent back to a vendor.

    Raises:
        InvalidValueError: ``obj`` is not JSON that a Struct can carry (see :func:`check_json`).
    """
    check_json(obj)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def structs_within(structs: Iterable[Struct | None], bound: int) -> bool:
    """Whether ``structs`` hold at most ``bound`` object members and array elements, at every
    depth and over all of them counted together (None: nothing); counting stops one past
    ``bound``, so a Struct of a million keys costs ``bound`` steps, never a pass over them all.
    A map entry without its value (possible on the wire) counts as a member."""
    seen = 0
    pending: list[Struct | ListValue] = [struct for struct in structs if struct is not None]
    while pending:
        node = pending.pop()
        values = node.fields.values() if isinstance(node, Struct) else node.values
        for value in values:
            seen += 1
            if seen > bound:
                return False
            if value is None:
                continue
            if value.struct_value is not None:
                pending.append(value.struct_value)
            elif value.list_value is not None:
                pending.append(value.list_value)
    return True
