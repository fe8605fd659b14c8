"""Exactly one request message on a unary or server-streaming call (spec: "The wire protocol").

gRPC's unary and server-streaming calls carry exactly one request message. grpclib reads the
first message and ignores whatever follows it: a client that sends two messages (grpcio's
``stream_unary`` or ``stream_stream`` on a unary method) would get an answer to the first as if
the second never existed, and one that sends none a misleading "truncated" error.

The status is INTERNAL for both, as in grpc-java (``ServerCalls``: "Too many requests",
"Half-closed without a request") and grpc-go (its "cardinality violation" errors): the
client broke the call's cardinality, a protocol error rather than a bad field value, so
INVALID_ARGUMENT (whose message would name a field) does not fit, and a client sees the same
code whichever of these servers it talks to. The message names the method.

The end of the request (END_STREAM) is never waited for: grpcio sends it with the message
(one DATA frame with the END_STREAM flag), but a client may keep its request side open, and
such a call is answered as usual
(:data:`~protocol_py.server.grpc_layer.connections.DEFAULT_RECEIVE_TIMEOUT`
never cuts a call whose message was read). Instead :class:`SingleRequest` watches the request
side while the call runs: data after the first message ends the call at once with INTERNAL,
whether it was already buffered or arrives later, and the call's one RPC record says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final

import grpclib.server
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py._compat import grpclib_private
from protocol_py.server.grpc_layer.limits import receive_message
from protocol_py.server.grpc_layer.progress import cancel_reason

__all__ = [
    "EXTRA_MESSAGE",
    "HALF_CLOSE_WAIT",
    "NO_MESSAGE",
    "REQUEST_READ_ATTR",
    "SingleRequest",
    "receive_single",
]

EXTRA_MESSAGE: Final = "more than one request message for a unary or server-streaming call"
"""Status message (INTERNAL) of a call whose client sent data after its request message,
followed by ``" to /package.Service/Method"``."""

NO_MESSAGE: Final = "no request message for a unary or server-streaming call"
"""Status message (INTERNAL) of a call whose client ended its request side without sending a
message, followed by ``" to /package.Service/Method"``."""

HALF_CLOSE_WAIT: Final = 0.5
"""Longest time, in seconds, a unary or server-streaming call whose request message was read
waits for the client's half-close (END_STREAM) before its work starts. grpcio half-closes with
or right after its message, so this costs nothing unless a client keeps its request side
open, which is then answered this much later; data arriving within it (a second message)
gets INTERNAL at once, and later data while the call runs ends it with INTERNAL."""

REQUEST_READ_ATTR: Final = "protocol_py_request_read"
"""Attribute set (True) on grpclib's HTTP/2 stream once its request message was read: the
receive timeout no longer applies to it although :class:`SingleRequest` waits on its
buffer."""


def _path(stream: grpclib.server.Stream[Any, Any]) -> str:
    return grpclib_private.server_method_name(stream) or "this method"


async def receive_single(
    stream: grpclib.server.Stream[Any, Any],
    max_size: int,
    on_length: Callable[[int], Awaitable[None]] | None = None,
) -> bytes:
    """The request message body (:func:`~protocol_py.server.grpc_layer.limits.receive_message`),
    with
    INTERNAL :data:`NO_MESSAGE` when the client ended its request side without sending any
    byte; ``on_length`` is awaited with the announced length before the body is read.

    Raises:
        GRPCError: INTERNAL when there is no request message; otherwise as
            :func:`~protocol_py.server.grpc_layer.limits.receive_message` (INVALID_ARGUMENT for a
            truncated message, RESOURCE_EXHAUSTED for an oversized one, UNIMPLEMENTED for a
            compressed one).
    """
    raw = grpclib_private.server_h2_stream(stream)
    try:
        data = await receive_message(stream, max_size, on_length)
    except GRPCError as exc:
        ended = grpclib_private.buffer_ended(raw.buffer)
        if exc.status is Status.INVALID_ARGUMENT and ended and not raw.data_received:
            raise GRPCError(Status.INTERNAL, f"{NO_MESSAGE} to {_path(stream)}") from None
        raise
    setattr(raw, REQUEST_READ_ATTR, True)
    return data


def _more_data(stream: grpclib.server.Stream[Any, Any]) -> bool:
    """True when request bytes beyond the first message are buffered: the rest of a DATA frame
    already read, or a DATA frame not yet read (an empty one, such as a bare END_STREAM, is
    not data)."""
    buffer = grpclib_private.server_h2_stream(stream).buffer
    if grpclib_private.buffer_acked_size(buffer):
        return True
    queued = grpclib_private.queued_items(grpclib_private.buffer_unacked(buffer))
    return any(item.data_size for item in queued)


class SingleRequest:
    """The one-message check of a call whose request message was read (see the module
    docstring).

    :meth:`start` fails the call when more data is buffered or arrives before the client's
    half-close (waiting at most :data:`HALF_CLOSE_WAIT`); then, used as an async context
    manager around the call's work, it keeps watching a request side left open: data arriving
    later cancels the work and the block raises the INTERNAL error.

    Attributes:
        error: The INTERNAL error once extra data was seen, else None (a handler's
            cancellation branch reads it to record the right outcome).
    """

    def __init__(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        self._stream = stream
        self.error: GRPCError | None = None
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._working = False

    def cancel_reason(self) -> str | None:
        """The server's own reason for resetting the call's stream (the write timeout's
        message), or None (:func:`~protocol_py.server.grpc_layer.progress.cancel_reason`)."""
        return cancel_reason(grpclib_private.server_h2_stream(self._stream))

    async def start(self) -> None:
        """Check the request side right after the message was read.

        Raises:
            GRPCError: INTERNAL :data:`EXTRA_MESSAGE` when data follows the message, already
                buffered or arriving before the half-close within :data:`HALF_CLOSE_WAIT`.
        """
        if _more_data(self._stream):
            raise self._violation()
        if grpclib_private.buffer_ended(grpclib_private.server_h2_stream(self._stream).buffer):
            return  # END_STREAM came with the message (grpclib, grpc-go): nothing can follow
        self._task = asyncio.current_task()
        self._watcher = watcher = asyncio.ensure_future(self._watch())
        try:
            await asyncio.wait({watcher}, timeout=HALF_CLOSE_WAIT)
        except BaseException:  # cancelled (client reset, deadline, shutdown): stop watching
            self._watcher = None
            watcher.cancel()
            raise
        if self.error is not None:
            self._watcher = None
            raise self.error

    async def __aenter__(self) -> SingleRequest:
        self._working = True
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._working = False
        watcher, self._watcher = self._watcher, None
        if watcher is not None and not watcher.done():
            watcher.cancel()
        task = self._task
        # our own cancel (as asyncio.timeout does): INTERNAL, unless grpclib also ended the
        # call (client reset, deadline); the server's deliveries of it again
        # (docs/decisions.md#d46) and a shutdown's cancel are taken back with it
        own = self.error is not None and kind is asyncio.CancelledError
        if own and task is not None and self.error is not None and not self._ended_by_grpclib():
            while task.cancelling():
                task.uncancel()
            raise self.error from None

    @property
    def ended(self) -> bool:
        """Whether the call was ended by a request message after the first (its work
        cancelled; :attr:`error` says why)."""
        return self.error is not None

    def _ended_by_grpclib(self) -> bool:
        wrapper = grpclib_private.server_h2_stream(self._stream).wrapper
        return grpclib_private.wrapper_error(wrapper) is not None

    def _violation(self) -> GRPCError:
        self.error = GRPCError(Status.INTERNAL, f"{EXTRA_MESSAGE} to {_path(self._stream)}")
        return self.error

    async def _watch(self) -> None:
        raw = grpclib_private.server_h2_stream(self._stream)
        while True:
            try:
                data = await raw.recv_data(1)
            except AssertionError:  # an empty DATA frame, which grpclib's buffer reads as EOF
                continue
            except Exception:  # the stream is gone: its call ends anyway
                return
            if not data:
                return  # END_STREAM: exactly one message
            self._violation()
            if self._working and self._task is not None:
                self._task.cancel()
            return
