"""Clear statuses, never a bare UNKNOWN.

Each malformed or refused call gets INVALID_ARGUMENT, DEADLINE_EXCEEDED, UNAVAILABLE or
RESOURCE_EXHAUSTED (never UNKNOWN "Internal Server Error"), no ERROR record or traceback in
the log, exactly one JSON record for the call, and the server still serves afterwards. Frames
no gRPC client sends (truncated, a lying length prefix, ``grpc-timeout: 1n``) go out over raw
HTTP/2 (the ``h2`` package).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import h2.config
import h2.connection
import pytest

from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import ConfigureRequest, StreamCompletionRequest

from ..support.h2_client import request_headers
from .conftest import (
    Captured,
    Served,
    acall,
    frame,
    raw_call,
    request,
    serve,
    still_serving,
)


async def one_record(logs: Captured, rpc: str) -> dict[str, Any]:
    """The single JSON record logged for ``rpc`` (waits up to 5 s for it to be emitted)."""
    for _ in range(100):
        found = [r for r in logs.rpc_records() if r["rpc"] == rpc]
        if found:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)  # a second record, if any, would be logged by now
    found = [r for r in logs.rpc_records() if r["rpc"] == rpc]
    assert len(found) == 1, found
    return found[0]


def role_as_length_delimited(role_field: bytes = b"\x0a\x01x") -> bytes:
    """A StreamCompletionRequest whose one message has ``role`` (field 1, an enum: varint)
    sent length-delimited; ``role_field`` replaces that field."""
    rest = bytes(Message(content=[ContentBlock(text=TextBlock(text="hi"))], id="m1"))
    message = role_field + rest
    model_id = b"\x12\x0freference-large"
    return model_id + b"\x0a" + bytes([len(message)]) + message


WRONG_WIRE_TYPES = [
    ("StreamCompletion", b"\x10\x05", "StreamCompletionRequest.model_id has wire type varint"),
    (
        "StreamCompletion",
        role_as_length_delimited(),
        "messages[0].role has wire type length-delimited, expected varint",
    ),
    ("CountTokens", b"\x10\x05", "CountTokensRequest.messages has wire type varint"),
    ("Render", b"\x0a\x01a\x10\x05", "RenderRequest.payload has wire type varint"),
    ("Configure", b"\x08\x05", "ConfigureRequest.config has wire type varint"),
]


@pytest.mark.parametrize(("rpc", "body", "named"), WRONG_WIRE_TYPES)
async def test_wrong_wire_type_is_invalid_argument_naming_the_field(
    served: Served, logs: Captured, rpc: str, body: bytes, named: str
) -> None:
    result = await acall(served.address, rpc, body, stream=rpc == "StreamCompletion")
    assert result.code == "INVALID_ARGUMENT", result
    assert "malformed request" in result.details
    assert named in result.details
    record = await one_record(logs, rpc)
    assert record["outcome"] == "error"
    assert record["error_kind"] == "INVALID_ARGUMENT"
    assert logs.errors() == []
    await still_serving(served)


def test_role_fixture_is_otherwise_well_formed() -> None:
    # the same bytes with role as a varint (USER) parse: only the wire type is at fault
    parsed = StreamCompletionRequest.parse(role_as_length_delimited(b"\x08\x01"))
    assert parsed.model_id == "reference-large"
    assert parsed.messages[0].role == Role.USER
    assert parsed.messages[0].content[0].text == TextBlock(text="hi")


RAW_FRAMES = [
    ("truncated prefix", b"\x00\x00\x00"),
    ("prefix longer than body", b"\x00\x00\x00\x00\x64" + b"\x12\x02ab"),
]
# an empty body (no message at all) is INTERNAL: test_request_cardinality.py


@pytest.mark.parametrize("rpc", ["StreamCompletion", "Render", "Configure"])
@pytest.mark.parametrize(("what", "data"), RAW_FRAMES, ids=[c[0] for c in RAW_FRAMES])
async def test_truncated_frames_are_invalid_argument(
    served: Served, logs: Captured, rpc: str, what: str, data: bytes
) -> None:
    reply = await raw_call(served.port, rpc, data)
    assert reply.grpc_status == "3", (what, reply)  # INVALID_ARGUMENT
    assert "truncated" in reply.grpc_message or "missing" in reply.grpc_message
    record = await one_record(logs, rpc)
    assert record["error_kind"] == "INVALID_ARGUMENT"
    assert logs.errors() == []
    await still_serving(served)


@pytest.mark.parametrize("grpc_timeout", ["1n", "1u", "0n", "0S", "999u"])
@pytest.mark.parametrize("rpc", ["StreamCompletion", "Describe", "Configure"])
async def test_expired_grpc_timeout_is_deadline_exceeded(
    served: Served, logs: Captured, rpc: str, grpc_timeout: str
) -> None:
    body = bytes(request()) if rpc == "StreamCompletion" else b""
    reply = await raw_call(
        served.port, rpc, frame(body), extra_headers=[("grpc-timeout", grpc_timeout)]
    )
    assert reply.grpc_status == "4", reply  # DEADLINE_EXCEEDED
    assert "deadline exceeded" in reply.grpc_message
    record = await one_record(logs, rpc)
    assert record["outcome"] == "deadline_exceeded"
    assert record["error_kind"] == "DEADLINE_EXCEEDED"
    assert logs.errors() == []
    await still_serving(served)


@pytest.mark.parametrize("grpc_timeout", ["abc", "1x", "-1S", "123456789S", "S"])
async def test_malformed_grpc_timeout_is_invalid_argument(
    served: Served, logs: Captured, grpc_timeout: str
) -> None:
    reply = await raw_call(
        served.port, "Describe", frame(b""), extra_headers=[("grpc-timeout", grpc_timeout)]
    )
    assert reply.grpc_status == "3", reply
    assert "grpc-timeout" in reply.grpc_message
    record = await one_record(logs, "Describe")
    assert record["error_kind"] == "INVALID_ARGUMENT"
    assert logs.errors() == []
    await still_serving(served)


async def test_a_usable_short_deadline_still_dispatches(served: Served, logs: Captured) -> None:
    reply = await raw_call(
        served.port, "Describe", frame(b""), extra_headers=[("grpc-timeout", "5S")]
    )
    assert reply.grpc_status == "0", reply
    assert (await one_record(logs, "Describe"))["outcome"] == "ok"


@pytest.mark.parametrize("rpc", ["StreamCompletion", "Describe"])
async def test_call_refused_while_draining_is_unavailable_with_one_record(
    logs: Captured, rpc: str
) -> None:
    run = await serve()
    try:
        run.server.mark_draining()
        body = bytes(request()) if rpc == "StreamCompletion" else b""
        result = await acall(run.address, rpc, body, stream=rpc == "StreamCompletion")
        assert result.code == "UNAVAILABLE", result
        assert result.details == "server is shutting down"
        record = await one_record(logs, rpc)
        assert record["error_kind"] == "UNAVAILABLE"
        assert logs.errors() == []
    finally:
        await run.server.shutdown(grace_period=0)


@pytest.mark.parametrize("rpc", ["StreamCompletion", "Configure"])
async def test_oversized_request_is_resource_exhausted_with_one_record(
    logs: Captured, rpc: str
) -> None:
    run = await serve(max_message_size=4096)
    try:
        body = (
            bytes(request("x " * 5000))
            if rpc == "StreamCompletion"
            else bytes(ConfigureRequest())
            + b"\x0a"
            + b"\x90\x4e"
            + b"\x00" * 10000  # config of 10,000 bytes
        )
        result = await acall(run.address, rpc, body, stream=rpc == "StreamCompletion")
        assert result.code == "RESOURCE_EXHAUSTED", result
        assert "exceeds the maximum message size of 4096 bytes" in result.details
        record = await one_record(logs, rpc)
        assert record["error_kind"] == "RESOURCE_EXHAUSTED"
        assert logs.errors() == []
        await still_serving(run)
    finally:
        await run.server.shutdown(grace_period=0)


def _send_part_then_reset(port: int, rpc: str) -> None:
    """Announce a 1,000-byte message, send 10 bytes of it, then reset the stream."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, request_headers(port, rpc))
    conn.send_data(1, b"\x00\x00\x00\x03\xe8" + b"\x12\x08" + b"a" * 8)
    sock.sendall(conn.data_to_send())
    sock.settimeout(0.3)
    with contextlib.suppress(TimeoutError):
        sock.recv(65536)  # the server's SETTINGS; the handler is now reading the body
    conn.reset_stream(1)
    sock.sendall(conn.data_to_send())
    sock.close()


@pytest.mark.parametrize("rpc", ["StreamCompletion", "Render"])
async def test_cancelled_while_reading_the_request_logs_one_record(
    served: Served, logs: Captured, rpc: str
) -> None:
    await asyncio.to_thread(_send_part_then_reset, served.port, rpc)
    record = await one_record(logs, rpc)
    assert record["outcome"] == "cancelled"
    assert logs.errors() == []
    await still_serving(served)
