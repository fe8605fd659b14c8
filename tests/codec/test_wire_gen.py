"""protocol_py.codec.wire's specialised generated code equals betterproto2 and upb.

The generated decoders read fields into locals, decode sub-messages and Struct map entries
inline (:data:`protocol_py.codec.wire_gen.INLINE_LEVELS` levels), read one- and two-byte tags and
lengths inline, leave the bound check of a length to the message's final position check, and
set the instance's attributes at the end; the generated encoders write every part into one
list. These tests pin each of those paths against ``cls.parse`` / ``bytes(message)`` (field
for field, attribute order included) and against upb's encoding: at the inline and depth
boundaries, with non-canonical and overlong varints, lengths running past their message,
long fields (2- and 3-byte lengths, strings of 1 MiB and more), and random mutations of valid
encodings of every message class.
"""

from __future__ import annotations

import random
from typing import Any

import betterproto2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_py.codec import metadata, wire
from protocol_py.codec.structs import to_struct
from protocol_py.codec.wire_gen import LARGE_STRING
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import ListValue, Struct, Value
from protocol_py_gen.model.v1 import (
    Capabilities,
    GenerationParams,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
)

from ..conftest import UpbClasses
from ..schema.test_messages import full_name, message_classes, populate, variant_count
from .test_wire import ld, same, tag

MUTATIONS_PER_CLASS = 40
"""Random mutations of each class's valid encodings decoded (fixed seed: reproducible)."""


def same_layout(a: betterproto2.Message, b: betterproto2.Message) -> None:
    """``same`` plus the instance attribute order (``vars``) at every level."""
    same(a, b)
    layout(a, b)


def layout(a: Any, b: Any) -> None:
    if isinstance(a, betterproto2.Message):
        assert list(vars(a)) == list(vars(b)), type(a).__name__
        for name in metadata.fields(type(a)):
            layout(getattr(a, name), getattr(b, name))
    elif isinstance(a, list):
        for x, y in zip(a, b, strict=True):
            layout(x, y)
    elif isinstance(a, dict):
        for key in a:
            layout(a[key], b[key])


def decodes_like_betterproto2(cls: type[Any], data: bytes) -> None:
    """``wire.decode`` returns what betterproto2's parse returns after protobuf's merge of a
    field sent more than once (``wire.parse_merged``), or raises what it raises."""
    try:
        expected = wire.parse_merged(cls, data)
    except Exception as exc:
        with pytest.raises(type(exc)):
            wire.decode(cls, data)
        return
    same_layout(wire.decode(cls, data), expected)


def levels(message: betterproto2.Message) -> int:
    """Message levels of ``message`` on the wire (a map entry is one level, as in
    betterproto2, whose entries are messages)."""
    deepest = 0
    for name in metadata.fields(type(message)):
        value = getattr(message, name)
        items = value.values() if isinstance(value, dict) else value
        for item in items if isinstance(value, (list, dict)) else [value]:
            if isinstance(item, betterproto2.Message):
                deepest = max(deepest, levels(item) + isinstance(value, dict))
    return 1 + deepest


LEAVES: list[Value] = [
    Value(string_value="leaf"),  # 1 level
    Value(struct_value=Struct()),  # 2 levels, the Struct inline in Value's decoder
    Value(list_value=ListValue(values=[Value()])),  # 3 levels
]
"""Leaves of 1, 2 and 3 levels: with wraps of 3 and 2 levels every depth is reached."""


def nested_value(wraps: int, leaf: Value) -> Value:
    """``leaf`` wrapped ``wraps`` times, alternately in a ListValue and a Struct entry."""
    value = leaf
    for i in range(wraps):
        if i % 2:
            value = Value(list_value=ListValue(values=[value]))
        else:
            value = Value(struct_value=Struct(fields={"k": value}))
    return value


def nested_block(wraps: int, leaf: ContentBlock) -> ContentBlock:
    block = leaf
    for _ in range(wraps):
        block = ContentBlock(tool_result=ToolResultBlock(tool_use_id="t", content=[block]))
    return block


def roots(wraps: int) -> list[betterproto2.Message]:
    """Nested messages under each root class, so that the depth bound is met at every inline
    level of every generated function (a root decodes its first levels inline, and each leaf
    is a message of its own)."""
    out: list[betterproto2.Message] = []
    for leaf in LEAVES:
        value = nested_value(wraps, leaf)
        tool_use = ContentBlock(tool_use=ToolUseBlock(id="c", input=Struct(fields={"a": value})))
        out += [value, Struct(fields={"a": value}), ListValue(values=[value]), tool_use]
        message = Message(content=[tool_use])
        out += [message, StreamCompletionRequest(messages=[message])]
    for block_leaf in (ContentBlock(text=TextBlock(text="leaf")), ContentBlock()):  # 2, 1 levels
        block = nested_block(wraps, block_leaf)
        out += [block, ToolResultBlock(content=[block]), Message(content=[block])]
        out += [StreamCompletionRequest(messages=[Message(content=[block])])]
    return out


