"""Bulk reading of a grpclib client stream's response messages.

grpclib's ``Stream.recv_message`` reads one message with two awaited buffer reads (the 5-byte
gRPC length prefix, then the message), enters its cancellation wrapper, dispatches a
``RecvMessage`` event and acknowledges every received HTTP/2 DATA frame with a socket write of
its own. For a server-streaming reply of many small messages (StreamCompletion's deltas) that
costs several times the decoding. :class:`MessageReader` instead takes every DATA frame already
received (up to :data:`MAX_BATCH_BYTES`), acknowledges them with one WINDOW_UPDATE write, and
returns all the whole messages they hold at once, in order, decoded by the call's codec.

The messages, their order, flow control (data is acknowledged only when the reader takes it,
as grpclib does), the deadline (grpclib's wrapper cancels a waiting read), ``RecvMessage``
listeners and the call's counters are as with grpclib's ``recv_message``. A gRPC message may
span DATA frames and a DATA frame may hold many messages ("Length-Prefixed-Message", gRPC over
HTTP/2); both are reassembled. Written against grpclib 0.4's client stream internals.
"""

from __future__ import annotations

import time
from typing import Any, Final

from protocol_py._compat import grpclib_private

__all__ = ["MAX_BATCH_BYTES", "MessageReader"]

MAX_BATCH_BYTES: Final = 256 * 1024
"""The most received bytes (gRPC framing included) one :meth:`MessageReader.batch` call takes
from the stream's buffer, in bytes; data past it stays unacknowledged in grpclib's buffer for
the next call, so HTTP/2 flow control still paces a server the reader does not keep up with.
A single message larger than this is still read whole (the call takes what it needs)."""

_PREFIX_BYTES: Final = 5
"""The gRPC message prefix: a compressed flag byte and a 4-byte big-endian length."""


class MessageReader:
    """Reads the response messages of one grpclib client ``Stream`` (``channel.request(...)``
    after the request was sent) in batches. Use it instead of ``async for message in call``,
    not together with it."""

    __slots__ = ("_call", "_eof", "_rest")

    def __init__(self, call: Any) -> None:
        self._call = call
        self._rest = b""  # received bytes after the last whole message
        self._eof = False

    @property
    def leftover(self) -> bytes:
        """Bytes taken from the buffer that do not yet form a whole message (a partial one)."""
        return self._rest

    async def batch(self) -> list[Any]:
        """The next messages: every whole message the data received so far holds (waiting for
        data when there is none), or ``[]`` at the end of the response.

        Raises:
            StreamTerminatedError, GRPCError, asyncio.TimeoutError: as grpclib's
                ``recv_message`` (the connection was lost, the deadline passed).
            NotImplementedError: a compressed message (grpclib's own error).
            AssertionError: the response ended inside a message (grpclib's own error).
        """
        call = self._call
        if not grpclib_private.call_initial_metadata_received(call):
            await call.recv_initial_metadata()
        with grpclib_private.call_wrapper(call):
            while True:
                messages = self._split()
                if messages or self._eof:
                    break
                await self._fill()
        if not messages:
            if self._rest:
                raise AssertionError("Received less data than expected")
            return messages
        dispatch = grpclib_private.call_recv_dispatch(call)
        if dispatch is not grpclib_private.NO_LISTENER:  # listeners: per message, as grpclib
            messages = [(await dispatch(message))[0] for message in messages]
        grpclib_private.count_messages_received(call, len(messages))
        connection = grpclib_private.call_h2_stream(call).connection
        connection.messages_received += len(messages)
        connection.last_message_received = time.monotonic()
        return messages

    async def _fill(self) -> None:
        """Take the received DATA frames (waiting for one), acknowledging them together."""
        buffer = grpclib_private.call_h2_stream(self._call).buffer
        queue = grpclib_private.buffer_unacked(buffer)
        parts = [self._rest]
        size = acked = 0
        item = await queue.get()
        while True:
            data, data_size, ack_size = item
            if not ack_size and grpclib_private.buffer_ended(buffer) and queue.empty():
                self._eof = True  # grpclib's end-of-stream marker (b"", 0, 0)
                break
            parts.append(data)
            size += data_size
            acked += ack_size
            if size >= MAX_BATCH_BYTES or queue.empty():
                break
            item = queue.get_nowait()
        if acked:
            grpclib_private.buffer_ack(buffer, acked)
        self._rest = b"".join(parts)

    def _split(self) -> list[Any]:
        """Decode the whole messages at the start of the bytes taken; keep the rest."""
        data = self._rest
        end = len(data)
        if end < _PREFIX_BYTES:
            return []
        call = self._call
        codec, recv_type = grpclib_private.call_codec(call), grpclib_private.call_recv_type(call)
        messages: list[Any] = []
        offset = 0
        while end - offset >= _PREFIX_BYTES:
            if data[offset]:
                raise NotImplementedError("Compression not implemented")
            start = offset + _PREFIX_BYTES
            stop = start + int.from_bytes(data[offset + 1 : start], "big")
            if stop > end:
                break
            messages.append(codec.decode(data[start:stop], recv_type))
            offset = stop
        if offset:
            self._rest = data[offset:]
        return messages
