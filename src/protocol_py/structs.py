"""Exact conversion between JSON and ``google.protobuf.Struct`` (DESIGN D5).

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
from collections.abc import Mapping
from typing import Any

from protocol_py.errors import InvalidValueError
from protocol_py_gen.google.protobuf import ListValue, NullValue, Struct, Value

MAX_EXACT_INT = 2**53
"""Largest magnitude an integer may have to travel through a double exactly."""

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
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
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


def check_json(value: Any, *, path: str = "") -> None:
    """Check that a parsed JSON value can travel through a Struct exactly.

    Raises:
        InvalidValueError: a non-JSON type, a non-string key, a non-finite number, or an integer
            beyond 2^53 (naming its path).
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if item is None or isinstance(item, (bool, str)):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_EXACT_INT:
                raise InvalidValueError(
                    f"{where or 'value'}: integer {item} is beyond 2^53 and cannot be carried "
                    "exactly in a google.protobuf.Struct (a double)",
                    path=where,
                    rule="json.integer_beyond_2_53",
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidValueError(
                    f"{where or 'value'}: {item} is not a JSON number (NaN and Infinity are not "
                    "valid JSON)",
                    path=where,
                    rule="json.not_finite",
                )
            continue
        if isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidValueError(
                        f"{where or 'value'}: object key {key!r} is not a string",
                        path=where,
                        rule="json.key_not_string",
                    )
                stack.append((f"{where}.{key}" if where else key, child))
            continue
        if isinstance(item, (list, tuple)):
            for i, child in enumerate(item):
                stack.append((f"{where}[{i}]", child))
            continue
        raise InvalidValueError(
            f"{where or 'value'}: {type(item).__name__} is not a JSON value",
            path=where,
            rule="json.not_json",
        )


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


def _from_value(value: Value, where: str) -> Any:
    if value.struct_value is not None:
        return from_struct(value.struct_value, path=where)
    if value.list_value is not None:
        return [_from_value(v, f"{where}[{i}]") for i, v in enumerate(value.list_value.values)]
    if value.string_value is not None:
        return value.string_value
    if value.bool_value is not None:
        return value.bool_value
    if value.number_value is not None:
        number = value.number_value
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


def from_struct(struct: Struct | None, *, path: str = "") -> JSONObject:
    """Convert a Struct back to a JSON object; integral numbers come back as ``int``.

    ``None`` (an absent Struct field) converts to the empty object.

    Raises:
        InvalidValueError: the Struct holds NaN or Infinity (possible on the wire, not in JSON).
    """
    if struct is None:
        return {}
    return {
        key: _from_value(value, f"{path}.{key}" if path else key)
        for key, value in struct.fields.items()
    }


def dumps(obj: Any) -> str:
    """Render parsed JSON compactly and deterministically (keys in insertion order, no spaces,
    non-ASCII kept), the form used when a tool call's arguments are sent back to a vendor."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
