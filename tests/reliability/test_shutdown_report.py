"""The client reports a shutdown as the server sent it.

At grace-period expiry the server ends each in-flight StreamCompletion with an in-band
TRANSIENT "server shutting down" error, then sends GOAWAY and closes the connection. grpclib's
client fails every open stream on GOAWAY, dropping events it had already received, which
``ModelClient`` and ``protocol-py chat`` would print as "connection lost: Received GOAWAY".
So on both sides: the server lingers after the final events
(SIGTERM test), and the client yields the in-band events already in its buffer even when the
GOAWAY arrives in the same read (raw HTTP/2 server test)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient, buffered_events
from protocol_py_gen.model.v1 import ErrorKind, ModelError, StreamEvent, TextDelta

from .conftest import frame, request

CONSOLE_SCRIPT = Path(sys.executable).parent / "protocol-py"
RUNS = 3


def spawn(grace: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", "--port", "0", "--grace-period", str(grace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return proc, line.strip().split("|")[2]


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def assert_shutdown_event(events: list[StreamEvent]) -> None:
    last = events[-1]
    assert last.error is not None, events[-3:]
    assert last.error.kind == ErrorKind.TRANSIENT
    assert last.error.retryable is True
    assert last.error.message == "server shutting down"
    assert sum(1 for e in events if e.error is not None) == 1


async def test_model_client_surfaces_the_in_band_shutdown_error_of_a_sigterm() -> None:
    for _ in range(RUNS):
        proc, address = spawn(grace=0.3)
        try:
            async with ModelClient.connect(address) as client:
                await client.configure({"pace_tokens_per_second": 50}, timeout=10)
                events: list[StreamEvent] = []
                async for event in client.stream(request("word " * 200), timeout=30):
                    events.append(event)
                    if len(events) == 3:
                        proc.send_signal(signal.SIGTERM)
            assert_shutdown_event(events)
            assert proc.wait(10) == 0
        finally:
            stop(proc)


async def goaway_server(events: list[StreamEvent]) -> tuple[asyncio.Server, int]:
    """A raw HTTP/2 server that answers one StreamCompletion with ``events``, OK trailers,
    GOAWAY and a closed socket, all in one write: the worst case for the client."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        writer.write(conn.data_to_send())
        stream_id: int | None = None
        ended = False
        while not ended:
            chunk = await reader.read(65536)
            if not chunk:
                break
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.RequestReceived):
                    stream_id = event.stream_id
                elif isinstance(event, h2.events.StreamEnded):
                    ended = True
            writer.write(conn.data_to_send())
        assert stream_id is not None
        conn.send_headers(stream_id, [(":status", "200"), ("content-type", "application/grpc")])
        for item in events:
            conn.send_data(stream_id, frame(bytes(item)))
        conn.send_headers(stream_id, [("grpc-status", "0")], end_stream=True)
        conn.close_connection()
        writer.write(conn.data_to_send())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_client_keeps_in_band_events_received_with_the_goaway() -> None:
    shutdown = StreamEvent(
        error=ModelError(kind=ErrorKind.TRANSIENT, message="server shutting down", retryable=True)
    )
    server, port = await goaway_server([StreamEvent(text_delta=TextDelta(text="hi")), shutdown])
    try:
        async with ModelClient.connect(f"127.0.0.1:{port}") as client:
            events = [e async for e in client.stream(request(), timeout=10)]
        assert events[0].text_delta == TextDelta(text="hi")
        assert_shutdown_event(events)
    finally:
        server.close()


async def test_client_still_reports_a_connection_lost_before_the_stream_ended() -> None:
    server, port = await goaway_server([StreamEvent(text_delta=TextDelta(text="hi"))])
    try:
        async with ModelClient.connect(f"127.0.0.1:{port}") as client:
            seen: list[StreamEvent] = []
            with pytest.raises(StreamTerminatedError, match=r"GOAWAY|Connection lost"):
                async for event in client.stream(request(), timeout=10):
                    seen.append(event)
        assert [e.text_delta for e in seen] == [TextDelta(text="hi")]
    finally:
        server.close()


def test_chat_prints_the_server_shutdown_error_not_a_lost_connection() -> None:
    proc, address = spawn(grace=0.3)
    try:
        configure = subprocess.run(
            [
                sys.executable,
                "-c",
                "import asyncio,sys\n"
                "from protocol_py.client.client import ModelClient\n"
                "async def main():\n"
                "    async with ModelClient.connect(sys.argv[1]) as c:\n"
                "        await c.configure({'pace_tokens_per_second': 50}, timeout=10)\n"
                "asyncio.run(main())\n",
                address,
            ],
            check=True,
            timeout=30,
        )
        assert configure.returncode == 0
        chat = subprocess.Popen(
            [str(CONSOLE_SCRIPT), "chat", "--server", address, "word " * 200],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert chat.stdout is not None
        first = chat.stdout.read(8)  # some of the answer streamed: the call is in flight
        assert first
        proc.send_signal(signal.SIGTERM)
        _out, err = chat.communicate(timeout=30)
        assert "TRANSIENT: server shutting down" in err, err
        assert "connection" not in err and "GOAWAY" not in err, err
    finally:
        stop(proc)


class _Chunk:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)


class _Buffer:
    def __init__(self, acked: bytes, unacked: list[bytes]) -> None:
        self._acked = [_Chunk(acked)]
        self._unacked: asyncio.Queue[Any] = asyncio.Queue()
        for item in unacked:
            self._unacked.put_nowait(_Chunk(item))


class _Call:
    def __init__(self, buffer: _Buffer) -> None:
        self._stream = type("S", (), {"buffer": buffer})()


def test_buffered_events_reads_complete_messages_and_drops_a_partial_one() -> None:
    one = bytes(StreamEvent(text_delta=TextDelta(text="a")))
    two = bytes(StreamEvent(text_delta=TextDelta(text="b")))
    data = frame(one) + frame(two)
    call = _Call(_Buffer(data[:4], [data[4:], frame(one)[:6]]))
    events = buffered_events(call)
    assert [e.text_delta.text for e in events if e.text_delta is not None] == ["a", "b"]
    assert buffered_events(object()) == []
