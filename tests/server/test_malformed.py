"""Request bodies that are not well-formed protobuf are refused with INVALID_ARGUMENT before
anything is applied; legal-but-odd encodings never become INTERNAL."""

from __future__ import annotations

from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from protocol_py.codec.structs import to_struct
from protocol_py_gen.google.protobuf import Struct, Value
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    ConfigureResponse,
    CountTokensResponse,
    GetCapabilitiesResponse,
    RenderResponse,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
)

from ..support.servers import Running, make_request

SERVICE = "/model.v1.ModelService/"


class RawCodec(ProtoCodec):
    """Sends ``bytes`` requests as they are; decodes replies normally."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return bytes(super().encode(message, message_type))


async def raw_unary(running: Running, rpc: str, body: bytes, reply: Any) -> Any:
    channel = Channel("127.0.0.1", running.port, codec=RawCodec())
    try:
        async with channel.request(
            SERVICE + rpc, Cardinality.UNARY_UNARY, bytes, reply, timeout=10
        ) as stream:
            await stream.send_message(body, end=True)
            message = await stream.recv_message()
            await stream.recv_trailing_metadata()
            return message
    finally:
        channel.close()


async def raw_stream(running: Running, body: bytes) -> list[StreamEvent]:
    channel = Channel("127.0.0.1", running.port, codec=RawCodec())
    try:
        async with channel.request(
            SERVICE + "StreamCompletion", Cardinality.UNARY_STREAM, bytes, StreamEvent, timeout=10
        ) as stream:
            await stream.send_message(body, end=True)
            return [event async for event in stream]
    finally:
        channel.close()


async def stop_reason(running: Running) -> StopReason:
    events = await raw_stream(running, bytes(make_request("Hello there " * 20)))
    stops = [e.stop for e in events if e.stop is not None]
    assert len(stops) == 1, events
    return stops[0].reason


@pytest.mark.parametrize("body", ["ffffffff", "0a02ffff", "0a03ffffff", "0a"])
async def test_malformed_configure_is_invalid_argument_and_keeps_the_config(
    running: Running, body: str
) -> None:
    good = ConfigureRequest(config=to_struct({"max_tokens": 10}))
    assert await raw_unary(running, "Configure", bytes(good), ConfigureResponse) is not None
    assert await stop_reason(running) == StopReason.MAX_TOKENS
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, "Configure", bytes.fromhex(body), ConfigureResponse)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "could not be decoded" in (info.value.message or "")
    assert "ConfigureRequest" in (info.value.message or "")
    assert await stop_reason(running) == StopReason.MAX_TOKENS


@pytest.mark.parametrize(
    ("rpc", "body", "reply"),
    [
        ("CountTokens", b"\x0a\x0freference-large\x12\x03\xff\xff\xff", CountTokensResponse),
        ("GetCapabilities", b"\xff\xff\xff\xff", GetCapabilitiesResponse),
        ("Render", b"\xff\xff\xff\xff", RenderResponse),
    ],
)
async def test_malformed_unary_bodies_are_invalid_argument(
    running: Running, rpc: str, body: bytes, reply: Any
) -> None:
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, rpc, body, reply)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "could not be decoded" in (info.value.message or "")


async def test_malformed_stream_completion_is_invalid_argument_before_any_event(
    running: Running,
) -> None:
    with pytest.raises(GRPCError) as info:
        await raw_stream(running, b"\xff\xff\xff\xff")
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "StreamCompletionRequest could not be decoded" in (info.value.message or "")


async def test_unknown_fields_stay_legal(running: Running) -> None:
    # field 999 (varint) appended: a newer client's field; the request is still served.
    body = bytes(make_request("Hello there")) + b"\xb8\x3e\x01"
    events = await raw_stream(running, body)
    assert events[-1].stop is not None
    assert events[-1].stop.reason == StopReason.END_TURN


async def test_configure_struct_entry_without_value_reads_as_null(running: Running) -> None:
    # map entry key "" with no value: a Value with no kind, JSON null. The reference schema
    # forbids unknown keys, so this is the client's error: INVALID_ARGUMENT, never INTERNAL.
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, "Configure", bytes.fromhex("0a040a020a00"), ConfigureResponse)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "/: unknown property" in (info.value.message or "")


async def test_configure_kindless_value_is_null_for_a_nullable_key(running: Running) -> None:
    # {"max_tokens": <Value with no kind>} is {"max_tokens": null}: the schema's type check
    # names the key (not an AttributeError turned INTERNAL).
    entry = b"\x0a\x0amax_tokens"
    body = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, "Configure", body, ConfigureResponse)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "/max_tokens" in (info.value.message or "")


async def test_unknown_model_also_reports_the_spec_independent_violations(
    running: Running,
) -> None:
    events = await raw_stream(
        running, bytes(StreamCompletionRequest(model_id="no-such-model", messages=[]))
    )
    assert len(events) == 1 and events[0].error is not None
    message = events[0].error.message
    assert message.startswith("invalid request: 3 violation(s): ")
    assert "model_id: request.model_id.unknown" in message
    assert "messages: request.messages.empty" in message
    assert "call_context: request.call_context.missing" in message


async def test_empty_request_reports_every_violation_once(running: Running) -> None:
    events = await raw_stream(running, b"")
    assert len(events) == 1 and events[0].error is not None
    message = events[0].error.message
    assert message.startswith("invalid request: 3 violation(s): ")
    assert "model_id: request.model_id.empty" in message
    assert "model_id: request.model_id.unknown" not in message
    assert "messages: request.messages.empty" in message
    assert "call_context: request.call_context.missing" in message


async def test_nesting_beyond_protobufs_depth_limit_is_named(running: Running) -> None:
    # Built by hand: structs.to_struct itself refuses JSON this deep (structs.MAX_DEPTH).
    struct = Struct(fields={"a": Value(number_value=1.0)})
    for _ in range(40):  # 40 JSON levels = about 120 protobuf message levels
        struct = Struct(fields={"a": Value(struct_value=struct)})
    body = bytes(ConfigureRequest(config=struct))
    with pytest.raises(GRPCError) as info:
        await raw_unary(running, "Configure", body, ConfigureResponse)
    assert info.value.status == Status.INVALID_ARGUMENT
    assert "nested deeper than protobuf's limit of 100 message levels" in (info.value.message or "")
