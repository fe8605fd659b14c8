"""A raw asyncio HTTP/1.1 stub upstream on 127.0.0.1 for the provider tests.

Each queued :class:`Reply` answers one request. Bodies are written chunk by chunk (a float in
``chunks`` is a pause in seconds); ``forever`` repeats a chunk until the client hangs up;
``hang`` never sends response headers; ``reset`` / ``reset_before_headers`` abort the
connection with a TCP RST; :func:`dribble` splits a body into one-byte writes. The stub records
every request (method, path, headers, body, arrival time), when the client closed each
connection, and how many connections are open (:meth:`StubUpstream.wait_all_closed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes | float] = field(default_factory=list)
    forever: tuple[bytes, float] | None = None
    hang: bool = False
    hold: bool = False  # after the chunks, keep the connection open until the client closes
    reset: bool = False  # after the chunks, abort the connection with a TCP RST
    reset_before_headers: bool = False  # read the request, then abort with a TCP RST


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    closed_at: float | None = None

    def json(self) -> Any:
        return json.loads(self.body)


_REASONS = {
    200: "OK",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    529: "Overloaded",
}


def dribble(body: bytes) -> list[bytes | float]:
    """``body`` as one-byte writes, each followed by a zero pause (one event-loop turn), so
    the client's reads see the body a byte at a time."""
    out: list[bytes | float] = []
    for i in range(len(body)):
        out += [body[i : i + 1], 0.0]
    return out


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class StubUpstream:
    """``async with StubUpstream() as stub``: ``stub.url``, ``stub.queue(...)``, ``stub.seen``."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.Event()
        self.accepted = 0
        """Connections accepted so far."""
        self.open_connections = 0
        """Connections whose handler is still running (for hang/hold/forever replies: until the
        client closes its end)."""
        self._idle = asyncio.Event()
        self._idle.set()

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    async def __aenter__(self) -> StubUpstream:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._server.wait_closed()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._handle(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read_request(self, reader: asyncio.StreamReader) -> Seen | None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return Seen(method, path, headers, body, time.monotonic())

    async def _wait_client_close(self, reader: asyncio.StreamReader, seen: Seen) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(1024):
                pass
        seen.closed_at = time.monotonic()
        self.closed.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open_connections += 1
        self._idle.clear()
        try:
            await self._serve(reader, writer)
        finally:
            self.open_connections -= 1
            if not self.open_connections:
                self._idle.set()

    async def wait_all_closed(self, limit: float) -> bool:
        """Wait until no connection is open, at most ``limit`` seconds; True when none is."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), limit)
        return self.open_connections == 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            seen = await self._read_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        assert seen is not None
        self.seen.append(seen)
        reply = self.replies.popleft() if self.replies else Reply(status=404)
        watcher = asyncio.ensure_future(self._wait_client_close(reader, seen))
        try:
            if reply.hang:
                await watcher
                return
            if reply.reset_before_headers:
                _abort(writer)
                return
            head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'X')}"]
            head += [f"{k}: {v}" for k, v in reply.headers.items()]
            head += ["connection: close", "", ""]
            writer.write("\r\n".join(head).encode("latin-1"))
            for chunk in reply.chunks:
                if isinstance(chunk, float):
                    await asyncio.sleep(chunk)
                else:
                    writer.write(chunk)
                await writer.drain()
                if watcher.done():
                    return
            if reply.forever is not None:
                data, interval = reply.forever
                while not watcher.done():
                    writer.write(data)
                    await writer.drain()
                    await asyncio.sleep(interval)
                return
            if reply.reset:
                _abort(writer)
                return
            if reply.hold:
                await watcher
                return
        except ConnectionError:
            return
        finally:
            if not reply.hang and not reply.hold and reply.forever is None:
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(watcher, 2)
            writer.close()
