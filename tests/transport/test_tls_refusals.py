"""A refused TLS or mutual-TLS handshake is one WARNING line on the server naming the peer and
the reason in words (never the certificate), rate-limited per server; the server goes on
serving. Clients: the project's ModelClient, google's grpcio, and a raw socket."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl

import pytest
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.transport.tls import client_context, server_context
from protocol_py.transport.tls_accept import (
    TLS_REFUSAL_LOG_BURST,
    TLS_REFUSAL_LOG_INTERVAL,
    RefusalLog,
    refusal_reason,
)

from ..support.pki import Pki
from ..support.security import grpcio_describe

LINE = re.compile(r"refused a TLS handshake from 127\.0\.0\.1:\d+: (.+)")


def _reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = []
    for record in caplog.records:
        match = LINE.fullmatch(record.getMessage())
        if match and record.name == "protocol_py.server":
            assert record.levelno == logging.WARNING
            found.append(match.group(1))
    return found


async def _settle(caplog: pytest.LogCaptureFixture, count: int) -> list[str]:
    """The refusal reasons once ``count`` were logged (within 10 s on a loaded machine)."""
    for _ in range(200):
        if len(_reasons(caplog)) >= count:
            break
        await asyncio.sleep(0.05)
    return _reasons(caplog)


async def _still_serving(server: ModelServer, pki: Pki) -> None:
    context = client_context(str(pki.ca.cert), str(pki.client.cert), str(pki.client.key))
    async with ModelClient.connect(server.address, ssl=context) as client:
        assert (await client.describe(timeout=10)).name == "reference"


async def _project_client(address: str, context: ssl.SSLContext | None) -> str:
    try:
        async with ModelClient.connect(address, ssl=context) as client:
            await client.describe(timeout=10)
    except (ssl.SSLError, ConnectionError, StreamTerminatedError) as exc:
        return type(exc).__name__
    return "SUCCEEDED"


async def test_a_plaintext_client_on_a_tls_port_is_one_warning_naming_peer_and_reason(
    mtls_server: ModelServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "protocol_py.server")
    assert await _project_client(mtls_server.address, None) != "SUCCEEDED"
    grpcio = await asyncio.to_thread(grpcio_describe, mtls_server.address)
    assert isinstance(grpcio, str) and grpcio.startswith("UNAVAILABLE"), grpcio
    reasons = await _settle(caplog, 2)
    assert reasons == ["client sent plaintext to a TLS port (not a TLS record)"] * 2
    await _still_serving(mtls_server, pki)
    assert len(_reasons(caplog)) == 2  # the accepted connection logged no refusal


async def test_a_client_without_a_certificate_on_a_mutual_tls_port_is_named(
    mtls_server: ModelServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "protocol_py.server")
    assert await _project_client(mtls_server.address, client_context(str(pki.ca.cert))) != (
        "SUCCEEDED"
    )
    grpcio = await asyncio.to_thread(grpcio_describe, mtls_server.address, root=pki.ca.cert_pem)
    assert isinstance(grpcio, str) and grpcio.startswith("UNAVAILABLE"), grpcio
    reasons = await _settle(caplog, 2)
    assert reasons == ["no client certificate (mutual TLS requires one)"] * 2
    await _still_serving(mtls_server, pki)


async def test_a_certificate_from_another_ca_is_named_without_its_contents(
    mtls_server: ModelServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "protocol_py")
    rogue = client_context(str(pki.ca.cert), str(pki.rogue_client.cert), str(pki.rogue_client.key))
    assert await _project_client(mtls_server.address, rogue) != "SUCCEEDED"
    grpcio = await asyncio.to_thread(
        grpcio_describe,
        mtls_server.address,
        root=pki.ca.cert_pem,
        client=(pki.rogue_client.key_pem, pki.rogue_client.cert_pem),
    )
    assert isinstance(grpcio, str) and grpcio.startswith("UNAVAILABLE"), grpcio
    reasons = await _settle(caplog, 2)
    assert reasons == ["client certificate not signed by the trusted CA"] * 2
    text = caplog.text
    assert "intruder" not in text and "rogue" not in text and "BEGIN CERTIFICATE" not in text
    await _still_serving(mtls_server, pki)


async def test_a_client_that_does_not_trust_the_server_and_a_bare_connect_are_named(
    mtls_server: ModelServer, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "protocol_py.server")
    untrusting = client_context(str(pki.rogue_ca.cert), str(pki.client.cert), str(pki.client.key))
    assert await _project_client(mtls_server.address, untrusting) == "SSLCertVerificationError"
    _, writer = await asyncio.open_connection("127.0.0.1", mtls_server.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    await _settle(caplog, 2)
    writer.close()
    reasons = await _settle(caplog, 2)
    assert reasons[0].startswith("the client ended the handshake"), reasons
    assert reasons[1] == "client sent plaintext HTTP to a TLS port", reasons
    await _still_serving(mtls_server, pki)


async def test_refusals_past_the_burst_are_counted_in_one_summary_line(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """A server whose refusal log allows 3 lines per 3 s: 8 plaintext clients at once give 3
    lines and, when the window ends, one summary of the 5 others; then a Describe is
    answered."""
    caplog.set_level(logging.WARNING, "protocol_py.server")
    server = ModelServer(ReferenceProvider())
    server.tls_refusals = RefusalLog(burst=3, interval=3.0)
    await server.start(
        "127.0.0.1", 0, ssl=server_context(str(pki.server.cert), str(pki.server.key))
    )
    try:
        results = await asyncio.gather(*(_project_client(server.address, None) for _ in range(8)))
        assert "SUCCEEDED" not in results
        summary = (
            "suppressed 5 more refused TLS handshakes in the last 3 s (at most 3 lines per 3 s)"
        )
        for _ in range(400):  # the window ends 3 s after the first refusal
            if summary in caplog.messages:
                break
            await asyncio.sleep(0.05)
        assert server.tls_refusals.total == 8
        assert len(_reasons(caplog)) == 3
        assert caplog.messages.count(summary) == 1, caplog.messages
        # The next window logs again.
        assert await _project_client(server.address, None) != "SUCCEEDED"
        assert len(await _settle(caplog, 4)) == 4
        context = client_context(str(pki.ca.cert))
        async with ModelClient.connect(server.address, ssl=context) as client:
            assert (await client.describe(timeout=10)).name == "reference"
    finally:
        await server.shutdown(grace_period=0)


def test_the_refusal_log_counts_within_a_window_and_resets_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "protocol_py.server")
    now = [100.0]
    refusals = RefusalLog(clock=lambda: now[0])
    assert (refusals.burst, refusals.interval) == (TLS_REFUSAL_LOG_BURST, TLS_REFUSAL_LOG_INTERVAL)
    for index in range(TLS_REFUSAL_LOG_BURST + 7):
        refusals.refused(f"10.0.0.1:{index}", "no client certificate (mutual TLS requires one)")
    assert len(caplog.messages) == TLS_REFUSAL_LOG_BURST and refusals.suppressed == 7
    now[0] += TLS_REFUSAL_LOG_INTERVAL
    refusals.refused("10.0.0.2:1", "client sent plaintext to a TLS port (not a TLS record)")
    assert caplog.messages[-2] == (
        f"suppressed 7 more refused TLS handshakes in the last {TLS_REFUSAL_LOG_INTERVAL:g} s "
        f"(at most {TLS_REFUSAL_LOG_BURST} lines per {TLS_REFUSAL_LOG_INTERVAL:g} s)"
    )
    assert caplog.messages[-1] == (
        "refused a TLS handshake from 10.0.0.2:1: client sent plaintext to a TLS port "
        "(not a TLS record)"
    )
    assert refusals.suppressed == 0 and refusals.total == TLS_REFUSAL_LOG_BURST + 8


def test_refusal_reasons_name_the_rule_not_the_bytes() -> None:
    timeout = ConnectionAbortedError("SSL handshake is taking longer than 10.0 seconds")
    assert refusal_reason(timeout, 10.0) == (
        "no TLS handshake completed within 10 s (handshake timeout)"
    )
    unknown = ssl.SSLError(1, "[SSL: SOMETHING_NEW] something")
    unknown.reason = "X" * 500  # type: ignore[misc]
    assert refusal_reason(unknown) == f"TLS handshake failed ({'X' * 60})"
    assert refusal_reason(ConnectionResetError()).startswith("the client ended the handshake")


async def test_a_connection_that_never_starts_the_handshake_is_named_at_the_timeout(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "protocol_py.server")
    server = ModelServer(ReferenceProvider())
    server.handshake_timeout = 3.0  # a loaded machine still completes a real handshake in it
    await server.start(
        "127.0.0.1", 0, ssl=server_context(str(pki.server.cert), str(pki.server.key))
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        assert await asyncio.wait_for(reader.read(), timeout=30) == b""  # closed by the server
        writer.close()
        assert await _settle(caplog, 1) == [
            "no TLS handshake completed within 3 s (handshake timeout)"
        ]
        context = client_context(str(pki.ca.cert))
        async with ModelClient.connect(server.address, ssl=context) as client:
            assert (await client.describe(timeout=10)).name == "reference"
    finally:
        await server.shutdown(grace_period=0)
