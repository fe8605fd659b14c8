"""Server-streaming writes that coalesce the events ready at once into one HTTP/2 write.

A vendor adapter translates one upstream read (a buffer of many SSE events) into many
StreamEvents without waiting in between. grpclib sends each message as its own HTTP/2 DATA
frame with its own socket write, which costs far more than producing the event. The
:class:`EventWriter` used by the StreamCompletion handler instead:

* encodes each event at once into its gRPC length-prefixed form (exactly what grpclib writes:
  a 0 compression flag, the 4-byte big-endian length, the message bytes) and appends it to a
  buffer, keeping grpclib's per-message bookkeeping (``SendMessage`` listeners, counters);
* writes the buffer when the handler next waits (a callback scheduled with ``call_soon`` runs
  as soon as the handler's task yields to the event loop, e.g. to read upstream), as DATA frames
  of at most the peer's maximum frame size, in one socket write; and
* when flow control (or a paused transport) does not allow that write at once, writes the
  buffer from a background task that waits for the window as grpclib does (events are never
  held back waiting for the next upstream read); and
* makes the handler wait for the writes when the buffer holds more than the peer's HTTP/2
  flow-control window lets the stream send, :data:`MAX_PENDING_BYTES` or
  :data:`MAX_PENDING_EVENTS`, while a background write waits, and at the end of the stream:
  a peer that reads nothing pauses the provider as before (a window's worth of events, not
  more), and memory stays bounded.

The bytes on the wire are the same gRPC messages in the same order: a gRPC message stream may
split or join messages across DATA frames freely (gRPC over HTTP/2, "Length-Prefixed-Message"),
which every gRPC client (grpclib, grpcio) reassembles. The first message goes through grpclib's
own ``send_message`` (it also sends the response headers).
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any, Final

import grpclib.server
from grpclib.exceptions import StreamTerminatedError

from protocol_py._compat import grpclib_private

__all__ = ["MAX_PENDING_BYTES", "MAX_PENDING_EVENTS", "EventWriter"]

MAX_PENDING_BYTES: Final = 256 * 1024
"""The most encoded event bytes (gRPC length prefixes included) held before the handler waits
for them to be written, in bytes."""

MAX_PENDING_EVENTS: Final = 1024
"""The most events held before the handler waits for them to be written."""

_PREFIX = struct.Struct(">?I")


class EventWriter:
    """Writes the messages of one server-streaming response, coalescing those ready at once.

    Use ``await send(message)`` for each message, ``await drain()`` before the trailers and
    :meth:`close` when the handler ends (it stops a background write). A write failure (the
    client reset the stream, the connection closed) met while no handler call was waiting is
    raised by the next :meth:`send` or :meth:`drain`.
    """

    def __init__(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        self._stream = stream
        # grpclib's per-call objects, fixed for the call's life: read once
        self._raw = grpclib_private.server_h2_stream(stream)
        self._h2 = grpclib_private.h2_connection(self._raw)
        self._codec = grpclib_private.server_codec(stream)
        self._send_type = grpclib_private.server_send_type(stream)
        self._dispatch = grpclib_private.server_send_dispatch(stream)
        self._headers_sent = False
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._scheduled = False
        self._failure: BaseException | None = None
        self._task: asyncio.Task[None] | None = None
        self._budget = 0  # the stream's flow-control window when the first pending event came

    async def send(self, message: Any) -> None:
        """Queue ``message`` (a ``send_type`` instance); it is written when the handler next
        waits, or now when :data:`MAX_PENDING_BYTES` / :data:`MAX_PENDING_EVENTS` is reached.

        Raises:
            Whatever grpclib's ``Stream.send_message`` raises (``StreamTerminatedError``, a
            codec TypeError), including a failure of an earlier background write.
        """
        stream = self._stream
        if not self._headers_sent:
            if not grpclib_private.server_initial_metadata_sent(stream):
                await stream.send_message(message)  # headers and the first event: grpclib's
                return
            self._headers_sent = True
        self._raise_failure()
        dispatch = self._dispatch
        if dispatch is not grpclib_private.NO_LISTENER:  # SendMessage listeners
            (message,) = await dispatch(message)
        data = self._codec.encode(message, self._send_type)
        pending = self._pending
        if not pending:
            # What flow control lets the stream send, read once per write rather than per
            # event (an h2 call): a WINDOW_UPDATE meanwhile only raises it, and when other
            # streams used the connection's window, _write_soon sees the real window and
            # defers the write to _write_all; MAX_PENDING_BYTES bounds the buffer regardless.
            self._budget = self._window()
        pending.append(_PREFIX.pack(False, len(data)))
        pending.append(data)
        self._pending_bytes += len(data) + _PREFIX.size
        grpclib_private.count_message_sent(stream)
        connection = self._raw.connection
        connection.messages_sent += 1
        connection.last_message_sent = time.monotonic()
        if (
            self._task is not None
            or self._pending_bytes >= MAX_PENDING_BYTES
            or len(pending) >= 2 * MAX_PENDING_EVENTS
            or self._pending_bytes > self._budget
        ):
            await self.drain()  # never queue more than the peer's flow-control window takes
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._write_soon)

    async def drain(self) -> None:
        """Write everything queued, waiting for HTTP/2 flow control as grpclib does.

        Raises:
            StreamTerminatedError (or another grpclib error): the stream or connection closed.
        """
        if self._task is not None:
            await asyncio.shield(self._task)
        self._raise_failure()
        if self._pending:
            await self._raw.send_data(self._take())

    def close(self) -> None:
        """Stop a background write still waiting for flow control (the stream is ending);
        events still queued are dropped with the stream."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._pending.clear()
        self._pending_bytes = 0

    async def _write_all(self) -> None:
        """Background write: everything queued, waiting for flow control (grpclib's
        ``send_data``); a failure is kept for the handler's next call."""
        try:
            while self._pending:
                await self._raw.send_data(self._take())
        except Exception as exc:
            self._failure = exc
        finally:
            self._task = None

    def _window(self) -> int:
        """Bytes HTTP/2 flow control lets this stream send now (0 when it is closed)."""
        raw = self._raw
        if raw.id is None:
            return 0
        try:
            window: int = self._h2.local_flow_control_window(raw.id)
        except Exception:  # the stream is closed: drain() raises grpclib's error
            return 0
        return window

    def _take(self) -> bytes:
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        return data

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _write_soon(self) -> None:
        """The ``call_soon`` callback: write the buffer now if flow control allows it."""
        self._scheduled = False
        if not self._pending or self._failure is not None or self._task is not None:
            return  # a background write picks up what is queued when it is done
        raw = self._raw
        connection = raw.connection
        h2 = self._h2
        try:
            if raw.id not in h2.streams:
                raise StreamTerminatedError(f"stream {raw.id} closed")
            size = self._pending_bytes
            if not connection.write_ready.is_set() or h2.local_flow_control_window(raw.id) < size:
                self._task = asyncio.get_running_loop().create_task(self._write_all())
                return
            data = self._take()
            frame = h2.max_outbound_frame_size
            for start in range(0, size, frame):
                h2.send_data(raw.id, data[start : start + frame])
            grpclib_private.h2_transport(raw).write(h2.data_to_send())
        except Exception as exc:  # raised to the handler by its next send() or drain()
            self._failure = exc
            return
        raw.data_sent += size
        connection.data_sent += size
        connection.data_send_process()
