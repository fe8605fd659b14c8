"""protocol_py.codec.wire: the fast codec equals betterproto2 (and upb) byte for byte, field for
field.

Every generated message class in every populated variant; hand-made wire input for the
sharp edges (unknown fields, duplicated fields, both oneof members, oneof members at their
default, proto3 optional presence, Struct edge cases, map entries without a value, unpacked
repeated scalars, wrong wire types, truncation, deep nesting); and the "clean" flag that lets
validation skip its type walk.
"""

from __future__ import annotations

import math
from typing import Any

import betterproto2
import pytest

from protocol_py.codec import metadata, wire
from protocol_py.codec.structs import to_struct
from protocol_py.rules.request import validate_request_shape
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import ListValue, NullValue, Struct, Value
from protocol_py_gen.model.v1 import (
    Capabilities,
    GenerationParams,
    ModelError,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    Usage,
)

from ..conftest import UpbClasses
from ..schema.test_messages import CASES, full_name, has_map, populate


def same(a: betterproto2.Message, b: betterproto2.Message) -> None:
    """Equal as betterproto2 compares, plus the unknown fields and field types it does not."""
    assert type(a) is type(b)
    assert a == b
    assert a._unknown_fields == b._unknown_fields
    for name in metadata.fields(type(a)):
        va, vb = getattr(a, name), getattr(b, name)
        assert type(va) is type(vb), name
        if isinstance(va, betterproto2.Message):
            same(va, vb)
        elif isinstance(va, list):
            for x, y in zip(va, vb, strict=True):
                if isinstance(x, betterproto2.Message):
                    same(x, y)
        elif isinstance(va, dict):
            assert list(va) == list(vb), f"{name}: map order"
            for key in va:
                if isinstance(va[key], betterproto2.Message):
                    same(va[key], vb[key])


@pytest.mark.parametrize(("cls", "variant"), CASES)
def test_every_class_encodes_and_decodes_like_betterproto2(
    cls: type[betterproto2.Message], variant: int
) -> None:
    msg = populate(cls, variant)
    data = bytes(msg)
    assert wire.encode(msg) == data
    decoded, clean = wire.decode_checked(cls, data)
    same(decoded, cls.parse(data))
    assert clean
    assert wire.encode(decoded) == data


@pytest.mark.parametrize(("cls", "variant"), CASES)
def test_every_class_agrees_with_upb(
    upb: UpbClasses, cls: type[betterproto2.Message], variant: int
) -> None:
    msg = populate(cls, variant)
    upb_msg = upb.message(full_name(cls)).FromString(bytes(msg))
    upb_bytes = upb_msg.SerializeToString()
    if has_map(cls):  # upb does not keep map order: compare by parsing back
        assert len(wire.encode(msg)) == len(upb_bytes)
        assert upb_msg == type(upb_msg).FromString(wire.encode(msg))
    else:
        assert wire.encode(msg) == upb_bytes
    assert wire.decode(cls, upb_bytes) == msg


def conversation(pairs: int) -> StreamCompletionRequest:
    history = [Message(role=Role.USER, id="m0", content=[ContentBlock(text=TextBlock(text="hi"))])]
    for i in range(1, pairs + 1):
        history.append(
            Message(
                role=Role.ASSISTANT,
                id=f"a{i}",
                content=[
                    ContentBlock(text=TextBlock(text=f"step {i} \u00e9\U0001f600")),
                    ContentBlock(
                        tool_use=ToolUseBlock(
                            id=f"c{i}",
                            name="shell",
                            input=to_struct({"z": i, "a": [1.5, None, True, {"k": "v"}], "m": {}}),
                        )
                    ),
                ],
            )
        )
        history.append(
            Message(
                role=Role.USER,
                id=f"u{i}",
                content=[
                    ContentBlock(
                        tool_result=ToolResultBlock(
                            tool_use_id=f"c{i}",
                            content=[ContentBlock(text=TextBlock(text="x" * 300))],
                        )
                    )
                ],
            )
        )
    return StreamCompletionRequest(
        model_id="m",
        messages=history,
        params=GenerationParams(temperature=0.0, max_output_tokens=5),
        call_context=CallContext(session_id="s", turn_id="t"),
    )


