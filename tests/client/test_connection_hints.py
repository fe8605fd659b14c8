"""ModelClient.connection_hint: each transport mismatch, met against a real server, gets the
sentence that names its likely cause (TLS against plaintext, plaintext against TLS, an untrusted
certificate, nothing listening); a loss after an answer gets none."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient
from protocol_py.client.hints import MAX_HINT_ADDRESS, connection_hint, not_listening_hint
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py.transport.tls import client_context, server_context

from ..support.security import CA, Issued


@pytest.fixture
def ca(tmp_path: Path) -> CA:
    return CA(tmp_path, "test CA")


@pytest.fixture
def server_pair(ca: CA) -> Issued:
    return ca.issue("plugin server", client=False)


async def _serve(context: ssl.SSLContext | None) -> AsyncIterator[ModelServer]:
    server = ModelServer(ReferenceProvider())
    await server.start("127.0.0.1", 0, ssl=context)
    try:
        yield server
    finally:
        await server.shutdown(grace_period=0)


@pytest.fixture
async def plaintext_server() -> AsyncIterator[ModelServer]:
    async for server in _serve(None):
        yield server


@pytest.fixture
async def tls_server(server_pair: Issued) -> AsyncIterator[ModelServer]:
    async for server in _serve(server_context(str(server_pair.cert), str(server_pair.key))):
        yield server


async def _failure(client: ModelClient) -> BaseException:
    async with client:
        with pytest.raises((OSError, StreamTerminatedError)) as caught:
            await client.describe(timeout=10)
    return caught.value


async def test_a_tls_client_of_a_plaintext_server_is_told_the_server_is_plaintext(
    plaintext_server: ModelServer, ca: CA
) -> None:
    client = ModelClient.connect(plaintext_server.address, ssl=client_context(str(ca.cert)))
    failure = await _failure(client)
    assert isinstance(failure, ssl.SSLError) and failure.reason == "WRONG_VERSION_NUMBER"
    assert client.connection_hint(failure) == (
        "the server answered in plaintext, not TLS (WRONG_VERSION_NUMBER): it does not use "
        "TLS; connect without --tls, --tls-ca, --tls-cert"
    )


async def test_a_plaintext_client_of_a_tls_server_is_told_to_use_tls(
    tls_server: ModelServer,
) -> None:
    client = ModelClient.connect(tls_server.address)
    failure = await _failure(client)
    assert isinstance(failure, StreamTerminatedError | ConnectionError), repr(failure)
    assert client.connection_hint(failure) == (
        "if the server uses TLS, connect with --tls or --tls-ca"
    )


async def test_an_untrusted_server_certificate_names_the_verification_failure(
    tls_server: ModelServer, tmp_path: Path
) -> None:
    other = CA(tmp_path, "other CA")
    client = ModelClient.connect(tls_server.address, ssl=client_context(str(other.cert)))
    failure = await _failure(client)
    assert isinstance(failure, ssl.SSLCertVerificationError)
    assert client.connection_hint(failure) == (
        "the server's certificate is not trusted (unable to get local issuer certificate): "
        "pass the CA that issued it with --tls-ca FILE"
    )


async def test_a_certificate_for_another_name_suggests_tls_server_name(
    tls_server: ModelServer, ca: CA
) -> None:
    client = ModelClient.connect(
        tls_server.address, ssl=client_context(str(ca.cert)), server_hostname="elsewhere.test"
    )
    failure = await _failure(client)
    assert isinstance(failure, ssl.SSLCertVerificationError)
    hint = client.connection_hint(failure)
    assert hint is not None and hint.startswith("the server's certificate does not name the host")
    assert hint.endswith("check --server, or give the name it carries with --tls-server-name")


async def test_nothing_listening_asks_whether_serve_is_running(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    client = ModelClient.connect(address)
    failure = await _failure(client)
    assert isinstance(failure, ConnectionRefusedError)
    assert client.connection_hint(failure) == (
        f"nothing is listening on {address}: is `protocol-py serve` running on {address}?"
    )
    missing = f"unix:{tmp_path / 'no.sock'}"
    client = ModelClient.connect(missing)
    failure = await _failure(client)
    assert isinstance(failure, FileNotFoundError)
    assert client.connection_hint(failure) == not_listening_hint(missing)


async def test_a_connection_lost_after_an_answer_has_no_hint(
    plaintext_server: ModelServer,
) -> None:
    async with ModelClient.connect(plaintext_server.address) as client:
        assert (await client.describe(timeout=10)).name == "reference"
        assert client.connection_hint(StreamTerminatedError("Connection lost")) is None


def test_a_long_address_is_quoted_cut() -> None:
    address = "unix:/" + "d" * 5000
    hint = connection_hint(ConnectionRefusedError(), address, tls=False)
    assert hint is not None and len(hint) < 2 * MAX_HINT_ADDRESS + 100
    assert "d" * (MAX_HINT_ADDRESS - 9) + "..." in hint
