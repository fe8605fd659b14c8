"""A client that connects and never sends the HTTP/2 preface (or never finishes its TLS
handshake) is not held until the idle timeout (300 s; asyncio's TLS default is 60 s): both are
bounded by the server's handshake timeout
(``DEFAULT_HANDSHAKE_TIMEOUT``), and the server keeps serving afterwards."""

from __future__ import annotations

import asyncio
import socket
import time

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import DEFAULT_HANDSHAKE_TIMEOUT, ModelServer
from protocol_py.server.grpc_layer.connections import HTTP2_PREFACE_BYTES
from protocol_py.transport.tls import (
    CERT_SAN_DNS,
    auto_mtls_server_context,
    generate_certificate,
    pinned_client_context,
)

HANDSHAKE_TIMEOUT = 0.5
WAIT_LIMIT = 20.0
"""Seconds the probe waits for the server to close (the bug: 60 s or 300 s)."""

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def seconds_until_closed(port: int, send: bytes = b"") -> float:
    """Connect, send ``send``, then read (dropping the server's own SETTINGS) until the server
    closes the connection; the seconds that took (``WAIT_LIMIT`` if it never did)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_LIMIT) as sock:
        if send:
            sock.sendall(send)
        try:
            while sock.recv(65536):
                pass
        except TimeoutError:
            return WAIT_LIMIT
        except ConnectionResetError:
            pass
    return time.monotonic() - started


def still_open_after(port: int, send: bytes, seconds: float) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(send)
        try:
            while sock.recv(65536):
                pass
        except TimeoutError:
            return True
    return False


async def describe(port: int, **kwargs: object) -> str:
    async with ModelClient.connect(f"127.0.0.1:{port}", **kwargs) as client:  # type: ignore[arg-type]
        return (await client.describe(timeout=10)).name


def test_handshake_timeout_has_a_documented_default() -> None:
    assert DEFAULT_HANDSHAKE_TIMEOUT == 10.0
    assert len(PREFACE) + len(EMPTY_SETTINGS) == HTTP2_PREFACE_BYTES
    assert ModelServer(ReferenceProvider()).handshake_timeout == DEFAULT_HANDSHAKE_TIMEOUT


async def test_a_plaintext_client_without_the_http2_preface_is_closed_at_the_timeout() -> None:
    server = ModelServer(ReferenceProvider())
    server.handshake_timeout = HANDSHAKE_TIMEOUT
    port = await server.start("127.0.0.1", 0)
    try:
        silent = await asyncio.to_thread(seconds_until_closed, port)
        partial = await asyncio.to_thread(seconds_until_closed, port, PREFACE[:10])
        print(
            f"silent client closed after {silent:.2f} s, partial preface after {partial:.2f} s "
            f"(handshake timeout {HANDSHAKE_TIMEOUT} s)"
        )
        assert HANDSHAKE_TIMEOUT * 0.9 <= silent < WAIT_LIMIT
        assert HANDSHAKE_TIMEOUT * 0.9 <= partial < WAIT_LIMIT
        # A client that sent its preface is not cut by it (the idle timeout governs it).
        assert await asyncio.to_thread(
            still_open_after, port, PREFACE + EMPTY_SETTINGS, HANDSHAKE_TIMEOUT * 3
        )
        assert await describe(port) == "reference"  # still serving
    finally:
        await server.shutdown(grace_period=0)


async def test_a_client_that_never_finishes_the_tls_handshake_is_closed_at_the_timeout() -> None:
    kernel = generate_certificate()
    context, pair = auto_mtls_server_context(kernel.cert_pem)
    server = ModelServer(ReferenceProvider())
    server.handshake_timeout = HANDSHAKE_TIMEOUT
    port = await server.start("127.0.0.1", 0, ssl=context)
    try:
        silent = await asyncio.to_thread(seconds_until_closed, port)
        print(
            f"silent TLS client closed after {silent:.2f} s (handshake timeout "
            f"{HANDSHAKE_TIMEOUT} s; asyncio's default 60 s)"
        )
        assert HANDSHAKE_TIMEOUT * 0.9 <= silent < WAIT_LIMIT
        assert pair.cert_der is not None
        client_context = pinned_client_context(pair.cert_der, kernel)
        assert await describe(port, ssl=client_context, server_hostname=CERT_SAN_DNS) == "reference"
    finally:
        await server.shutdown(grace_period=0)