def test_a_conversation_round_trips_with_struct_keys_in_wire_order(upb: UpbClasses) -> None:
    request = conversation(20)
    data = bytes(request)
    assert wire.encode(request) == data
    decoded, clean = wire.decode_checked(StreamCompletionRequest, data)
    same(decoded, StreamCompletionRequest.parse(data))
    assert clean
    first_input = decoded.messages[1].content[1].tool_use.input  # type: ignore[union-attr]
    assert list(first_input.fields) == ["z", "a", "m"]  # the kernel's key order, kept
    upb_cls = upb.message("model.v1.StreamCompletionRequest")
    assert upb_cls.FromString(data) == upb_cls.FromString(wire.encode(decoded))


def tag(number: int, wire_type: int) -> bytes:
    value, out = (number << 3) | wire_type, bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes([*out, value])


def ld(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return tag(number, 2) + bytes([len(payload)]) + payload


TEXT_DELTA = ld(1, b"hi")  # TextDelta.text


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        # unknown fields of every wire type, kept verbatim in order, nested too
        pytest.param(TextDelta, TEXT_DELTA + b"\xa0\x06\x05" + ld(99, b"xyz"), id="unknown"),
        pytest.param(
            TextDelta,
            TEXT_DELTA + b"\xa9\x06" + b"\x00" * 8 + b"\xad\x06" + b"\x00" * 4,
            id="fixed",
        ),
        pytest.param(StreamEvent, ld(1, TEXT_DELTA + b"\xa0\x06\x01"), id="nested-unknown"),
        # a singular scalar twice: the last wins
        pytest.param(TextDelta, TEXT_DELTA + ld(1, b"again"), id="duplicate-scalar"),
        # two oneof members on the wire: the last wins (betterproto2 alone would keep both)
        pytest.param(StreamEvent, ld(1, TEXT_DELTA) + ld(8, b""), id="two-oneof-members"),
        # a singular message field twice: merged (betterproto2 alone would keep the last)
        pytest.param(
            StreamEvent, ld(8, tag(1, 0) + b"\x05") + ld(8, tag(2, 0) + b"\x07"), id="merged"
        ),
        # a oneof member at its default keeps its case
        pytest.param(StreamEvent, ld(1, b""), id="oneof-default"),
        pytest.param(Value, tag(2, 1) + b"\x00" * 8, id="number-zero"),
        pytest.param(Value, ld(3, b""), id="string-empty"),
        pytest.param(Value, tag(4, 0) + b"\x00", id="bool-false"),
        pytest.param(Value, tag(1, 0) + b"\x00", id="null"),
        # proto3 optional present at zero vs absent
        pytest.param(Usage, tag(1, 0) + b"\x00", id="optional-zero"),
        pytest.param(Usage, b"", id="empty"),
        # int64 negative (10-byte varint), unknown enum number
        pytest.param(Usage, tag(1, 0) + b"\xff" * 9 + b"\x01", id="negative-int64"),
        pytest.param(ModelError, tag(1, 0) + b"\x63", id="unknown-enum"),
        # Struct: map entries without value, without key, duplicate keys, NaN, nested lists
        pytest.param(Struct, ld(1, ld(1, b"k")), id="map-entry-without-value"),
        pytest.param(Struct, ld(1, ld(2, tag(4, 0) + b"\x01")), id="map-entry-without-key"),
        pytest.param(
            Struct,
            ld(1, ld(1, b"k") + ld(2, ld(3, b"a"))) + ld(1, ld(1, b"k") + ld(2, ld(3, b"b"))),
            id="map-duplicate-key",
        ),
        pytest.param(Value, tag(2, 1) + b"\x00\x00\x00\x00\x00\x00\xf8\x7f", id="nan"),
        pytest.param(ListValue, ld(1, ld(6, ld(1, b""))), id="nested-list"),
        # repeated strings; packed and unpacked repeated enums, one unknown
        pytest.param(
            GenerationParams, ld(5, b"a") + ld(5, b"") + tag(2, 0) + b"\x05", id="repeated-str"
        ),
        pytest.param(Capabilities, ld(2, b"\x01\x02\x63") + tag(2, 0) + b"\x03", id="packed"),
        # a Duration (wrapped as timedelta) and a present empty sub-message
        pytest.param(ModelError, ld(4, tag(1, 0) + b"\x05" + tag(2, 0) + b"\x07"), id="duration"),
        pytest.param(StreamEvent, ld(8, ld(6, b"")), id="empty-submessage"),
        # a known field with another wire type, groups, truncation: betterproto2 decides
        pytest.param(TextDelta, tag(1, 0) + b"\x05", id="wrong-wire-type"),
        pytest.param(TextDelta, b"\x0b\x0c", id="group"),
        pytest.param(StreamEvent, tag(1, 2) + b"\x05" + TEXT_DELTA, id="length-past-end"),
    ],
)
def test_edge_inputs_decode_as_betterproto2_after_protobufs_merge(
    cls: type[Any], data: bytes
) -> None:
    try:
        expected = wire.parse_merged(cls, data)
    except Exception as exc:
        with pytest.raises(type(exc)):
            wire.decode(cls, data)
        return
    decoded = wire.decode(cls, data)
    same(decoded, expected)
    try:
        encoded = bytes(expected)
    except Exception as exc:  # a map entry without its value: betterproto2 cannot encode it
        with pytest.raises(type(exc)):
            wire.encode(decoded)
    else:
        assert wire.encode(decoded) == encoded


