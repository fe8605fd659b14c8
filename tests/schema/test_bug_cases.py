"""Bug cases B23, B24, B25 (testdata/cases/, copied from the shared cases) with exact values.

Mapping onto this protocol: StreamEvent.text_delta is field 1 and StreamEvent.stop field 12 of the
oneof ``event``, exactly as B23 assumes; text_delta carries a TextDelta message, so the case's
``text_delta = ''`` is ``TextDelta(text="")``. B24's binary case (``optional int32 min_budget_tokens
= 2``) is BudgetControl.default here (field 2, ``optional int64``): the same tag byte and the same
presence rule. B25's Struct rules are protocol_py.codec.structs (docs/decisions.md#d5). The general
rule behind each case is tested beside it over every member / path.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import betterproto2
import pytest

from protocol_py.codec import metadata
from protocol_py.codec.structs import from_struct, parse_json_object, to_struct
from protocol_py.errors import InvalidValueError
from protocol_py_gen.google.protobuf import Struct
from protocol_py_gen.model.v1 import BudgetControl, Stop, StreamEvent, TextDelta

CASES_DIR = Path(__file__).resolve().parents[2] / "testdata" / "cases"


def load_case(case_id: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CASES_DIR / f"{case_id}.json").read_text("utf-8"))
    assert case["id"] == case_id
    return case


def field_number(cls: type[betterproto2.Message], name: str) -> int:
    return metadata.field_number(cls, name)


def empty_member_hex(number: int) -> str:
    """Wire bytes of a oneof message member set to the all-default message: tag, length 0."""
    tag = (number << 3) | 2
    assert tag < 0x80, "single-byte tag"
    return f"{tag:02x}00"


# --- B23: oneof member that is an empty message ---------------------------------------------


def test_stop_with_all_default_fields() -> None:
    expected = load_case("B23")["expected"]
    assert field_number(StreamEvent, "stop") == 12  # the case's assumption holds here
    event = StreamEvent(stop=Stop())
    assert bytes(event).hex() == expected["bytes_hex"] == "6200"
    parsed = StreamEvent.parse(bytes.fromhex(expected["bytes_hex"]))
    name, value = betterproto2.which_one_of(parsed, "event")
    assert [name, repr(value)] == expected["which_one_of_after_parse"] == ["stop", "Stop()"]
    assert value == Stop()


def test_text_delta_with_empty_text() -> None:
    also = load_case("B23")["expected"]["also_empty_string_member"]
    assert field_number(StreamEvent, "text_delta") == 1
    event = StreamEvent(text_delta=TextDelta(text=""))
    assert bytes(event).hex() == also["bytes_hex"] == "0a00"
    name, value = betterproto2.which_one_of(StreamEvent.parse(bytes.fromhex("0a00")), "event")
    expected_name, expected_text = also["which_one_of_after_parse"]
    assert (name, value) == (expected_name, TextDelta(text=expected_text))


@pytest.mark.parametrize(
    "member",
    [f.name for f in dataclasses.fields(StreamEvent)],
)
def test_every_event_member_set_to_its_default_message_keeps_its_case(
    member: str,
) -> None:
    member_cls = metadata.fields(StreamEvent)[member].cls
    event = StreamEvent(**{member: member_cls()})
    data = bytes(event)
    assert data.hex() == empty_member_hex(field_number(StreamEvent, member))
    assert betterproto2.which_one_of(StreamEvent.parse(data), "event") == (member, member_cls())
    back = StreamEvent.from_dict(event.to_dict())
    assert betterproto2.which_one_of(back, "event") == (member, member_cls())


# --- B24: presence of zero values ------------------------------------------------------------


def test_binary_explicit_zero_and_unset() -> None:
    binary = load_case("B24")["expected"]["binary"]
    assert field_number(BudgetControl, "default") == 2  # same field number as the case's
    explicit = BudgetControl(default=0)
    assert bytes(explicit).hex() == binary["explicit_zero_bytes_hex"] == "1000"
    assert BudgetControl.parse(bytes(explicit)).default == binary["explicit_zero_after_parse"]
    assert BudgetControl.parse(bytes(explicit)).default == 0
    unset = BudgetControl()
    assert bytes(unset).hex() == binary["unset_bytes_hex"] == ""
    assert BudgetControl.parse(bytes(unset)).default is binary["unset_after_parse"] is None


def test_binary_rule_holds_in_json_and_for_other_values() -> None:
    assert BudgetControl(default=0).to_dict() == {"default": "0"}
    assert BudgetControl.from_dict({"default": "0"}).default == 0
    assert BudgetControl.from_dict({}).default is None
    assert BudgetControl(default=-1).to_dict() == {"default": "-1"}
    assert BudgetControl.parse(bytes(BudgetControl(default=2**40))).default == 2**40


def test_json_oneof_member_at_default() -> None:
    case_json = load_case("B24")["expected"]["json"]
    # The case's member is a string; ours is TextDelta, whose empty text renders as {}.
    assert case_json["to_dict"] == {"textDelta": ""}
    event = StreamEvent(text_delta=TextDelta(text=case_json["to_dict"]["textDelta"]))
    assert event.to_dict() == {"textDelta": {}}
    back = StreamEvent.from_dict(event.to_dict())
    expected_name, expected_text = case_json["which_one_of_after_from_dict"]
    assert betterproto2.which_one_of(back, "event") == (
        expected_name,
        TextDelta(text=expected_text),
    )
    assert betterproto2.which_one_of(back, "event") == ("text_delta", TextDelta(text=""))


# --- B25: Struct / Value conversion ----------------------------------------------------------


def test_metadata_struct_renders_back_exactly() -> None:
    case = load_case("B25")
    source = case["input"]["metadata_struct_from_dict"]
    expected = case["expected"]["metadata"]
    assert expected["bytes(Struct.from_dict(d)) raises"] is False
    data = bytes(Struct.from_dict(source))  # must not raise
    assert bytes(to_struct(source)) == data
    rendered = json.dumps(from_struct(Struct.parse(data)))
    assert rendered == expected["decoded_then_rendered_json"] == '{"vendor": "openai", "n": 3}'


def test_tool_arguments_beyond_2_53_name_the_field() -> None:
    case = load_case("B25")
    text = case["expected"]["tool_arguments"]["input"]
    assert text == case["input"]["tool_arguments_json"]
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(text)
    assert info.value.path == "id"
    assert str(info.value).startswith("id: integer 9007199254740993 ")
    assert "2^53" in str(info.value)
    assert "cannot be carried exactly" in str(info.value)


def test_nan_is_not_valid_json() -> None:
    nan = load_case("B25")["expected"]["nan"]
    assert nan["result"] == "a clear error: not valid JSON"
    with pytest.raises(InvalidValueError, match="not valid JSON"):
        parse_json_object(nan["input"])


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": {"b": [1, -9007199254740993]}}', "a.b[1]"),
        ('{"count": 3, "id": 18446744073709551615}', "id"),
        ('{"q": [{"r": 9007199254740994}]}', "q[0].r"),
    ],
)
def test_any_integer_beyond_2_53_is_rejected_with_its_path(text: str, path: str) -> None:
    with pytest.raises(InvalidValueError) as info:
        parse_json_object(text, path="tool_use.input")
    assert info.value.path == f"tool_use.input.{path}"
    assert "2^53" in str(info.value)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_not_valid_json(constant: str) -> None:
    with pytest.raises(InvalidValueError, match="not valid JSON"):
        parse_json_object(f'{{"x": [{constant}]}}')


def test_exact_integers_up_to_2_53_survive_the_wire() -> None:
    source = {"max": 2**53, "min": -(2**53), "n": 3, "f": 2.5, "z": 0}
    back = from_struct(Struct.parse(bytes(to_struct(source))))
    assert back == source
    assert [type(v) for v in back.values()] == [int, int, int, float, int]
