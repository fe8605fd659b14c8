"""One request's decoded size and its violations are bounded whatever its shape: a tiny body of
millions of empty sub-messages is refused by the object budget of the fast decoder
(:data:`protocol_py.codec.wire.MAX_DECODED_OBJECTS`), a body the fast decoder does not cover is
never handed whole to betterproto2's unbounded parser
(:data:`protocol_py.server.grpc_layer.limits.MAX_FALLBACK_BYTES`, wrong wire types refused first),
and validation stops at :data:`protocol_py.rules.request.MAX_VIOLATIONS`. Each server test ends
with the server still serving."""

from __future__ import annotations

import time
from typing import Any

import pytest
from grpclib.exceptions import GRPCError

from protocol_py.codec import wire
from protocol_py.codec.field_merge import MAX_MERGE_FIELDS, MergeBudgetError
from protocol_py.codec.wire_gen import State, varint_bytes
from protocol_py.rules.request import (
    MAX_VIOLATIONS,
    TOO_MANY_VIOLATIONS_RULE,
    validate_request_shape,
)
from protocol_py.server.grpc_layer.limits import MAX_FALLBACK_BYTES, decode_request
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import ConfigureRequest, StreamCompletionRequest, StreamEvent

from ..support.proc import rss_bytes
from ._probes import upb_class
from .conftest import Served, acall, request, still_serving

MODEL = b"reference-small"
STREAM_REQUEST = "model.v1.StreamCompletionRequest"


def ld(number: int, payload: bytes) -> bytes:
    """A length-delimited field ``number`` holding ``payload``."""
    return varint_bytes(number << 3 | 2) + varint_bytes(len(payload)) + payload


def empty_messages(count: int) -> bytes:
    """A StreamCompletionRequest body of ``count`` empty ``messages`` (2 bytes each)."""
    return ld(2, MODEL) + b"\x0a\x00" * count


def frame_names(exc: BaseException) -> list[str]:
    """The function names of the frames ``exc``'s traceback holds, outermost first."""
    names = []
    tb = exc.__traceback__
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return names


async def _timed(served: Served, rpc: str, body: bytes, *, stream: bool = False) -> Any:
    before = rss_bytes()
    started = time.monotonic()
    result = await acall(served.address, rpc, body, stream=stream, timeout=120)
    seconds = time.monotonic() - started
    grown = (rss_bytes() - before) / 2**20
    print(f"{rpc} {len(body)} bytes -> {result.code} in {seconds:.2f} s, RSS +{grown:.0f} MiB")
    return result


async def test_a_body_of_more_empty_messages_than_the_budget_is_refused_naming_the_bound(
    served: Served,
) -> None:
    body = empty_messages(wire.MAX_DECODED_OBJECTS + 1)
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "RESOURCE_EXHAUSTED", result
    assert (
        f"request too large: StreamCompletionRequest ({len(body)} bytes) holds more than "
        f"{wire.MAX_DECODED_OBJECTS} repeated elements and map entries" in result.details
    )
    assert "MAX_DECODED_OBJECTS" in result.details
    counted = await _timed(served, "CountTokens", ld(1, MODEL) + b"\x12\x00" * 1_000_001)
    assert counted.code == "RESOURCE_EXHAUSTED", counted
    assert "CountTokensRequest" in counted.details and "MAX_DECODED_OBJECTS" in counted.details
    await still_serving(served)


async def test_a_struct_list_of_a_million_empty_values_in_a_config_is_refused(
    served: Served,
) -> None:
    # Value.list_value: a ListValue of empty Values
    values = ld(6, b"\x0a\x00" * (wire.MAX_DECODED_OBJECTS + 1))
    body = ld(1, ld(1, ld(1, b"k") + ld(2, values)))  # ConfigureRequest.config.fields["k"]
    result = await _timed(served, "Configure", body)
    assert result.code == "RESOURCE_EXHAUSTED", result
    assert "ConfigureRequest" in result.details and "MAX_DECODED_OBJECTS" in result.details
    await still_serving(served)