def test_clean_flag_reports_what_the_type_walk_would_fix() -> None:
    assert wire.decode_checked(StreamEvent, ld(1, TEXT_DELTA))[1]
    assert not wire.decode_checked(ModelError, tag(1, 0) + b"\x63")[1]  # unknown enum number
    assert not wire.decode_checked(Struct, ld(1, ld(1, b"k")))[1]  # entry without its value
    assert not wire.decode_checked(TextDelta, tag(1, 0) + b"\x05")[1]  # fell back
    nested = Value(list_value=ListValue(values=[]))
    for _ in range(wire.MAX_FAST_DEPTH):
        nested = Value(list_value=ListValue(values=[nested]))
    data = bytes(nested)
    decoded, clean = wire.decode_checked(Value, data)
    assert decoded == Value.parse(data)
    assert not clean  # deeper than the fast path goes: betterproto2 decoded it


def test_encode_of_mistyped_values_behaves_as_betterproto2() -> None:
    for event in (
        StreamEvent(text_delta=TextDelta(text=3)),  # type: ignore[arg-type]
        StreamEvent(usage=Usage(input_tokens="3")),  # type: ignore[arg-type]
        Struct(fields={"k": None}),  # type: ignore[dict-item]
        Usage(input_tokens=-(2**64)),
    ):
        try:
            expected = bytes(event)
        except Exception as exc:
            with pytest.raises(type(exc)):
                wire.encode(event)
        else:
            assert wire.encode(event) == expected


def test_float_fields_keep_signed_zero_and_nan() -> None:
    for value in (0.0, -0.0, math.nan, math.inf, 1e-300):
        params = GenerationParams(temperature=value)
        assert wire.encode(params) == bytes(params)
        got = wire.decode(GenerationParams, bytes(params)).temperature
        assert got is not None
        if math.isnan(value):
            assert math.isnan(got)
        else:
            assert got == value
            assert math.copysign(1, got) == math.copysign(1, value)
    value_msg = Value(number_value=-0.0)
    assert wire.encode(value_msg) == bytes(value_msg)


def test_decoded_size_and_clean_marks_follow_the_message() -> None:
    request = conversation(1)
    data = bytes(request)
    decoded = wire.decode(StreamCompletionRequest, data)
    assert wire.wire_size(decoded) == 0
    assert not wire.take_wire_clean(decoded)
    wire.mark_decoded(decoded, len(data), True)
    assert wire.wire_size(decoded) == len(data)
    assert wire.take_wire_clean(decoded)
    assert not wire.take_wire_clean(decoded)  # once
    assert wire.wire_size(decoded) == len(data)
    other = wire.decode(StreamCompletionRequest, data)
    assert wire.wire_size(other) == 0


def test_validation_skips_the_type_walk_only_for_a_clean_marked_request() -> None:
    request = conversation(2)
    data = bytes(request)
    decoded, clean = wire.decode_checked(StreamCompletionRequest, data)
    assert clean
    expected = validate_request_shape(request)
    wire.mark_decoded(decoded, len(data), clean)
    assert validate_request_shape(decoded) == expected
    # unmarked (or after its one use), a caller-built wrong type is still caught
    decoded.model_id = 5  # type: ignore[assignment]
    with pytest.raises(Exception, match="model_id"):
        validate_request_shape(decoded)


def test_null_value_enum_and_struct_to_dict_survive() -> None:
    struct = to_struct({"a": None, "b": [1, "x", False], "c": {"d": 2.5}})
    decoded = wire.decode(Struct, bytes(struct))
    assert decoded.fields["a"].null_value == NullValue.NULL_VALUE
    assert decoded.to_dict() == struct.to_dict()