def test_the_depth_bound_is_exact_at_every_inline_level() -> None:
    """Inline sub-messages and map entries count their levels as calls did: a message of
    exactly MAX_FAST_DEPTH levels is decoded by the fast path (clean), one level more falls
    back to betterproto2 (same message, not clean)."""
    seen: dict[str, set[int]] = {}
    for wraps in range(16, 34):
        for message in roots(wraps):
            over = levels(message) - wire.MAX_FAST_DEPTH
            if abs(over) > 1:
                continue
            data = bytes(message)
            decoded, clean = wire.decode_checked(type(message), data)
            same_layout(decoded, type(message).parse(data))
            assert clean == (over <= 0), (type(message).__name__, over)
            seen.setdefault(type(message).__name__, set()).add(over)
    assert all(sides >= {0, 1} for sides in seen.values()), seen  # both sides, every root
    assert len(seen) == 7  # Value, Struct, ListValue, ContentBlock, ToolResultBlock, ...


def test_instances_hold_attributes_in_the_constructor_order() -> None:
    request = StreamCompletionRequest(
        model_id="m",
        messages=[
            Message(
                role=Role.ASSISTANT,
                id="a",
                content=[
                    ContentBlock(text=TextBlock(text="t")),
                    ContentBlock(
                        tool_use=ToolUseBlock(id="c", name="n", input=to_struct({"x": 1}))
                    ),
                ],
            )
        ],
        params=GenerationParams(max_output_tokens=5),
    )
    decoded = wire.decode(StreamCompletionRequest, bytes(request))
    same_layout(decoded, request)
    # the attributes are real instance attributes: mutation and vars() behave as for parse()
    decoded.messages[0].content[0].text.text = "changed"  # type: ignore[union-attr]
    assert vars(decoded.messages[0].content[0].text)["text"] == "changed"
    assert decoded != request
    assert repr(StreamCompletionRequest.parse(bytes(request))) == repr(request)
    assert repr(wire.decode(StreamCompletionRequest, bytes(request))) == repr(request)


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        # a one-byte tag written in two bytes (0x8a 0x00 is tag 10): betterproto2 decides
        pytest.param(TextDelta, b"\x8a\x00\x02hi", id="overlong-tag"),
        pytest.param(StreamEvent, ld(1, b"\x8a\x00\x02hi"), id="overlong-tag-inline"),
        # lengths written in more bytes than needed
        pytest.param(TextDelta, b"\x0a\x82\x00hi", id="overlong-length-2"),
        pytest.param(TextDelta, b"\x0a\x82\x80\x00hi", id="overlong-length-3"),
        pytest.param(StreamEvent, b"\x0a\x84\x00" + b"\x0a\x02hi", id="overlong-sub-length"),
        pytest.param(Struct, b"\x0a\x86\x00" + ld(1, b"k") + ld(2, b""), id="overlong-entry"),
        # a length running past its message but not past the data
        pytest.param(StreamEvent, ld(1, b"\x0a\x05hi") + b"abc", id="string-past-message"),
        pytest.param(Struct, ld(1, ld(1, b"k") + b"\x12\x09") + ld(3, b"x") * 3, id="entry-past"),
        pytest.param(ContentBlock, ld(3, ld(2, b"\x0a\x07")) + b"\x0a\x03abc", id="inline-past"),
        # a length past the end of the data, one- and two-byte
        pytest.param(TextDelta, b"\x0a\x05hi", id="past-end"),
        pytest.param(TextDelta, b"\x0a\x80\x01hi", id="past-end-2"),
        pytest.param(TextDelta, b"\x0a\x80", id="cut-length"),
        # unknown fields inside a map entry (betterproto2 drops them) and inside inline levels
        pytest.param(Struct, ld(1, ld(1, b"k") + b"\x18\x01" + ld(2, ld(3, b"v"))), id="entry-unk"),
        pytest.param(
            ContentBlock,
            ld(3, ld(2, ld(1, ld(1, b"t") + b"\x10\x07")) + b"\x78\x01"),
            id="deep-unk",
        ),
        # a field number of two tag bytes next to the one-byte ones
        pytest.param(TextDelta, ld(1, b"a") + tag(16, 0) + b"\x01" + ld(1, b"b"), id="tag-16"),
        # repeated: unpacked and packed enums, both in one message; a repeated inline message
        pytest.param(Capabilities, tag(2, 0) + b"\x01" + ld(2, b"\x02\x03"), id="packed-mixed"),
        pytest.param(Capabilities, ld(2, b"\x80\x01\x02"), id="packed-wide"),
        # a map entry repeated and out of order (value before key)
        pytest.param(Struct, ld(1, ld(2, ld(3, b"v")) + ld(1, b"k")) * 2, id="entry-reordered"),
    ],
)
def test_uncommon_encodings_decode_exactly_as_betterproto2(cls: type[Any], data: bytes) -> None:
    decodes_like_betterproto2(cls, data)


