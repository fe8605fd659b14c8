"""How the CLI reports a connection that ends before any answer: a graceful GOAWAY is the server
shutting down; a server shut down between calls, or a connection closed after the request
headers, is a connection failure, with the TLS hint for TCP, the launched-plugin hint for a unix
socket and the client-certificate hint under TLS."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.exceptions import StreamTerminatedError
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import StreamEnded

from protocol_py._compat.grpclib_goaway import GOAWAY_NO_ERROR, goaway_error_code

from ..support.security import CA
from ..support.servers import CONSOLE_SCRIPT, Subprocess, spawn_server
from ._console import cli, stop_server


def test_a_connection_lost_before_any_answer_under_tls_mentions_the_client_certificate(
    tmp_path: Path,
) -> None:
    ca = CA(tmp_path)
    server = ca.issue("localhost", client=False)
    sub = spawn_server(
        "--tls-cert", str(server.cert), "--tls-key", str(server.key),
        "--tls-client-ca", str(ca.cert),
    )  # fmt: skip
    try:
        refused = cli("describe", "--server", sub.address, "--tls-ca", str(ca.cert))
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"protocol-py describe: connection to {sub.address} lost")
        assert refused.stderr.endswith(
            "before any answer: the server may have refused this client's certificate (mutual "
            "TLS: --tls-cert/--tls-key issued by a CA the server trusts)\n"
        ), refused.stderr
        assert "reference" in cli("describe", *_identity(ca, sub)).stdout
    finally:
        stop_server(sub)


def _identity(ca: CA, sub: Subprocess) -> list[str]:
    client = ca.issue("client", client=True)
    return [
        "--server", sub.address, "--tls-ca", str(ca.cert),
        "--tls-cert", str(client.cert), "--tls-key", str(client.key),
    ]  # fmt: skip


def _h2_then_close(listener: socket.socket, done: threading.Event, goaway: bool) -> None:
    """Answer each connection's HTTP/2 preface, read its first request to its end of stream,
    then (``goaway``) send GOAWAY(NO_ERROR, last stream 0), what a server shutting down sends
    (RFC 9113 section 6.8), and hold the socket a moment; or close the connection at once."""
    listener.settimeout(0.2)
    while not done.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        with conn:
            conn.settimeout(10)
            h2 = H2Connection(H2Configuration(client_side=False))
            h2.initiate_connection()
            conn.sendall(h2.data_to_send())
            asked = False
            while not asked:
                data = conn.recv(65536)
                if not data:
                    break
                asked = any(isinstance(e, StreamEnded) for e in h2.receive_data(data))
                conn.sendall(h2.data_to_send())
            if goaway:
                h2.close_connection(error_code=ErrorCodes.NO_ERROR, last_stream_id=0)
                conn.sendall(h2.data_to_send())
                done.wait(1.0)  # keep the socket open: the client reads the GOAWAY
            else:  # FIN, then read to the client's close: no reset from unread bytes
                conn.shutdown(socket.SHUT_WR)
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass


@pytest.fixture
def shutting_down_server() -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, True))
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("command", [["chat", "hello"], ["describe"]])
def test_a_graceful_goaway_before_any_answer_says_the_server_is_shutting_down(
    shutting_down_server: str, command: list[str]
) -> None:
    """It said "connection ... lost: Received GOAWAY ... connect with --tls or --tls-ca"."""
    address = shutting_down_server
    done = _cli(command[0], "--server", address, *command[1:])
    assert done.returncode == 1  # as every transient connection failure (refused, lost)
    assert done.stderr == (
        f"protocol-py {command[0]}: connection to {address} closed: the server is shutting "
        "down (GOAWAY); retry when it is serving again\n"
    )
    assert done.stdout == ""


def test_goaway_error_code_reads_the_code_of_the_goaway_only() -> None:
    assert (
        goaway_error_code(
            StreamTerminatedError("Received GOAWAY frame, closing connection; error_code: 0")
        )
        == GOAWAY_NO_ERROR
    )
    assert (
        goaway_error_code(
            StreamTerminatedError("Received GOAWAY frame, closing connection; error_code: 2")
        )
        == 2
    )
    assert goaway_error_code(StreamTerminatedError("Connection lost")) is None


def test_a_server_shut_down_between_calls_is_a_connection_failure_without_tls_hint() -> None:
    """A real server answers one call and is shut down (SIGTERM); the next call fails with
    exit 1, as a GOAWAY does, naming the address, with no TLS hint (a refused connect)."""
    sub = spawn_server()
    try:
        assert _cli("describe", "--server", sub.address).returncode == 0
    finally:
        sub.proc.terminate()
        sub.proc.communicate(timeout=30)
    after = _cli("chat", "--server", sub.address, "hello")
    assert after.returncode == 1
    assert after.stderr.startswith(f"protocol-py chat: cannot connect to {sub.address}: ")
    assert "--tls" not in after.stderr


def test_a_unix_socket_closed_before_any_answer_gets_the_launched_plugin_hint_not_the_tcp_one(
    tmp_path: Path,
) -> None:
    """The "--tls or --tls-ca" hint is for a TCP address; over a unix socket (here a plaintext
    server that closes the connection after the request headers) the likely cause is a
    launched plugin's socket, which speaks automatic mutual TLS."""
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, False))
    thread.start()
    try:
        lost = _cli("describe", "--server", f"unix:{path}")
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()
    assert lost.returncode == 1
    assert lost.stderr == (
        f"protocol-py describe: connection to unix:{path} lost: Connection lost before any "
        "answer: if this is the socket of a plugin launched with --handshake, it speaks "
        "automatic mutual TLS and accepts only the kernel that launched it "
        "(protocol_py.transport.launch); if it is a `serve --socket` with TLS, connect with "
        "--tls-ca\n"
    )
    assert "--tls or --tls-ca" not in lost.stderr


def test_a_tcp_connection_closed_before_any_answer_keeps_the_tls_hint() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    thread = threading.Thread(target=_h2_then_close, args=(listener, done, False))
    thread.start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    try:
        lost = _cli("describe", "--server", address)
    finally:
        done.set()
        thread.join(timeout=10)
        listener.close()
    assert lost.returncode == 1
    assert lost.stderr == (
        f"protocol-py describe: connection to {address} lost: Connection lost before any "
        "answer: if the server uses TLS, connect with --tls or --tls-ca\n"
    )
