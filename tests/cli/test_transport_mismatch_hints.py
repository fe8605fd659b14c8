"""Each transport mismatch met by ``protocol-py describe``/``chat`` is one line naming the
likely cause, and the server logs the refused handshake (peer and reason) when it is the TLS
side: TLS against plaintext, plaintext against TLS, plaintext against a launched plugin's
socket (automatic mutual TLS), an untrusted server certificate, nothing listening."""

from __future__ import annotations

import socket
from pathlib import Path

from protocol_py.transport.tls import CLIENT_CERT_ENV

from ..support.security import CA, spawn_plugin
from ..support.servers import spawn_server
from ._console import cli, stop_server

REFUSED_PLAINTEXT = "client sent plaintext to a TLS port (not a TLS record)"


def test_a_tls_client_of_a_plaintext_server_is_told_it_is_plaintext_and_the_server_says_so(
    tmp_path: Path,
) -> None:
    ca = CA(tmp_path)
    sub = spawn_server()
    try:
        done = cli("describe", "--server", sub.address, "--tls-ca", str(ca.cert))
        assert done.returncode == 1
        assert done.stderr == (
            f"protocol-py describe: cannot connect to {sub.address}: TLS handshake failed; the "
            "server answered in plaintext, not TLS (WRONG_VERSION_NUMBER): it does not use TLS; "
            "connect without --tls, --tls-ca, --tls-cert\n"
        )
        host, port = sub.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as http1:
            http1.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            while http1.recv(4096):  # the server answers GOAWAY and closes
                pass
        assert "reference" in cli("describe", "--server", sub.address).stdout
    finally:
        err = stop_server(sub)
    lines = [x for x in err.splitlines() if "closing HTTP/2 connection from 127.0.0.1:" in x]
    assert [x.split("with GOAWAY ", 1)[1] for x in lines] == [
        "PROTOCOL_ERROR: Invalid HTTP/2 preamble. (the client sent a TLS handshake to this "
        "plaintext port)",
        "PROTOCOL_ERROR: Invalid HTTP/2 preamble. (the client sent an HTTP/1.x request, not the "
        "HTTP/2 preface)",
    ], err


def test_a_plaintext_client_of_a_tls_server_is_told_to_use_tls_and_the_server_logs_it(
    tmp_path: Path,
) -> None:
    ca = CA(tmp_path)
    pair = ca.issue("localhost", client=False)
    sub = spawn_server("--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    try:
        done = cli("chat", "--server", sub.address, "hello")
        assert done.returncode == 1
        assert done.stderr == (
            f"protocol-py chat: connection to {sub.address} lost: Connection lost before any "
            "answer: if the server uses TLS, connect with --tls or --tls-ca\n"
        )
        other = CA(tmp_path, "other CA")
        untrusted = cli("describe", "--server", sub.address, "--tls-ca", str(other.cert))
        assert untrusted.returncode == 1
        assert untrusted.stderr == (
            f"protocol-py describe: cannot connect to {sub.address}: TLS handshake failed; the "
            "server's certificate is not trusted (unable to get local issuer certificate): pass "
            "the CA that issued it with --tls-ca FILE\n"
        )
        assert (
            "reference" in cli("describe", "--server", sub.address, "--tls-ca", str(ca.cert)).stdout
        )
    finally:
        err = stop_server(sub)
    refusals = [
        line for line in err.splitlines() if "refused a TLS handshake from 127.0.0.1:" in line
    ]
    assert len(refusals) == 2, err
    assert refusals[0].endswith(f": {REFUSED_PLAINTEXT}") and " WARNING " in refusals[0]
    assert refusals[1].endswith(
        ": the client ended the handshake (it may not trust this server's certificate)"
    )


def test_a_plaintext_client_of_a_launched_plugins_socket_is_told_it_speaks_auto_mtls(
    tmp_path: Path,
) -> None:
    kernel = CA(tmp_path, "kernel")
    plugin = spawn_plugin(env={CLIENT_CERT_ENV: kernel.cert_pem.decode()})
    try:
        address = f"unix:{plugin.fields[2]}"
        done = cli("describe", "--server", address)
        assert done.returncode == 1
        assert done.stderr == (
            f"protocol-py describe: connection to {address} lost: Connection lost before any "
            "answer: if this is the socket of a plugin launched with --handshake, it speaks "
            "automatic mutual TLS and accepts only the kernel that launched it "
            "(protocol_py.transport.launch); if it is a `serve --socket` with TLS, connect "
            "with --tls-ca\n"
        )
    finally:
        assert plugin.stop() == 0
    assert f"refused a TLS handshake from a unix socket peer: {REFUSED_PLAINTEXT}" in plugin.stderr


def test_nothing_listening_asks_whether_serve_is_running(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    done = cli("describe", "--server", address)
    assert done.returncode == 1
    assert done.stderr == (
        f"protocol-py describe: cannot connect to {address}: connection refused; nothing is "
        f"listening on {address}: is `protocol-py serve` running on {address}?\n"
    )
    missing = f"unix:{tmp_path / 'gone.sock'}"
    done = cli("capabilities", "--server", missing)
    assert done.stderr == (
        f"protocol-py capabilities: cannot connect to {missing}: No such file or directory; "
        f"nothing is listening on {missing}: is `protocol-py serve` running on {missing}?\n"
    )
