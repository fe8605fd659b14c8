"""A singular message field sent more than once is merged, and a oneof keeps its last member,
as protobuf's parsers (upb here) read them: ``wire.decode`` and ``wire.parse_merged`` agree with
upb on concatenated encodings of random messages of every class, on hand-made occurrences at
every level (a request's call context, a content block's oneof switching back and forth, a
Struct entry's value, a Duration) and on a 601-message conversation with a field appended; the
rewrite leaves clean input as it is and stops at its bounds.

https://protobuf.dev/programming-guides/encoding/#last-one-wins
"""

from __future__ import annotations

import datetime
from typing import Any

import betterproto2
import pytest
from google.protobuf import duration_pb2, struct_pb2  # type: ignore[import-untyped]
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from protocol_py.codec import field_merge, wire
from protocol_py.codec.field_merge import MAX_MERGE_DEPTH, MAX_ROPE_ITEMS, MergeBudgetError, merged
from protocol_py.codec.structs import to_struct
from protocol_py.codec.wire_gen import NeedsMergeError, varint_bytes
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolUseBlock,
)
from protocol_py_gen.google.protobuf import ListValue, Struct, Value
from protocol_py_gen.model.v1 import (
    ModelError,
    StreamCompletionRequest,
    StreamEvent,
    TextDelta,
    Usage,
)

from ..conftest import UpbClasses
from ..schema.test_messages import full_name, message_classes
from .test_wire import same, tag
from .test_wire_encode import messages

WELL_KNOWN: dict[str, Any] = {
    f"google.protobuf.{cls.__name__}": cls
    for cls in (struct_pb2.Struct, struct_pb2.Value, struct_pb2.ListValue, duration_pb2.Duration)
}
"""upb's classes of the well-known types, from protobuf's own modules."""


