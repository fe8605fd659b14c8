"""A server with few file descriptors (``RLIMIT_NOFILE`` 256) under 300 idle HTTP/2
connections from another process keeps answering new clients: at the connection limit the
oldest idle connections are closed (GOAWAY NO_ERROR); past the descriptor limit accepting backs
off with one rate-limited WARNING instead of asyncio's traceback per attempt; busy connections
at the limit refuse the newcomer with one rate-limited WARNING."""

from __future__ import annotations

import select
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from hyperframe.frame import SettingsFrame

from protocol_py.server.grpc_layer.connection_limit import (
    ConnectionLimit,
    default_max_connections,
)
from protocol_py.server.grpc_layer.log_limit import WARNING_INTERVAL

from ..cli._console import cli
from ..support.h2_client import RawH2, grpc_frame
from ..support.servers import CONSOLE_SCRIPT

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize()
IDLE_CONNECTIONS = 300


def _serve(*extra: str, nofile: int = 256) -> tuple[subprocess.Popen[str], int]:
    """``protocol-py serve`` with a soft ``RLIMIT_NOFILE`` of ``nofile``; its port."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', str(CONSOLE_SCRIPT),
         "serve", "--handshake", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    assert ready, "no handshake line"
    line = proc.stdout.readline()
    return proc, int(line.split("|")[2].rpartition(":")[2])


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    return err


@pytest.fixture
def idle_connections() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def _open_idle(port: int, count: int, into: list[socket.socket]) -> None:
    """``count`` connections that send the HTTP/2 preface and then nothing."""
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(PREFACE)
        into.append(sock)


def _closed_by_server(sockets: list[socket.socket], wait: float = 5.0) -> int:
    """How many of ``sockets`` the server has closed (end of file after its frames)."""
    deadline = time.monotonic() + wait
    closed: set[int] = set()
    while time.monotonic() < deadline:
        for index, sock in enumerate(sockets):
            if index in closed:
                continue
            sock.setblocking(False)
            try:
                while True:
                    data = sock.recv(65536)
                    if not data:
                        closed.add(index)
                        break
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                closed.add(index)
        time.sleep(0.1)
    return len(closed)


def _describe(port: int) -> None:
    done = cli("describe", "--server", f"127.0.0.1:{port}", "--timeout", "30", timeout=90)
    assert done.returncode == 0, done.stderr
    assert "reference" in done.stdout


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if " WARNING " in line]


def test_the_default_limit_follows_the_descriptor_limit() -> None:
    assert default_max_connections(1024) == 896
    assert default_max_connections(256) == 128
    assert default_max_connections(64) == 32
    assert default_max_connections(10**9) == 10_000


def test_idle_connections_over_the_limit_close_the_oldest_and_new_clients_are_served(
    idle_connections: list[socket.socket],
) -> None:
    proc, port = _serve()  # RLIMIT_NOFILE 256: at most 128 connections
    try:
        _open_idle(port, IDLE_CONNECTIONS, idle_connections)
        _describe(port)
        closed = _closed_by_server(idle_connections)
        # the newest 128 - 1 (the Describe took one place) may stay; the oldest were closed
        assert closed >= IDLE_CONNECTIONS - 128
        newest = idle_connections[-1]
        newest.setblocking(False)
        assert _closed_by_server([newest], wait=0.5) == 0  # the newest ones stay open
        _describe(port)
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "out of system resource" not in err
    assert _warnings(err) == []  # closing idle connections at the limit is not a warning
    assert len(err.splitlines()) < 40


def test_past_the_descriptor_limit_accepting_backs_off_with_one_warning(
    idle_connections: list[socket.socket],
) -> None:
    # a connection limit above what the descriptors allow: accept() fails with EMFILE
    proc, port = _serve("--max-connections", "5000")
    try:
        _open_idle(port, IDLE_CONNECTIONS, idle_connections)
        _describe(port)
        assert _closed_by_server(idle_connections) > 0  # oldest idle closed to free descriptors
        _describe(port)
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "out of system resource" not in err
    start_up, *warnings = _warnings(err)  # the limit set past the descriptors is warned of
    assert "--max-connections 5,000 is more than the descriptor limit" in start_up, err
    assert 1 <= len(warnings) <= 3, err  # one per 10 s at most
    assert "cannot accept connections: Too many open files (EMFILE)" in warnings[0]
    assert "accepting paused for" in warnings[0]
    assert len(err.splitlines()) < 40


def test_busy_connections_at_the_limit_refuse_the_new_one_with_one_warning() -> None:
    closed: list[tuple[object, str]] = []

    class Busy:
        class handler:  # noqa: N801 - the attribute a protocol has
            open_streams = 1

    class Idle:
        class handler:  # noqa: N801
            open_streams = 0

    limit = ConnectionLimit(2, lambda protocol, reason: closed.append((protocol, reason)))
    busy, idle = Busy(), Idle()
    assert limit.admit(busy) and limit.admit(idle)
    newcomer = Busy()
    assert limit.admit(newcomer)  # the idle one made room
    assert closed == [(idle, "connection limit reached")] and limit.evicted == 1
    refused = [Busy() for _ in range(50)]
    assert not any(limit.admit(each) for each in refused)
    assert len(closed) == 51 and limit.refused == 50 and len(limit) == 2
    assert limit._refusals.suppressed == 49  # one WARNING for the 50


def test_the_connection_idle_longest_is_closed_first_not_the_one_opened_first() -> None:
    closed: list[object] = []

    class Idle:
        class handler:  # noqa: N801 - the attribute a protocol has
            open_streams = 0

    limit = ConnectionLimit(3, lambda protocol, reason: closed.append(protocol))
    active, second, third = Idle(), Idle(), Idle()
    for each in (active, second, third):
        assert limit.admit(each)
    limit.touch(active)  # a stream of the first connection just ended
    limit.touch(Idle())  # one not counted: nothing changes
    assert limit.admit(Idle()) and limit.admit(Idle())
    assert closed == [second, third]  # idle longest first; the active one stays
    limit.accept_exhausted(OSError(24, "Too many open files"), 0.05)
    assert closed[2] is active and len(limit) == 0


def test_a_client_calling_every_100_ms_keeps_its_connection_beside_idle_floods(
    idle_connections: list[socket.socket],
) -> None:
    proc, port = _serve("--max-connections", "20")
    try:
        active = RawH2(port)  # opened before any of the idle ones
        try:
            for _ in range(4):  # 4 x 15 idle connections: the limit is passed 3 times
                _open_idle(port, 15, idle_connections)
                time.sleep(0.1)
                state = active.outcome(active.open("Describe", grpc_frame(b"")))
                assert state["trailers"].get("grpc-status") == "0", state
            assert active.terminated is None and not active.closed  # never closed for room
        finally:
            active.close()
        assert _closed_by_server(idle_connections) >= 60 - 20
        _describe(port)
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err


def test_a_busy_server_at_the_limit_refuses_newcomers_and_keeps_serving() -> None:
    proc, port = _serve("--max-connections", "1")
    try:
        busy = RawH2(port)
        busy.open("StreamCompletion", None, end=False)  # a stream stays open
        assert busy.sync()  # the server has seen that stream: the connection is not idle
        started = time.monotonic()
        for _ in range(20):
            # nothing sent (the server closes before reading): its frames, then end of file
            refused = socket.create_connection(("127.0.0.1", port), timeout=10)
            data = b""
            while chunk := refused.recv(65536):
                data += chunk
            refused.close()
            assert b"\x00\x00\x08\x07" in data  # closed at once with a GOAWAY frame
        elapsed = time.monotonic() - started
        busy.sock.close()
        time.sleep(0.2)
        _describe(port)
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    warnings = _warnings(err)
    # 20 refusals: one line per WARNING_INTERVAL (10 s), the rest counted
    assert 1 <= len(warnings) <= 1 + elapsed // WARNING_INTERVAL, err
    assert "refused a connection: 1 connections open (the limit" in warnings[0]