def test_long_fields_encode_and_decode_like_betterproto2_and_upb(upb: UpbClasses) -> None:
    """2- and 3-byte lengths on every kind of length-delimited field, through the inline
    levels and map entries; a string of LARGE_STRING bytes and more (the no-copy path)."""
    for size in (127, 128, 16383, 16384, LARGE_STRING, LARGE_STRING + 3):
        text = ("é" * (size // 2 + 1))[: size // 2] + "x" * (size % 2)
        struct = to_struct({"k" * min(size, 300): text, "n": [text[:200], 1.5]})
        request = StreamCompletionRequest(
            model_id=text[:1000],
            messages=[
                Message(
                    role=Role.ASSISTANT,
                    content=[
                        ContentBlock(text=TextBlock(text=text)),
                        ContentBlock(tool_use=ToolUseBlock(id="c", name="n", input=struct)),
                        ContentBlock(
                            tool_result=ToolResultBlock(
                                tool_use_id="c", content=[ContentBlock(text=TextBlock(text=text))]
                            )
                        ),
                    ],
                )
            ],
        )
        data = bytes(request)
        assert wire.encode(request) == data
        upb_cls = upb.message("model.v1.StreamCompletionRequest")
        assert upb_cls.FromString(data) == upb_cls.FromString(wire.encode(request))
        decoded, clean = wire.decode_checked(StreamCompletionRequest, data)
        assert clean
        same_layout(decoded, StreamCompletionRequest.parse(data))
        assert wire.encode(decoded) == data


def test_encode_writes_a_sub_message_of_a_subclass_and_empty_parts() -> None:
    class Special(TextBlock):
        pass

    request = StreamCompletionRequest(
        messages=[
            Message(content=[ContentBlock(text=Special(text="s")), ContentBlock(text=TextBlock())]),
            Message(),
        ],
        params=GenerationParams(),
    )
    assert wire.encode(request) == bytes(request)
    unknown = wire.decode(StreamEvent, ld(1, b"\x0a\x01a" + b"\x78\x05") + b"\x80\x01\x01")
    assert unknown._unknown_fields == b"\x80\x01\x01"
    assert wire.encode(unknown) == bytes(unknown)


def mutations(data: bytes, rng: random.Random) -> list[bytes]:
    """Flipped, inserted, deleted, truncated and duplicated bytes of ``data``."""
    out = []
    for _ in range(4):
        buf = bytearray(data)
        if not buf:
            out.append(bytes([rng.randrange(256) for _ in range(rng.randrange(1, 6))]))
            continue
        i = rng.randrange(len(buf))
        kind = rng.randrange(5)
        if kind == 0:
            buf[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            buf.insert(i, rng.randrange(256))
        elif kind == 2:
            del buf[i]
        elif kind == 3:
            del buf[i:]
        else:
            buf[i:i] = buf[i : i + rng.randrange(1, 8)]
        out.append(bytes(buf))
    return out


@pytest.mark.parametrize("cls", message_classes(), ids=full_name)
def test_mutated_encodings_of_every_class_decode_exactly_as_betterproto2(
    cls: type[betterproto2.Message],
) -> None:
    rng = random.Random(full_name(cls))
    valid = [bytes(populate(cls, variant)) for variant in range(variant_count(cls))]
    tried = 0
    while tried < MUTATIONS_PER_CLASS:
        for data in mutations(rng.choice(valid), rng):
            decodes_like_betterproto2(cls, data)
            tried += 1


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=8), JSON, max_size=5))
def test_random_structs_round_trip_like_betterproto2(value: dict[str, Any]) -> None:
    struct = to_struct(value)
    tool_use = ContentBlock(tool_use=ToolUseBlock(id="c", name="n", input=struct))
    request = StreamCompletionRequest(messages=[Message(content=[tool_use])])
    for message in (struct, tool_use, request):
        data = bytes(message)
        assert wire.encode(message) == data
        decoded = wire.decode(type(message), data)
        same_layout(decoded, type(message).parse(data))