def agrees_with_upb(upb: UpbClasses, cls: type[Any], data: bytes) -> Any:
    """Assert that the fast decode and the slow path read ``data`` as upb does (compared as
    upb messages: maps in any order); the decoded message."""
    upb_cls = upb_class(upb, cls)
    expected = upb_cls.FromString(data)
    decoded = wire.decode(cls, data)
    assert upb_cls.FromString(wire.encode(decoded)) == expected
    same(decoded, wire.parse_merged(cls, data))
    return decoded


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited field ``number`` holding ``payload``."""
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def upb_class(upb: UpbClasses, cls: type[Any]) -> Any:
    name = full_name(cls)
    return WELL_KNOWN[name] if name in WELL_KNOWN else upb.message(name)


def encoded(message: betterproto2.Message) -> bytes | None:
    try:
        return wire.encode(message)
    except Exception:  # a value betterproto2 cannot encode (drawn out of range)
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(message_classes()).flatmap(
        lambda c: st.lists(messages(c), min_size=2, max_size=3)
    )
)
def test_concatenated_encodings_of_every_class_decode_as_upb_merges_them(
    upb: UpbClasses, parts: list[Any]
) -> None:
    cls = type(parts[0])
    pieces = [encoded(part) for part in parts]
    assume(None not in pieces)
    agrees_with_upb(upb, cls, b"".join(p for p in pieces if p is not None))


def test_a_call_context_sent_in_two_occurrences_keeps_every_field(upb: UpbClasses) -> None:
    first = bytes(
        StreamCompletionRequest(
            model_id="m", call_context=CallContext(session_id="s1", turn_id="t1")
        )
    )
    body = first + ld(6, ld(3, b"/tmp"))  # call_context.working_directory, appended
    decoded = agrees_with_upb(upb, StreamCompletionRequest, body)
    assert decoded.call_context == CallContext(
        session_id="s1", turn_id="t1", working_directory="/tmp"
    )
    alone = StreamCompletionRequest.parse(body)  # betterproto2's parse keeps the last whole
    assert alone.call_context == CallContext(working_directory="/tmp")


def test_a_oneof_keeps_its_last_member_merging_only_since_it_last_switched(
    upb: UpbClasses,
) -> None:
    text_a = ld(1, ld(1, b"a"))
    tool = ld(2, ld(1, b"call_1") + ld(2, b"shell"))
    text_c = ld(1, ld(1, b"c"))
    block = agrees_with_upb(upb, ContentBlock, text_a + tool + text_c)
    assert block == ContentBlock(text=TextBlock(text="c"))
    block = agrees_with_upb(upb, ContentBlock, tool + text_a)
    assert block == ContentBlock(text=TextBlock(text="a"))
    block = agrees_with_upb(upb, ContentBlock, text_a + tool + ld(2, ld(3, b"")))
    assert block == ContentBlock(tool_use=ToolUseBlock(id="call_1", name="shell", input=Struct()))
    # a scalar member after a message member, and a message member after a scalar one
    number = tag(2, 1) + b"\x00" * 7 + b"\x40"  # Value.number_value = 2.0
    assert agrees_with_upb(upb, Value, ld(5, b"") + number) == Value(number_value=2.0)
    assert agrees_with_upb(upb, Value, number + ld(6, b"")) == Value(list_value=ListValue())


def test_occurrences_merge_at_every_level_of_a_conversation(upb: UpbClasses) -> None:
    # messages[0].content[0].tool_use.input sent as two Structs: their entries join
    tool_use = ld(1, b"call_1") + ld(3, ld(1, ld(1, b"a") + ld(2, ld(3, b"x"))))
    tool_use += ld(3, ld(1, ld(1, b"b") + ld(2, tag(4, 0) + b"\x01")))
    message = tag(1, 0) + b"\x02" + ld(3, b"01J0") + ld(2, ld(2, tool_use))
    body = ld(2, b"m") + ld(1, message)
    decoded = agrees_with_upb(upb, StreamCompletionRequest, body)
    assert decoded.messages[0].content[0].tool_use.input == to_struct({"a": "x", "b": True})


def test_a_struct_entry_sending_its_value_twice_merges_the_values(upb: UpbClasses) -> None:
    inner = ld(1, ld(1, b"n") + ld(2, tag(4, 0) + b"\x01"))  # {"n": true}
    entry = ld(1, b"k") + ld(2, ld(3, b"text")) + ld(2, ld(5, inner))
    decoded = agrees_with_upb(upb, Struct, ld(1, entry))
    assert decoded == to_struct({"k": {"n": True}})
    assert decoded.fields["k"].string_value is None
    # two entries of one key: the last entry wins whole (map entries replace, not merge)
    again = ld(1, ld(1, b"k") + ld(2, tag(4, 0) + b"\x01"))
    assert agrees_with_upb(upb, Struct, ld(1, entry) + again) == to_struct({"k": True})


def test_a_duration_sent_in_two_occurrences_keeps_seconds_and_nanos(upb: UpbClasses) -> None:
    nanos = tag(2, 0) + varint_bytes(7000)  # 7 us
    body = ld(4, tag(1, 0) + b"\x05") + ld(4, nanos)
    error = agrees_with_upb(upb, ModelError, body)
    assert error.retry_after == datetime.timedelta(seconds=5, microseconds=7)
    assert error == wire.decode(ModelError, ld(4, tag(1, 0) + b"\x05" + nanos))


def test_a_long_conversation_with_a_field_appended_decodes_as_upb(upb: UpbClasses) -> None:
    history = [
        Message(
            role=Role.USER if i % 2 == 0 else Role.ASSISTANT,
            id=f"01J{i:023d}",
            content=[ContentBlock(text=TextBlock(text=f"turn {i} " + "x" * 200))],
        )
        for i in range(601)
    ]
    request = StreamCompletionRequest(
        model_id="m", messages=history, call_context=CallContext(session_id="s", turn_id="t")
    )
    body = bytes(request) + ld(6, ld(2, b"t2"))  # call_context.turn_id again, in a new occurrence
    decoded = agrees_with_upb(upb, StreamCompletionRequest, body)
    assert decoded.messages == history
    assert decoded.call_context == CallContext(session_id="s", turn_id="t2")
    assert len(merged(StreamCompletionRequest, body)) < len(body)


def test_a_field_sent_thousands_of_times_merges_as_upb(upb: UpbClasses) -> None:
    # more occurrences than a level's rewrite holds as pieces (MAX_ROPE_ITEMS)
    occurrences = [ld(6, ld(2, f"t{i}".encode())) for i in range(3 * MAX_ROPE_ITEMS)]
    occurrences[MAX_ROPE_ITEMS] = ld(6, ld(1, b"s") + ld(3, b"/w"))
    body = ld(2, b"m") + b"".join(occurrences)
    decoded = agrees_with_upb(upb, StreamCompletionRequest, body)
    last = f"t{3 * MAX_ROPE_ITEMS - 1}"
    assert decoded.call_context == CallContext(session_id="s", turn_id=last, working_directory="/w")


def test_a_oneof_switching_at_every_level_of_a_deep_chain_merges_as_upb(upb: UpbClasses) -> None:
    data = ld(3, b"leaf")
    for level in range(45):  # 90 message levels: a string, then the list holding the rest
        data = ld(3, f"dropped {level}".encode()) + ld(6, ld(1, data))
    decoded = agrees_with_upb(upb, Value, data)
    for _ in range(45):
        assert decoded.string_value is None
        decoded = decoded.list_value.values[0]
    assert decoded == Value(string_value="leaf")


@pytest.mark.parametrize(
    ("cls", "data"),
    [
        pytest.param(StreamEvent, ld(1, ld(1, b"hi")), id="one-occurrence"),
        pytest.param(TextDelta, ld(1, b"a") + ld(1, b"b"), id="scalar-twice"),
        pytest.param(StreamEvent, tag(1, 0) + b"\x05", id="wrong-wire-type"),
        pytest.param(TextDelta, b"\x0b\x0c", id="group"),
        pytest.param(StreamEvent, ld(8, b"") + tag(8, 2) + b"\x7f", id="length-past-end"),
    ],
)
def test_input_with_nothing_to_merge_or_not_well_formed_is_left_as_it_is(
    cls: type[Any], data: bytes
) -> None:
    assert merged(cls, data) is data


def test_the_generated_decoder_hands_a_second_occurrence_to_the_merge() -> None:
    from protocol_py.codec.wire_gen import GENERATOR, State  # noqa: PLC0415 (internal)

    data = ld(8, b"") + ld(8, tag(1, 0) + b"\x01")  # StreamEvent.usage twice
    with pytest.raises(NeedsMergeError):
        GENERATOR.decoder(StreamEvent)(data, 0, len(data), State(), 1)
    message, clean, exact = wire.decode_report(StreamEvent, data)
    assert message == StreamEvent(usage=Usage(input_tokens=1))
    assert clean
    assert exact


def test_the_merge_stops_at_its_field_budget_naming_it() -> None:
    body = ld(6, b"") + ld(6, b"") + (tag(1000, 0) + b"\x00") * 11  # 13 fields at the top
    assert merged(StreamCompletionRequest, body, limit=13) != body
    with pytest.raises(MergeBudgetError, match="more than 12 fields to merge"):
        merged(StreamCompletionRequest, body, limit=12)


def test_the_default_budget_is_read_when_the_merge_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(field_merge, "MAX_MERGE_FIELDS", 2)
    with pytest.raises(MergeBudgetError):
        wire.decode(StreamCompletionRequest, ld(6, b"") + ld(6, b"") + ld(1, b"m"))


def test_nesting_past_the_depth_bound_is_left_as_it_is() -> None:
    inner = ld(6, b"") + ld(6, b"")  # Value.list_value twice, at the bottom
    data = inner
    for _ in range(MAX_MERGE_DEPTH // 2 + 1):
        data = ld(6, ld(1, data))  # Value.list_value.values[0]
    assert merged(Value, data) is data
    shallow = inner
    for _ in range(3):
        shallow = ld(6, ld(1, shallow))
    assert merged(Value, shallow) != shallow
