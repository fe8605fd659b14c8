"""TLS and mutual TLS from files: ``serve --tls-cert/--tls-key
[--tls-client-ca]``, the client's ``--tls-ca/--tls-cert/--tls-key``, with the project's client
and with grpcio's ``ssl_channel_credentials``, against a throwaway CA."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient
from protocol_py.server import ModelServer
from protocol_py.transport.tls import TLSConfigError, client_context, server_context

from ..support.pki import Pki, serve_reference
from ..support.security import CA, grpcio_describe, run_cli
from ..support.servers import spawn_server


@pytest.fixture
async def tls_server(pki: Pki) -> AsyncIterator[ModelServer]:
    async for server in serve_reference(server_context(str(pki.server.cert), str(pki.server.key))):
        yield server


async def _describe_name(address: str, context: ssl.SSLContext | None) -> str:
    async with ModelClient.connect(address, ssl=context) as client:
        return (await client.describe(timeout=10)).name


async def test_tls_server_answers_project_client_and_grpcio(
    tls_server: ModelServer, pki: Pki
) -> None:
    assert tls_server.tls
    assert await _describe_name(tls_server.address, client_context(str(pki.ca.cert))) == "reference"
    producer = await asyncio.to_thread(grpcio_describe, tls_server.address, root=pki.ca.cert_pem)
    assert not isinstance(producer, str), producer
    assert producer.name == "reference"


async def test_tls_server_refuses_plaintext_and_untrusting_clients(
    tls_server: ModelServer, pki: Pki
) -> None:
    plaintext = await asyncio.to_thread(grpcio_describe, tls_server.address)
    assert isinstance(plaintext, str) and plaintext.startswith("UNAVAILABLE"), plaintext
    # A client that trusts only another CA rejects the server's certificate.
    other = CA(pki.server.cert.parent, "other CA")
    with pytest.raises(ssl.SSLCertVerificationError):
        await _describe_name(tls_server.address, client_context(str(other.cert)))
    # Still serving afterwards.
    assert await _describe_name(tls_server.address, client_context(str(pki.ca.cert))) == "reference"


async def test_mtls_server_requires_a_client_certificate_from_its_ca(
    mtls_server: ModelServer, pki: Pki
) -> None:
    address = mtls_server.address
    root = pki.ca.cert_pem
    no_cert = await asyncio.to_thread(grpcio_describe, address, root=root)
    assert isinstance(no_cert, str) and no_cert.startswith("UNAVAILABLE"), no_cert
    rogue = (pki.rogue_client.key_pem, pki.rogue_client.cert_pem)
    wrong_ca = await asyncio.to_thread(grpcio_describe, address, root=root, client=rogue)
    assert isinstance(wrong_ca, str) and wrong_ca.startswith("UNAVAILABLE"), wrong_ca
    # TLS 1.3: the client's handshake ends before the server checks its (missing) certificate,
    # so the project's client sees the connection reset before any RPC completes.
    with pytest.raises((ssl.SSLError, ConnectionError, StreamTerminatedError)):
        await _describe_name(address, client_context(str(pki.ca.cert)))
    # The kernel's certificate (issued by the client CA) succeeds, with both clients.
    good = (pki.client.key_pem, pki.client.cert_pem)
    producer = await asyncio.to_thread(grpcio_describe, address, root=root, client=good)
    assert not isinstance(producer, str), producer
    assert producer.name == "reference"
    context = client_context(str(pki.ca.cert), str(pki.client.cert), str(pki.client.key))
    assert await _describe_name(address, context) == "reference"


async def test_mtls_refusal_happens_in_the_tls_handshake(
    mtls_server: ModelServer, pki: Pki
) -> None:
    """With TLS 1.2 the server's certificate request is answered in the handshake itself, so
    a client without a certificate fails in the handshake (the server aborts it) and never
    sends an HTTP/2 byte."""
    context = client_context(str(pki.ca.cert))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    assert mtls_server.port is not None
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        _, writer = await asyncio.open_connection(
            "127.0.0.1", mtls_server.port, ssl=context, server_hostname="localhost"
        )
        writer.close()


def test_tls_context_errors_name_the_option(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(TLSConfigError, match=r"--tls-cert/--tls-key: no such file"):
        server_context(str(tmp_path / "missing.pem"), str(pki.server.key))
    with pytest.raises(TLSConfigError, match=r"--tls-cert/--tls-key: cannot load"):
        server_context(str(pki.server.cert), str(pki.client.key))  # key of another cert
    with pytest.raises(TLSConfigError, match=r"--tls-client-ca: cannot load"):
        server_context(str(pki.server.cert), str(pki.server.key), str(pki.server.key))
    with pytest.raises(TLSConfigError, match=r"--tls-cert and --tls-key must be given together"):
        client_context(None, str(pki.client.cert), None)


def test_cli_serve_with_mutual_tls_and_cli_client_options(pki: Pki) -> None:
    """The console script: ``serve --tls-cert --tls-key --tls-client-ca`` and ``describe``
    with ``--tls-ca --tls-cert --tls-key`` (and refused without ``--tls-cert``)."""
    sub = spawn_server(
        "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
        "--tls-client-ca", str(pki.ca.cert),
    )  # fmt: skip
    try:
        assert sub.handshake == f"1|tcp|127.0.0.1:{sub.port}|grpc\n"
        trust = ["--server", sub.address, "--tls-ca", str(pki.ca.cert)]
        identity = ["--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)]
        ok = run_cli("describe", *trust, *identity)
        assert ok.returncode == 0, ok.stderr
        assert "reference" in ok.stdout
        refused = run_cli("describe", *trust)
        assert refused.returncode == 1
        assert refused.stderr.startswith("protocol-py describe: "), refused.stderr
        assert sub.address in refused.stderr and refused.stdout == ""
        plain = run_cli("capabilities", "--server", sub.address)
        assert plain.returncode == 1
        again = run_cli("capabilities", *trust, *identity)
        assert again.returncode == 0, again.stderr
        assert "reference-large" in again.stdout
    finally:
        sub.proc.terminate()
        assert sub.proc.wait(timeout=10) == 0
    assert "transport security: mutual TLS: clients need a certificate issued by" in (
        sub.stderr_text()
    )
