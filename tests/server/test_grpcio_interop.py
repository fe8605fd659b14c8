"""Interop with google's grpcio client (upb message classes compiled at test time from proto/)
against the server started by the real console script; message size limits both ways (case
C06); malformed frames. Health and reflection clients run in test_lifecycle.py (their pb2
modules cannot share an interpreter with grpclib's)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import pytest
from google.protobuf.json_format import MessageToDict

from protocol_py.version import PROTOCOL_VERSION

from ..support.h2_client import SERVICE, RawH2
from ..support.proc import rss_bytes
from ..support.servers import Subprocess, load_case, spawn_server

LIMIT = 1048576
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def stop(sub: Subprocess) -> int:
    sub.proc.terminate()
    code = sub.proc.wait(timeout=10)
    for stream in (sub.proc.stdout, sub.proc.stderr):
        if stream is not None:
            stream.close()
    return code


@pytest.fixture(scope="module")
def limited() -> Iterator[Subprocess]:
    """The console script with ``--max-message-size 1MiB`` (case C06's unit syntax)."""
    sub = spawn_server("--max-message-size", "1MiB")
    yield sub
    assert stop(sub) == 0


def unary(channel: grpc.Channel, method: str, request: Any, reply_type: Any) -> Any:
    call = channel.unary_unary(
        SERVICE + method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=reply_type.FromString,
    )
    return call(request, timeout=5)


def text_message(upb: Any, text: str) -> Any:
    block = upb.message("content.v1.ContentBlock")(
        text=upb.message("content.v1.TextBlock")(text=text)
    )
    return upb.message("content.v1.Message")(
        role=1, id="01J00000000000000000000001", content=[block]
    )


def test_grpcio_client_calls_every_rpc(upb: Any, cli_server: Subprocess) -> None:
    msg: Callable[[str], Any] = upb.message
    with grpc.insecure_channel(cli_server.address) as channel:
        caps = unary(
            channel,
            "GetCapabilities",
            msg("model.v1.GetCapabilitiesRequest")(),
            msg("model.v1.GetCapabilitiesResponse"),
        )
        assert [m.id for m in caps.capabilities.models] == [
            "reference-large",
            "reference-medium",
            "reference-small",
        ]
        assert caps.capabilities.protocol_version == PROTOCOL_VERSION
        schema = MessageToDict(caps.capabilities.config_schema)
        assert schema["additionalProperties"] is False

        described = unary(
            channel, "Describe", msg("model.v1.DescribeRequest")(), msg("model.v1.DescribeResponse")
        )
        assert (described.producer.name, described.producer.protocol_version) == (
            "reference",
            PROTOCOL_VERSION,
        )

        configure = msg("model.v1.ConfigureRequest")()
        configure.config.update({"max_tokens": 500, "base_url": "https://example.com/v1"})
        unary(channel, "Configure", configure, msg("model.v1.ConfigureResponse"))
        bad = msg("model.v1.ConfigureRequest")()
        bad.config.update({"temprature": 0.2})
        with pytest.raises(grpc.RpcError) as info:
            unary(channel, "Configure", bad, msg("model.v1.ConfigureResponse"))
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "/temprature: unknown property" in info.value.details()

        counted = unary(
            channel,
            "CountTokens",
            msg("model.v1.CountTokensRequest")(
                model_id="reference-small", messages=[text_message(upb, "hello grpcio")]
            ),
            msg("model.v1.CountTokensResponse"),
        )
        assert counted.method == 1  # TOKENIZER

        rendered = unary(
            channel,
            "Render",
            msg("model.v1.RenderRequest")(payload_type="reference.echo", payload=b"shown"),
            msg("model.v1.RenderResponse"),
        )
        assert rendered.text == "shown"

        request = msg("model.v1.StreamCompletionRequest")(
            model_id="reference-small",
            messages=[text_message(upb, "hello grpcio")],
            call_context=msg("common.v1.CallContext")(session_id="s", turn_id="t"),
        )
        stream = channel.unary_stream(
            SERVICE + "StreamCompletion",
            request_serializer=type(request).SerializeToString,
            response_deserializer=msg("model.v1.StreamEvent").FromString,
        )
        events = list(stream(request, timeout=10))
        kinds = [e.WhichOneof("event") for e in events]
        assert kinds[0] == "stream_start" and kinds[-2:] == ["usage", "stop"]
        text = "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
        assert "You wrote: hello grpcio" in text
        usage = events[-2].usage
        assert usage.input_tokens == counted.input_tokens
        assert events[-1].stop.reason == 1  # END_TURN

        invalid = msg("model.v1.StreamCompletionRequest")(
            model_id="nope", messages=[text_message(upb, "x")]
        )
        events = list(stream(invalid, timeout=10))
        assert [e.WhichOneof("event") for e in events] == ["error"]
        assert events[0].error.kind == 1  # INVALID_REQUEST


# -- case C06: message size -------------------------------------------------------------------


def sized_count_request(upb: Any, size: int) -> Any:
    """A CountTokensRequest whose serialization is exactly ``size`` bytes."""
    cls = upb.message("model.v1.CountTokensRequest")
    pad = size - 100
    while True:
        request = cls(model_id="reference-small", messages=[text_message(upb, "a" * pad)])
        actual = request.ByteSize()
        if actual == size:
            return request
        pad += size - actual


def test_message_size_with_grpcio(upb: Any, limited: Subprocess) -> None:
    case = load_case("C06")
    assert case["input"]["client_options"] == [list(o) for o in GRPC_OPTIONS]
    msg = upb.message
    with grpc.insecure_channel(limited.address, options=GRPC_OPTIONS) as channel:
        # exact limit: accepted
        exact = sized_count_request(upb, LIMIT)
        assert exact.ByteSize() == LIMIT
        counted = unary(channel, "CountTokens", exact, msg("model.v1.CountTokensResponse"))
        assert counted.input_tokens > 0
        # limit + 1: RESOURCE_EXHAUSTED naming actual size and limit (deadline 2 s)
        over = sized_count_request(upb, LIMIT + 1)
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(
                SERVICE + "CountTokens",
                request_serializer=type(over).SerializeToString,
                response_deserializer=msg("model.v1.CountTokensResponse").FromString,
            )(over, timeout=2)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"{LIMIT + 1} bytes" in info.value.details()
        assert f"{LIMIT} bytes" in info.value.details()
        # a 2 MiB Render request
        big = msg("model.v1.RenderRequest")(
            payload_type="reference.echo", payload=b"x" * (2 * LIMIT)
        )
        with pytest.raises(grpc.RpcError) as info:
            unary(channel, "Render", big, msg("model.v1.RenderResponse"))
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # a reply that would exceed the limit: RESOURCE_EXHAUSTED, never a truncated message
        repeat = msg("model.v1.RenderRequest")(
            payload_type="reference.repeat", payload=b'{"text": "0123456789", "times": 120000}'
        )
        with pytest.raises(grpc.RpcError) as info:
            unary(channel, "Render", repeat, msg("model.v1.RenderResponse"))
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "reply message of" in info.value.details()
        assert f"maximum message size of {LIMIT} bytes" in info.value.details()
        # afterwards: still serving, on the same channel
        caps = unary(
            channel,
            "GetCapabilities",
            msg("model.v1.GetCapabilitiesRequest")(),
            msg("model.v1.GetCapabilitiesResponse"),
        )
        assert len(caps.capabilities.models) == 3


def test_huge_announced_length_is_refused_from_the_prefix(limited: Subprocess) -> None:
    before = rss_bytes(limited.proc.pid)
    raw = RawH2(limited.port)
    try:
        stream_id = raw.open("CountTokens")
        started = time.monotonic()
        raw.send(stream_id, b"\x00" + (1 << 30).to_bytes(4, "big") + b"x" * 1024)
        result = raw.outcome(stream_id)
        elapsed = time.monotonic() - started
        assert result["headers"].get("grpc-status") == "8"  # RESOURCE_EXHAUSTED
        assert str(1 << 30) in result["headers"].get("grpc-message", "")
        assert elapsed < 2.0
        # trickling more onto the finished stream is dropped, not buffered
        for _ in range(3):
            try:
                raw.send(stream_id, b"x" * 1024)
            except h2.exceptions.StreamClosedError:
                break
    finally:
        raw.close()
    assert rss_bytes(limited.proc.pid) - before < 2 * LIMIT


def test_malformed_request_bytes_then_still_serving(upb: Any, limited: Subprocess) -> None:
    raw = RawH2(limited.port)
    try:
        stream_id = raw.open("StreamCompletion")
        raw.send(stream_id, b"\x00" + (12).to_bytes(4, "big") + b"\xff" * 12, end=True)
        result = raw.outcome(stream_id)
        assert result["headers"].get("grpc-status") == "3"  # INVALID_ARGUMENT
        assert "malformed request" in result["headers"].get("grpc-message", "")
    finally:
        raw.close()
    # a connection that is not HTTP/2 at all
    with socket.create_connection(("127.0.0.1", limited.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
        sock.settimeout(2)
        try:
            while sock.recv(4096):
                pass
        except (TimeoutError, ConnectionResetError):
            pass
    with grpc.insecure_channel(limited.address) as channel:
        caps = unary(
            channel,
            "GetCapabilities",
            upb.message("model.v1.GetCapabilitiesRequest")(),
            upb.message("model.v1.GetCapabilitiesResponse"),
        )
        assert caps.capabilities.protocol_version == PROTOCOL_VERSION
    assert limited.proc.poll() is None


def test_default_limit_is_64_mib(upb: Any, cli_server: Subprocess) -> None:
    """Without the flag the documented default applies: 64 MiB (the project's documented default,
    not the case's 4 MiB), so a 4194305-byte request is accepted and 64 MiB + 1 is refused."""
    expected = load_case("C06")["expected"]["no_flag"]
    assert "4194304" in expected
    msg = upb.message
    with grpc.insecure_channel(cli_server.address, options=GRPC_OPTIONS) as channel:
        request = sized_count_request(upb, 4194305)
        counted = unary(channel, "CountTokens", request, msg("model.v1.CountTokensResponse"))
        assert counted.input_tokens > 0
    raw = RawH2(cli_server.port)
    try:
        stream_id = raw.open("CountTokens")
        raw.send(stream_id, b"\x00" + (64 * LIMIT + 1).to_bytes(4, "big"))
        result = raw.outcome(stream_id)
        assert result["headers"].get("grpc-status") == "8"
        assert f"{64 * LIMIT + 1} bytes" in result["headers"].get("grpc-message", "")
        assert f"{64 * LIMIT} bytes" in result["headers"].get("grpc-message", "")
    finally:
        raw.close()
