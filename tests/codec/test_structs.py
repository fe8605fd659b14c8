"""protocol_py.codec.structs: exact JSON <-> google.protobuf.Struct (docs/decisions.md#d5)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from protocol_py.codec.structs import (
    MAX_DEPTH,
    MAX_EXACT_INT,
    check_json,
    dumps,
    from_struct,
    parse_json_object,
    to_struct,
)
from protocol_py.errors import InvalidValueError
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, ToolUseBlock
from protocol_py_gen.google.protobuf import ListValue, NullValue, Struct, Value
from protocol_py_gen.model.v1 import StreamCompletionRequest

SAMPLE: dict[str, Any] = {
    "s": "Grüße ✓",
    "i": 42,
    "neg": -7,
    "f": 0.1,
    "t": True,
    "false": False,
    "none": None,
    "list": [1, "two", [3.5, None], {"k": "v"}],
    "obj": {"nested": {"deep": [False]}},
    "empty_obj": {},
    "empty_list": [],
}


def wire(struct: Struct) -> Struct:
    return Struct.parse(bytes(struct))


# --- parse_json_object -----------------------------------------------------------------------


def test_parse_json_object_returns_the_object() -> None:
    assert parse_json_object(json.dumps(SAMPLE)) == SAMPLE
    assert parse_json_object(json.dumps(SAMPLE).encode("utf-8")) == SAMPLE


@pytest.mark.parametrize("text", ["", "   ", "\n\t", b""])
def test_empty_arguments_are_the_empty_object(text: str | bytes) -> None:
    assert parse_json_object(text) == {}


@pytest.mark.parametrize(
    ("text", "rule", "fragment"),
    [
        ('{"a": ', "json.not_json", "not valid JSON"),
        ("{'a': 1}", "json.not_json", "not valid JSON"),
        ('{"x": NaN}', "json.not_json", "not valid JSON"),
        ('{"x": -Infinity}', "json.not_json", "not valid JSON"),
        ("[1, 2]", "json.not_object", "expected a JSON object, got list"),
        ('"text"', "json.not_object", "expected a JSON object, got str"),
        ("null", "json.not_object", "expected a JSON object, got NoneType"),
        ('{"id": 9007199254740993}', "json.integer_beyond_2_53", "beyond 2^53"),
    ],
)
def test_parse_json_object_rejects_with_path_and_rule(text: str, rule: str, fragment: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(text, path="tool_use[0].input")
    assert info.value.rule == rule
    assert fragment in str(info.value)
    assert str(info.value).startswith("tool_use[0].input")


def test_parse_json_object_rejects_invalid_utf8() -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(b'{"a": "\xff"}', path="args")
    assert info.value.rule == "json.not_utf8"
    assert info.value.path == "args"
    assert "not valid UTF-8" in str(info.value)


def test_parse_json_object_deep_nesting_is_a_typed_error() -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_json_object('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert info.value.rule == "json.not_json"


def test_duplicate_keys_last_one_wins() -> None:
    assert parse_json_object('{"a": 1, "a": 2}') == {"a": 2}


# --- check_json ------------------------------------------------------------------------------


def test_check_json_accepts_the_exact_limits() -> None:
    check_json({"max": MAX_EXACT_INT, "min": -MAX_EXACT_INT, "t": (1, 2), "b": True})
    assert MAX_EXACT_INT == 2**53


@pytest.mark.parametrize(
    ("value", "path", "rule"),
    [
        ({"a": 2**53 + 1}, "a", "json.integer_beyond_2_53"),
        ({"a": [0, -(2**53) - 1]}, "a[1]", "json.integer_beyond_2_53"),
        ({"a": {"b": math.inf}}, "a.b", "json.not_finite"),
        ({"a": math.nan}, "a", "json.not_finite"),
        ({"a": {1: "x"}}, "a", "json.key_not_string"),
        ({"a": {"b", "c"}}, "a", "json.not_json"),
        ({"a": b"bytes"}, "a", "json.not_json"),
    ],
)
def test_check_json_names_the_offending_path(value: Any, path: str, rule: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        check_json(value)
    assert info.value.path == path
    assert info.value.rule == rule
    assert str(info.value).startswith(f"{path}: ")


def test_check_json_prefixes_the_given_path() -> None:
    with pytest.raises(InvalidValueError) as info:
        check_json({"x": [math.inf]}, path="params.provider_options")
    assert info.value.path == "params.provider_options.x[0]"


# --- to_struct / from_struct -----------------------------------------------------------------


def test_round_trip_through_the_wire_is_exact() -> None:
    back = from_struct(wire(to_struct(SAMPLE)))
    assert back == SAMPLE
    assert json.dumps(back) == json.dumps(SAMPLE)
    assert type(back["i"]) is int
    assert type(back["list"][0]) is int
    assert type(back["f"]) is float


def test_integral_floats_render_as_integers() -> None:
    # A JSON 3.0 and 3 are the same number; after a Struct they render as 3.
    assert from_struct(wire(to_struct({"n": 3.0}))) == {"n": 3}
    assert json.dumps(from_struct(wire(to_struct({"n": 3.0})))) == '{"n": 3}'
    assert from_struct(wire(to_struct({"n": -0.0}))) == {"n": 0}


def test_to_struct_builds_the_expected_values() -> None:
    struct = to_struct({"n": 1, "s": "x", "b": False, "z": None, "l": [True], "o": {}})
    assert struct.fields["n"] == Value(number_value=1.0)
    assert struct.fields["s"] == Value(string_value="x")
    assert struct.fields["b"] == Value(bool_value=False)
    assert struct.fields["z"] == Value(null_value=NullValue.NULL_VALUE)
    assert struct.fields["l"] == Value(list_value=ListValue(values=[Value(bool_value=True)]))
    assert struct.fields["o"] == Value(struct_value=Struct())
    assert list(struct.fields) == ["n", "s", "b", "z", "l", "o"]


@pytest.mark.parametrize("value", [[1, 2], "x", None, 3])
def test_to_struct_needs_a_mapping(value: Any) -> None:
    with pytest.raises(InvalidValueError) as info:
        to_struct(value, path="input_schema")
    assert info.value.rule == "json.not_object"
    assert info.value.path == "input_schema"


def test_to_struct_rejects_beyond_2_53_instead_of_rounding() -> None:
    with pytest.raises(InvalidValueError) as info:
        to_struct({"outer": {"id": 9007199254740993}}, path="input")
    assert info.value.path == "input.outer.id"


def test_from_struct_of_absent_field_is_empty_object() -> None:
    assert from_struct(None) == {}
    assert from_struct(Struct()) == {}


def test_from_struct_reads_a_kindless_value_as_null() -> None:
    assert from_struct(Struct(fields={"v": Value()})) == {"v": None}
    assert from_struct(wire(Struct(fields={"v": Value()}))) == {"v": None}


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_from_struct_rejects_non_finite_numbers_from_the_wire(number: float) -> None:
    peer = Struct(fields={"a": Value(list_value=ListValue(values=[Value(number_value=number)]))})
    with pytest.raises(InvalidValueError) as info:
        from_struct(wire(peer), path="config")
    assert info.value.path == "config.a[0]"
    assert info.value.rule == "json.not_finite"


def test_from_struct_keeps_large_non_integral_and_huge_doubles() -> None:
    assert from_struct(Struct(fields={"x": Value(number_value=1e300)})) == {"x": 1e300}
    assert type(from_struct(Struct(fields={"x": Value(number_value=1e300)}))["x"]) is float
    assert from_struct(Struct(fields={"x": Value(number_value=2.0**53)})) == {"x": 2**53}
    assert type(from_struct(Struct(fields={"x": Value(number_value=2.0**53)}))["x"]) is int


# --- dumps -----------------------------------------------------------------------------------


def test_dumps_is_compact_ordered_and_keeps_non_ascii() -> None:
    assert dumps({"b": 1, "a": "é", "l": [1, None]}) == '{"b":1,"a":"é","l":[1,null]}'
    assert dumps(from_struct(wire(to_struct({"n": 3, "f": 0.5})))) == '{"n":3,"f":0.5}'


def test_dumps_refuses_nan() -> None:
    with pytest.raises(InvalidValueError) as info:
        dumps({"x": math.nan})
    assert (info.value.rule, info.value.path) == ("json.not_finite", "x")
    assert isinstance(info.value, ValueError)


# --- cycles, depth and wrongly typed input ---------------------------------------------------


def test_to_struct_rejects_a_self_referencing_dict_naming_the_path() -> None:
    d: dict[str, Any] = {"a": {}}
    d["a"]["self"] = d
    with pytest.raises(InvalidValueError) as info:
        to_struct(d, path="input")
    assert info.value.rule == "json.cyclic"
    assert info.value.path == "input.a.self"


def test_to_struct_rejects_a_self_referencing_list() -> None:
    items: list[Any] = [1]
    items.append(items)
    with pytest.raises(InvalidValueError) as info:
        to_struct({"l": items})
    assert (info.value.rule, info.value.path) == ("json.cyclic", "l[1]")


def test_check_json_accepts_shared_but_acyclic_values() -> None:
    shared = {"k": [1, 2]}
    assert to_struct({"a": shared, "b": shared, "c": [shared, shared]}) == to_struct(
        {"a": {"k": [1, 2]}, "b": {"k": [1, 2]}, "c": [{"k": [1, 2]}, {"k": [1, 2]}]}
    )


def nested(depth: int) -> dict[str, Any]:
    value: Any = 0
    for _ in range(depth - 1):
        value = [value]
    return {"x": value}


def test_to_struct_depth_limit_is_max_depth_levels() -> None:
    assert MAX_DEPTH == 30
    to_struct(nested(MAX_DEPTH))  # the object plus 29 list levels: exactly at the limit
    with pytest.raises(InvalidValueError) as info:
        to_struct(nested(MAX_DEPTH + 1))
    assert info.value.rule == "json.too_deep"
    assert "30" in str(info.value)
    with pytest.raises(InvalidValueError) as info:
        to_struct(nested(50_000))
    assert info.value.rule == "json.too_deep"


def test_parse_json_object_depth_limit_matches_to_struct() -> None:
    text = json.dumps(nested(MAX_DEPTH + 1))
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(text, path="args")
    assert info.value.rule == "json.too_deep"
    assert info.value.path.startswith("args.x")


def deep_struct(depth: int) -> Struct:
    struct = Struct()
    for _ in range(depth - 1):
        struct = Struct(fields={"n": Value(struct_value=struct)})
    return struct


def test_from_struct_depth_limit_and_cycles() -> None:
    assert from_struct(deep_struct(MAX_DEPTH)) is not None
    with pytest.raises(InvalidValueError) as info:
        from_struct(deep_struct(MAX_DEPTH + 1))
    assert info.value.rule == "json.too_deep"
    loop = Struct()
    loop.fields["me"] = Value(struct_value=loop)
    with pytest.raises(InvalidValueError) as info:
        from_struct(loop, path="cfg")
    assert (info.value.rule, info.value.path) == ("json.cyclic", "cfg.me")


def test_from_struct_reads_an_int_number_value_as_a_double() -> None:
    # betterproto2 lets number_value hold a Python int; it is a double on the wire.
    assert from_struct(Struct(fields={"a": Value(number_value=5)})) == {"a": 5}
    # An int the double cannot carry exactly is rejected, as check_json rejects it
    # (docs/decisions.md#d5).
    with pytest.raises(InvalidValueError) as info:
        from_struct(Struct(fields={"a": Value(number_value=2**53 + 1)}), path="in")
    assert (info.value.rule, info.value.path) == ("json.integer_beyond_2_53", "in.a")


@pytest.mark.parametrize(
    ("struct", "path"),
    [
        ({"a": 1}, ""),
        ("text", ""),
        (Struct(fields=None), "fields"),  # type: ignore[arg-type]
        (Struct(fields={1: Value(bool_value=True)}), ""),  # type: ignore[dict-item]
        (Struct(fields={"a": Value(number_value="5")}), "a"),  # type: ignore[arg-type]
        (Struct(fields={"a": Value(number_value=True)}), "a"),
        (Struct(fields={"a": Value(string_value=5)}), "a"),  # type: ignore[arg-type]
        (Struct(fields={"a": Value(bool_value=1)}), "a"),  # type: ignore[arg-type]
        (Struct(fields={"a": Value(struct_value={"b": 1})}), "a"),  # type: ignore[arg-type]
        (Struct(fields={"a": Value(list_value=[1])}), "a"),  # type: ignore[arg-type]
        (Struct(fields={"a": Value(list_value=ListValue(values=[3]))}), "a[0]"),  # type: ignore[list-item]
        (Struct(fields={"a": Value(list_value=ListValue(values=None))}), "a"),  # type: ignore[arg-type]
    ],
)
def test_from_struct_rejects_wrongly_typed_input_with_a_typed_error(struct: Any, path: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        from_struct(struct)
    assert info.value.rule == "value.wrong_type"
    assert info.value.path == path


def test_from_struct_rejects_a_value_with_several_kinds() -> None:
    with pytest.raises(InvalidValueError) as info:
        from_struct(Struct(fields={"a": Value(number_value=1.0, string_value="x")}), path="in")
    assert (info.value.rule, info.value.path) == ("json.value_multiple", "in.a")


@pytest.mark.parametrize("text", [None, 5, ["{}"], {"a": 1}])
def test_parse_json_object_rejects_non_text_with_a_typed_error(text: Any) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(text, path="args")
    assert (info.value.rule, info.value.path) == ("value.wrong_type", "args")


def test_dumps_rejects_non_json_values_with_a_typed_error() -> None:
    with pytest.raises(InvalidValueError) as info:
        dumps({"a": object()})
    assert info.value.rule == "json.not_json"
    assert info.value.path == "a"
    d: dict[str, Any] = {}
    d["d"] = d
    with pytest.raises(InvalidValueError) as info:
        dumps(d)
    assert info.value.rule == "json.cyclic"


def test_from_struct_reads_a_map_entry_without_value_as_null() -> None:
    # Struct{fields: {"": <entry with no value field>}}: legal proto, the value is its default.
    wire_bytes = bytes([0x0A, 0x02, 0x0A, 0x00])
    decoded = Struct.parse(wire_bytes)
    assert from_struct(decoded) == {"": None}
    assert from_struct(Struct(fields={"a": None})) == {"a": None}  # type: ignore[dict-item]


def deep_object(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def test_a_struct_at_max_depth_inside_a_request_parses_with_protobufs_recursion_limit(
    upb: Any,
) -> None:
    request = StreamCompletionRequest(
        model_id="m",
        call_context=CallContext(session_id="s", turn_id="t"),
        messages=[
            Message(
                role=Role.ASSISTANT,
                id="a",
                content=[
                    ContentBlock(
                        tool_use=ToolUseBlock(
                            id="c", name="f", input=to_struct(deep_object(MAX_DEPTH))
                        )
                    )
                ],
            )
        ],
    )
    upb_class = upb.message("model.v1.StreamCompletionRequest")
    parsed = upb_class.FromString(bytes(request))  # raises DecodeError beyond the limit
    assert parsed.messages[0].content[0].tool_use.input.fields["n"].struct_value.fields
