"""protocol_py.codec.wire's generated encoders against betterproto2, on random messages.

Messages of every generated class are drawn from the class's own field table: every proto
type, lengths on both sides of the one-, two- and three-byte length prefixes, every oneof
member, maps, repeated fields, nesting past the levels encoded inline (a class inside itself
included), and unknown fields at any level. ``wire.encode`` must give exactly ``bytes(message)``
(or raise what it raises); decoding the result must give the message back, unknown fields
included. Values of the wrong Python type at every inline level go to betterproto2.
"""

from __future__ import annotations

import datetime
from typing import Any

import betterproto2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol_py.codec import metadata, wire
from protocol_py.codec.structs import to_struct
from protocol_py.codec.wire_gen import ENCODE_INLINE_LEVELS, TWO_BYTE_LENGTHS, varint_bytes
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    VendorData,
)
from protocol_py_gen.google.protobuf import ListValue, Struct, Value
from protocol_py_gen.model.v1 import StreamCompletionRequest

from ..schema.test_messages import message_classes
from .test_wire import same

BOUNDARY_LENGTHS = (0, 1, 127, 128, 129, TWO_BYTE_LENGTHS - 1, TWO_BYTE_LENGTHS, 16383, 16384)
"""Lengths where the encoded length prefix changes form (table, two-byte table, computed)."""

UNKNOWN_NUMBERS = st.integers(min_value=1000, max_value=1100)
"""Field numbers no generated class uses."""

DEEPEST = ENCODE_INLINE_LEVELS + 2
"""Message levels drawn below the top one: past the inline levels."""