def test_the_budget_is_not_handed_to_betterproto2(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("betterproto2 parsed the body")

    monkeypatch.setattr(StreamCompletionRequest, "parse", classmethod(never))
    with pytest.raises(wire.DecodeBudgetError):
        wire.decode_report(StreamCompletionRequest, empty_messages(wire.MAX_DECODED_OBJECTS + 1))


async def test_empty_messages_under_the_budget_list_the_first_violations_and_say_more(
    served: Served,
) -> None:
    body = empty_messages(128 * 1024)  # a 256 KiB body
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "OK", result
    events = [StreamEvent.parse(r) for r in result.replies]
    assert len(events) == 1 and events[0].error is not None
    message = events[0].error.message
    assert message.startswith(f"invalid request: more than {MAX_VIOLATIONS} violation(s), first ")
    assert "messages[0].id: request.message.id_missing" in message
    await still_serving(served)


def test_validation_stops_at_max_violations_and_says_so() -> None:
    request = StreamCompletionRequest(model_id="m", messages=[Message() for _ in range(2000)])
    found = validate_request_shape(request)
    assert len(found) == MAX_VIOLATIONS + 1
    assert found[-1].rule == TOO_MANY_VIOLATIONS_RULE
    assert f"more than {MAX_VIOLATIONS} violations" in found[-1].message
    assert found[0].path == "messages[0].id"
    small = StreamCompletionRequest(model_id="m", messages=[Message() for _ in range(3)])
    assert TOO_MANY_VIOLATIONS_RULE not in {v.rule for v in validate_request_shape(small)}


def _wrong_wire_type_body(ids: int) -> bytes:
    # Message.role (field 1, an enum) sent length-delimited, then many empty ids
    return ld(2, MODEL) + ld(1, ld(1, b"id") + b"\x10\x01" + b"\x1a\x00" * ids)


def test_a_wrong_wire_type_is_refused_from_upbs_parse_before_any_fallback_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("betterproto2 parsed the body")

    monkeypatch.setattr(StreamCompletionRequest, "parse", classmethod(never))
    strict = upb_class("model.v1.StreamCompletionRequest")
    body = _wrong_wire_type_body(1000)
    assert len(body) <= MAX_FALLBACK_BYTES
    with pytest.raises(GRPCError) as caught:
        decode_request(body, StreamCompletionRequest, strict)
    assert caught.value.message == (
        f"malformed request: StreamCompletionRequest could not be decoded ({len(body)} bytes): "
        "StreamCompletionRequest.messages[0].role has wire type length-delimited, expected varint"
    )


async def test_a_2_mib_wrong_wire_type_body_is_refused_unparsed_and_the_server_serves(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    strict = upb_class("model.v1.StreamCompletionRequest")
    parsed: list[int] = []
    monkeypatch.setattr(strict, "FromString", lambda data: parsed.append(len(data)))
    body = _wrong_wire_type_body(1 << 20)
    with pytest.raises(GRPCError) as caught:
        decode_request(body, StreamCompletionRequest, strict)
    assert parsed == []  # neither upb nor betterproto2 parsed it
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "INVALID_ARGUMENT", result
    assert result.details == caught.value.message
    assert "a known field with the wrong wire type" in result.details
    assert f"a body over {MAX_FALLBACK_BYTES} bytes must be" in result.details
    await still_serving(served)


def _overlong_tag_messages(count: int) -> bytes:
    # each empty message's tag in two bytes (0x8a 0x00): legal, non-canonical
    return ld(2, MODEL) + b"\x8a\x00\x00" * count


def test_a_small_non_canonical_body_is_still_decoded_as_betterproto2_does() -> None:
    body = _overlong_tag_messages(10)
    strict = upb_class("model.v1.StreamCompletionRequest")
    decoded = decode_request(body, StreamCompletionRequest, strict)
    assert decoded == StreamCompletionRequest.parse(body)
    assert len(decoded.messages) == 10


async def test_a_non_canonical_body_over_the_fallback_bound_is_refused_naming_it(
    served: Served,
) -> None:
    body = _overlong_tag_messages(MAX_FALLBACK_BYTES // 3 + 1)
    assert len(body) > MAX_FALLBACK_BYTES
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "INVALID_ARGUMENT", result
    assert "not canonical well-formed protobuf (" in result.details
    assert "an over-long tag" in result.details
    assert f"a body over {MAX_FALLBACK_BYTES} bytes must be (bound MAX_FALLBACK_BYTES)" in (
        result.details
    )
    await still_serving(served)


def test_a_small_body_the_fast_decoder_does_not_cover_is_merged_before_betterproto2() -> None:
    # an over-long tag sends the body to the fallback parse; its call context comes in two
    body = _overlong_tag_messages(1) + ld(6, ld(1, b"s")) + ld(6, ld(2, b"t"))
    decoded = decode_request(body, StreamCompletionRequest, upb_class(STREAM_REQUEST))
    assert decoded.call_context == CallContext(session_id="s", turn_id="t")


async def test_a_call_context_sent_in_two_occurrences_is_merged_and_the_turn_served(
    served: Served,
) -> None:
    sent = request()
    sent.call_context = None
    # as a kernel appending fields to a request it serialized before: both reach the server
    body = bytes(sent) + ld(6, ld(1, b"sess-1")) + ld(6, ld(2, b"turn-1"))
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "OK", result
    events = [StreamEvent.parse(reply) for reply in result.replies]
    assert [e.error for e in events if e.error is not None] == []
    assert events[-1].stop is not None
    await still_serving(served)


async def test_a_body_with_more_fields_to_merge_than_the_bound_is_refused_naming_it(
    served: Served,
) -> None:
    unknown = varint_bytes(1000 << 3) + b"\x00"  # an unknown varint field, 3 bytes
    body = ld(6, ld(1, b"s")) + ld(6, ld(2, b"t")) + ld(2, MODEL) + unknown * MAX_MERGE_FIELDS
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "RESOURCE_EXHAUSTED", result
    assert (
        f"request too large: StreamCompletionRequest ({len(body)} bytes) sends a singular "
        f"message field or a oneof more than once and holds more than {MAX_MERGE_FIELDS} "
        "fields to merge (bound MAX_MERGE_FIELDS)"
    ) in result.details
    await still_serving(served)


def test_a_hundred_thousand_one_block_messages_fit_the_budget() -> None:
    request = StreamCompletionRequest(
        model_id="reference-large",
        messages=[
            Message(
                role=Role.USER,
                id=f"01J{i:023d}",
                content=[ContentBlock(text=TextBlock(text=f"m{i}"))],
            )
            for i in range(100_000)
        ],
        call_context=CallContext(session_id="s", turn_id="t"),
    )
    body = wire.encode(request)
    strict = upb_class("model.v1.StreamCompletionRequest")
    decoded = decode_request(body, StreamCompletionRequest, strict)
    assert len(decoded.messages) == 100_000  # 200,000 elements: messages and content blocks
    last = decoded.messages[-1].content[0].text
    assert last is not None and last.text == "m99999"


def test_exactly_the_budget_is_decoded_one_more_is_refused() -> None:
    body = b"\x0a\x00" * (wire.MAX_DECODED_OBJECTS - 1)
    decoded = wire.decode(StreamCompletionRequest, body + b"\x0a\x00")
    assert len(decoded.messages) == wire.MAX_DECODED_OBJECTS
    with pytest.raises(wire.DecodeBudgetError, match=f"more than {wire.MAX_DECODED_OBJECTS}"):
        wire.decode(StreamCompletionRequest, body + b"\x0a\x00\x0a\x00")


def test_the_budget_error_keeps_no_partial_message_alive() -> None:
    # a refused request's objects are freed at once (they were kept by the traceback)
    try:
        wire.decode_report(StreamCompletionRequest, empty_messages(wire.MAX_DECODED_OBJECTS + 1))
    except wire.DecodeBudgetError as exc:
        assert exc.__context__ is None and exc.__cause__ is None
        assert frame_names(exc) == [  # no frame of the generated decoder (the partial message)
            "test_the_budget_error_keeps_no_partial_message_alive",
            "decode_report",
            "_decode_fast",
        ]
    else:
        raise AssertionError("not refused")


def test_the_merge_budget_error_keeps_no_frame_of_the_rewrite_alive() -> None:
    # the rewrite's frames hold lists of millions of span offsets: a refused body's error
    # (kept by a GRPCError's context, in a cycle until a full collection) must not hold them
    body = ld(6, b"") * (MAX_MERGE_FIELDS + 1)
    try:
        wire.decode_report(StreamCompletionRequest, body)
    except MergeBudgetError as exc:
        assert frame_names(exc) == [
            "test_the_merge_budget_error_keeps_no_frame_of_the_rewrite_alive",
            "decode_report",
            "merged",
        ]
        assert exc.__context__ is None
    else:
        raise AssertionError("not refused")


def test_unknown_fields_count_against_the_element_budget() -> None:
    unknown = varint_bytes(1000 << 3) + b"\x00"
    decoded, _, exact = wire.decode_report(
        StreamCompletionRequest, ld(2, MODEL) + unknown * 10, state=State(10)
    )
    assert decoded._unknown_fields == unknown * 10
    assert not exact
    with pytest.raises(wire.DecodeBudgetError):
        wire.decode_report(StreamCompletionRequest, ld(2, MODEL) + unknown * 11, state=State(10))


async def test_a_body_of_more_unknown_fields_than_the_budget_is_refused_naming_the_bound(
    served: Served,
) -> None:
    # each unknown field took a copy of all those before it: 2,000,000 took minutes
    unknown = varint_bytes(1000 << 3) + b"\x00"
    body = ld(2, MODEL) + unknown * (wire.MAX_DECODED_OBJECTS + 1)
    result = await _timed(served, "StreamCompletion", body, stream=True)
    assert result.code == "RESOURCE_EXHAUSTED", result
    assert "unknown fields; bound MAX_DECODED_OBJECTS" in result.details
    await still_serving(served)


def test_configure_body_helper_is_a_configure_request() -> None:
    decoded = ConfigureRequest.parse(ld(1, ld(1, ld(1, b"k") + ld(2, ld(6, b"\x0a\x00" * 3)))))
    assert decoded.config is not None
    listed = decoded.config.fields["k"].list_value
    assert listed is not None and len(listed.values) == 3
