"""A status the server answers before dispatch (unknown method or service, a refused
``grpc-timeout``) is a Trailers-Only response with ``content-type: application/grpc``
(protocol_py._compat.grpclib_unimplemented_content_type), read with a raw HTTP/2 client: one
HEADERS frame ending the stream. grpc-go needs the content type to report the status at all."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import types
from collections.abc import AsyncIterator

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from protocol_py._compat import grpclib_unimplemented_content_type as patch
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer

EMPTY_MESSAGE = b"\x00\x00\x00\x00\x00"
"""One uncompressed gRPC message of length 0 (GetCapabilitiesRequest has no fields)."""


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = ModelServer(ReferenceProvider())
    bound = await server.start("127.0.0.1", 0)
    try:
        yield bound
    finally:
        await server.shutdown(grace_period=0)


async def raw_call(
    port: int, path: str, extra: list[tuple[str, str]] | None = None
) -> tuple[list[tuple[str, str]], bool, list[type[h2.events.Event]]]:
    """One request over a fresh HTTP/2 connection: the response headers, whether that same
    HEADERS frame ended the stream, and the event types seen for the stream."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    connection.initiate_connection()
    stream_id = connection.get_next_available_stream_id()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", f"127.0.0.1:{port}"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *(extra or []),
    ]
    connection.send_headers(stream_id, headers)
    connection.send_data(stream_id, EMPTY_MESSAGE, end_stream=True)
    writer.write(connection.data_to_send())
    seen: list[type[h2.events.Event]] = []
    response: list[tuple[str, str]] = []
    ended_with_headers = False
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "the server closed the connection before answering"
            for event in connection.receive_data(data):
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                seen.append(type(event))
                if isinstance(event, h2.events.ResponseReceived):
                    response = [(str(k), str(v)) for k, v in event.headers]
                    ended_with_headers = event.stream_ended is not None
                if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    return response, ended_with_headers, seen
            writer.write(connection.data_to_send())
    finally:
        writer.close()


@pytest.mark.parametrize(
    "path", ["/model.v1.ModelService/NoSuchMethod", "/model.v9.NoSuchService/Call"]
)
async def test_unknown_method_or_service_is_trailers_only_unimplemented(
    port: int, path: str
) -> None:
    headers, ended, seen = await raw_call(port, path)
    assert ended, f"not a Trailers-Only response: {seen}"
    assert seen[0] is h2.events.ResponseReceived
    assert headers[:3] == [
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", "12"),
    ]
    assert dict(headers)["grpc-message"] == "Method not found"
    assert h2.events.DataReceived not in seen


async def test_a_refused_grpc_timeout_carries_the_content_type_too(port: int) -> None:
    headers, ended, _ = await raw_call(
        port, "/model.v1.ModelService/GetCapabilities", [("grpc-timeout", "soon")]
    )
    fields = dict(headers)
    assert ended
    assert (fields[":status"], fields["content-type"], fields["grpc-status"]) == (
        "200",
        "application/grpc",
        "3",
    )
    assert fields["grpc-message"].startswith("grpc-timeout: invalid value 'soon'")


async def test_http_level_refusals_are_unchanged(port: int) -> None:
    """Without ``te: trailers`` the request is not gRPC: HTTP 400, no gRPC content type."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    connection.initiate_connection()
    connection.send_headers(
        1,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/model.v1.ModelService/GetCapabilities"),
            (":authority", "x"),
            ("content-type", "application/grpc"),
        ],
        end_stream=True,
    )
    writer.write(connection.data_to_send())
    headers: dict[str, str] = {}
    try:
        while not headers:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    headers = {str(k): str(v) for k, v in event.headers}
    finally:
        writer.close()
    assert headers[":status"] == "400"
    assert "content-type" not in headers


async def test_grpcio_reads_unimplemented(port: int) -> None:
    def call() -> grpc.StatusCode:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            method = channel.unary_unary("/model.v1.ModelService/NoSuchMethod")
            try:
                method(b"", timeout=10)
            except grpc.RpcError as exc:
                return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK

    assert await asyncio.to_thread(call) is grpc.StatusCode.UNIMPLEMENTED


def test_install_is_idempotent_and_marks_what_it_installed() -> None:
    run_fresh(
        "import grpclib.server\n"
        "original = grpclib.server._abort\n"
        "from protocol_py._compat import grpclib_unimplemented_content_type as patch\n"
        "assert grpclib.server._abort is original  # importing installs nothing\n"
        "assert patch.install()\n"
        "installed = grpclib.server._abort\n"
        "assert installed is not original and installed._protocol_py_content_type\n"
        "assert patch.install() and grpclib.server._abort is installed\n"
    )


def test_install_is_a_no_op_on_another_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    async def _abort(stream: object, status: int) -> None:  # a grpclib with another signature
        pass

    monkeypatch.setattr(patch, "_server", types.SimpleNamespace(_abort=_abort))
    assert patch.install() is False
    assert patch._server._abort is _abort
    monkeypatch.setattr(patch, "_server", types.SimpleNamespace())
    assert patch.install() is False


def run_fresh(code: str) -> None:
    """Run ``code`` in a fresh interpreter (no patch installed yet); fail with its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