def _sized(chars: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Strings of a boundary length (one character repeated) or short random ones."""
    return st.one_of(
        st.text(max_size=12),
        st.builds(lambda c, n: c * n, chars, st.sampled_from(BOUNDARY_LENGTHS)),
    )


TEXT = _sized(st.characters(codec="utf-8") | st.sampled_from("aé✓\U0001f600"))
BLOBS = st.one_of(
    st.binary(max_size=12),
    st.builds(
        lambda b, n: b * n, st.binary(min_size=1, max_size=1), st.sampled_from(BOUNDARY_LENGTHS)
    ),
)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    betterproto2.TYPE_BOOL: st.booleans(),
    betterproto2.TYPE_STRING: TEXT,
    betterproto2.TYPE_BYTES: BLOBS,
    betterproto2.TYPE_INT32: INT32,
    betterproto2.TYPE_SINT32: INT32,
    betterproto2.TYPE_SFIXED32: INT32,
    betterproto2.TYPE_INT64: INT64,
    betterproto2.TYPE_SINT64: INT64,
    betterproto2.TYPE_SFIXED64: INT64,
    betterproto2.TYPE_UINT32: st.integers(0, 2**32 - 1),
    betterproto2.TYPE_FIXED32: st.integers(0, 2**32 - 1),
    betterproto2.TYPE_UINT64: st.integers(0, 2**64 - 1),
    betterproto2.TYPE_FIXED64: st.integers(0, 2**64 - 1),
    betterproto2.TYPE_DOUBLE: st.floats(allow_nan=False),
    betterproto2.TYPE_FLOAT: st.floats(width=32, allow_nan=False),
}
WRAPPED: dict[str, st.SearchStrategy[Any]] = {
    "Timestamp": st.datetimes(
        min_value=datetime.datetime(1970, 1, 1),
        max_value=datetime.datetime(2200, 1, 1),
        timezones=st.just(datetime.UTC),
    ),
    # not negative: betterproto2 encodes a negative Duration's nanos with the wrong sign, and
    # the codec encodes it as protobuf does (tests/codec/test_durations.py, against upb)
    "Duration": st.timedeltas(
        min_value=datetime.timedelta(0), max_value=datetime.timedelta(days=999)
    ),
}


def unknown_fields() -> st.SearchStrategy[bytes]:
    """Wire data of fields numbered past every class's own: varints and length-delimited."""
    varint_field = st.builds(
        lambda n, v: varint_bytes(n << 3) + varint_bytes(v),
        UNKNOWN_NUMBERS,
        st.integers(0, 2**64 - 1),
    )
    delimited = st.builds(
        lambda n, b: varint_bytes((n << 3) | 2) + varint_bytes(len(b)) + b, UNKNOWN_NUMBERS, BLOBS
    )
    return st.lists(varint_field | delimited, max_size=2).map(b"".join)


def field_value(meta: metadata.Field, depth: int) -> st.SearchStrategy[Any]:
    """A value of one singular field (a map key or value included)."""
    if meta.proto_type == betterproto2.TYPE_ENUM:
        return st.sampled_from(list(meta.cls))
    if meta.proto_type != betterproto2.TYPE_MESSAGE:
        return SCALARS[meta.proto_type]
    if meta.unwrap is not None:
        return WRAPPED[meta.unwrap().__name__]
    if depth >= DEEPEST:
        return st.builds(meta.cls)
    return st.deferred(lambda: messages(meta.cls, depth + 1))


def messages(cls: type[betterproto2.Message], depth: int = 0) -> st.SearchStrategy[Any]:
    """An instance of ``cls``: each field unset or drawn, at most one member of each oneof,
    maybe unknown fields."""
    fields = metadata.fields(cls)
    groups: dict[str, list[str]] = {}
    for name, meta in fields.items():
        if meta.group:
            groups.setdefault(meta.group, []).append(name)
    drawn: dict[str, st.SearchStrategy[Any]] = {}
    for name, meta in fields.items():
        if meta.map_key is not None and meta.map_value is not None:
            drawn[name] = st.dictionaries(
                field_value(meta.map_key, depth), field_value(meta.map_value, depth), max_size=3
            )
        elif meta.repeated:
            drawn[name] = st.lists(field_value(meta, depth), max_size=3)
        else:
            drawn[name] = st.none() | field_value(meta, depth)
    chosen = st.fixed_dictionaries(
        {group: st.none() | st.sampled_from(members) for group, members in groups.items()}
    )

    def build(values: dict[str, Any], members: dict[str, str | None], unknown: bytes) -> Any:
        kwargs = {}
        for name, value in values.items():
            group = fields[name].group
            if value is None or (group is not None and members[group] != name):
                continue
            kwargs[name] = value
        message = cls(**kwargs)
        message._unknown_fields = unknown
        return message

    return st.builds(build, st.fixed_dictionaries(drawn), chosen, unknown_fields())


CLASSES = message_classes()
CLASS_MESSAGES = st.sampled_from(CLASSES).flatmap(messages)

JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=30,
)


def encodes_like_betterproto2(message: betterproto2.Message) -> bytes | None:
    """Assert that ``wire.encode(message)`` equals ``bytes(message)`` (or raises the same
    exception type); the bytes, or None when betterproto2 raised."""
    try:
        expected = bytes(message)
    except Exception as exc:
        with pytest.raises(type(exc)):
            wire.encode(message)
        return None
    assert wire.encode(message) == expected
    assert wire.encoded_size(message) == len(expected)
    return expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CLASS_MESSAGES)
def test_random_messages_of_every_class_encode_as_betterproto2(message: Any) -> None:
    data = encodes_like_betterproto2(message)
    assert data is not None
    same(wire.decode(type(message), data), type(message).parse(data))
    assert wire.decode(type(message), data)._unknown_fields == message._unknown_fields


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(Message, 1), max_size=4), unknown_fields())
def test_random_conversations_encode_as_betterproto2(history: list[Any], unknown: bytes) -> None:
    request = StreamCompletionRequest(model_id="m", messages=history)
    request._unknown_fields = unknown
    data = encodes_like_betterproto2(request)
    assert data is not None
    decoded = wire.decode(StreamCompletionRequest, data)
    assert decoded == request
    assert decoded._unknown_fields == unknown
    for got, sent in zip(decoded.messages, history, strict=True):
        assert got._unknown_fields == sent._unknown_fields
        for got_block, sent_block in zip(got.content, sent.content, strict=True):
            assert got_block._unknown_fields == sent_block._unknown_fields


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(TEXT, JSON, max_size=4))
def test_nested_struct_inputs_encode_as_betterproto2(value: dict[str, Any]) -> None:
    block = ContentBlock(tool_use=ToolUseBlock(id="c", name="f", input=to_struct(value)))
    request = StreamCompletionRequest(
        messages=[Message(role=Role.ASSISTANT, content=[block])],
    )
    data = encodes_like_betterproto2(request)
    assert data is not None
    assert wire.decode(StreamCompletionRequest, data) == request


def test_struct_nested_past_the_inline_levels_encodes_as_betterproto2() -> None:
    nested: dict[str, Any] = {"leaf": [1.5, None, True, "x"]}
    for depth in range(9):
        nested = {f"k{depth}": nested, "list": [nested, {"n": depth}]}
        struct = to_struct(nested)
        assert wire.encode(struct) == bytes(struct)
    value = Value(string_value="v")
    for _ in range(9):
        value = Value(list_value=ListValue(values=[value, Value(struct_value=Struct())]))
        assert wire.encode(value) == bytes(value)


class SubBlock(TextBlock):
    """A subclass: not the exact class the inline code is written for."""


def wrapped(block: ContentBlock) -> StreamCompletionRequest:
    """A request holding ``block`` three message levels down (inline in the request's encoder)."""
    return StreamCompletionRequest(messages=[Message(role=Role.USER, content=[block])])


@pytest.mark.parametrize(
    "block",
    [
        ContentBlock(text=SubBlock(text="sub")),
        ContentBlock(text=TextBlock(text=3)),  # type: ignore[arg-type]
        ContentBlock(text=TextBlock(text=b"bytes")),  # type: ignore[arg-type]
        ContentBlock(text=TextBlock(text="t", vendor_data=(VendorData(location="x"),))),  # type: ignore[arg-type]
        ContentBlock(text=TextBlock(text="t", vendor_data=[None])),  # type: ignore[list-item]
        ContentBlock(text="plain"),  # type: ignore[arg-type]
        ContentBlock(tool_use=ToolUseBlock(id="i", name="n", input={"a": 1})),  # type: ignore[arg-type]
        ContentBlock(tool_use=ToolUseBlock(id="i", input=Struct(fields={"a": None}))),  # type: ignore[dict-item]
        ContentBlock(
            tool_use=ToolUseBlock(id="i", input=Struct(fields={1: Value(bool_value=True)}))  # type: ignore[dict-item]
        ),
        ContentBlock(tool_use=ToolUseBlock(id="i", input=Struct(fields=[]))),  # type: ignore[arg-type]
        ContentBlock(tool_result=ToolResultBlock(tool_use_id="i", content=None)),  # type: ignore[arg-type]
        ContentBlock(tool_result=ToolResultBlock(tool_use_id="i", is_error=1)),  # type: ignore[arg-type]
        ContentBlock(
            tool_result=ToolResultBlock(
                tool_use_id="i",
                content=[ContentBlock(text=TextBlock(text=str(i))) for i in range(3)],
            )
        ),
    ],
)
def test_unexpected_values_at_inline_levels_encode_as_betterproto2(block: ContentBlock) -> None:
    for message in (block, wrapped(block)):
        encodes_like_betterproto2(message)


def test_a_subclass_sub_message_keeps_its_unknown_fields() -> None:
    inner = SubBlock(text="sub")
    inner._unknown_fields = varint_bytes(1000 << 3) + b"\x05"
    request = wrapped(ContentBlock(text=inner))
    data = encodes_like_betterproto2(request)
    assert data is not None
    decoded = wire.decode(StreamCompletionRequest, data)
    text = decoded.messages[0].content[0].text
    assert text is not None
    assert text.text == "sub"
    assert text._unknown_fields == inner._unknown_fields
