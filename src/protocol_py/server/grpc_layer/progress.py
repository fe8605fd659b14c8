"""Progress timeouts: a peer that stops reading cannot hold a stream, or its connection's
queued bytes, for ever (docs/decisions.md#d32).

HTTP/2 flow control pauses a reply when the peer's window is closed, which keeps the server's
memory per stream at one window; but the paused call still holds its request, its decoded
objects and its part of the memory budget for as long as the peer likes. Two bounds:

* **Write timeout** (:class:`ProgressWatch`): a stream whose flow-control window (its own or
  the connection's) has stayed closed for the write timeout (default
  :data:`DEFAULT_WRITE_TIMEOUT`, ``--write-timeout``), and a connection whose transport has
  stayed paused for writing that long (the peer does not read its socket at all), lose their
  calls: the stream is reset (RST_STREAM CANCEL) and its handler cancelled, which releases
  its memory; a paused connection is closed. One INFO record each. Checked every
  :func:`check_interval` seconds, so a stalled stream is reset between the timeout and the
  timeout plus one interval after its window closed.
* **Queued bytes** (:func:`over_queue_budget`): a connection whose transport holds more than
  :data:`CONNECTION_QUEUE_BYTES` bytes written but not yet taken by the peer's socket is sent
  GOAWAY (ENHANCE_YOUR_CALM) and closed, with one WARNING. grpclib waits for the transport
  before every DATA frame, but a peer that raises SETTINGS_MAX_FRAME_SIZE to 16 MiB and opens
  a large window makes one frame per stream, times up to 100 streams, land in that buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final

from h2.errors import ErrorCodes

from protocol_py._compat import grpclib_private

__all__ = [
    "CANCEL_REASON_ATTR",
    "CONNECTION_QUEUE_BYTES",
    "DEFAULT_WRITE_TIMEOUT",
    "MAX_CHECK_INTERVAL",
    "ProgressWatch",
    "cancel_reason",
    "check_interval",
    "over_queue_budget",
    "write_timeout_message",
]

log = logging.getLogger("protocol_py.server")

DEFAULT_WRITE_TIMEOUT: Final = 30.0
"""Default write timeout, in seconds: a stream whose peer keeps its flow-control window closed
this long is reset, a connection paused for writing this long is closed."""

MAX_CHECK_INTERVAL: Final = 1.0
"""Longest time between two checks of a connection's streams, in seconds (a quarter of the
write timeout when that is shorter)."""

CONNECTION_QUEUE_BYTES: Final = 16 * 1024 * 1024
"""Most bytes (16 MiB) a connection's transport may hold written but not yet sent; more closes
the connection with GOAWAY ENHANCE_YOUR_CALM."""


def check_interval(write_timeout: float) -> float:
    """Seconds between checks for ``write_timeout``: a quarter of it, at most
    :data:`MAX_CHECK_INTERVAL`."""
    return min(MAX_CHECK_INTERVAL, write_timeout / 4)


CANCEL_REASON_ATTR: Final = "protocol_py_cancel_reason"
"""Attribute set on grpclib's HTTP/2 stream when the server itself resets it (the write
timeout): its reason, which the call's log record gives as ``detail``."""


def cancel_reason(stream: Any) -> str | None:
    """The server's own reason for resetting grpclib's HTTP/2 ``stream``, or None when the
    server did not reset it (the client cancelled, the connection was lost)."""
    reason = getattr(stream, CANCEL_REASON_ATTR, None)
    return reason if isinstance(reason, str) else None


def write_timeout_message(timeout: float) -> str:
    """Why a stalled stream was reset (its call's cancellation reason)."""
    return f"peer kept its flow-control window closed for the write timeout of {timeout:g} s"


def over_queue_budget(protocol: Any, transport: asyncio.WriteTransport) -> bool:
    """Close ``protocol``'s connection (GOAWAY ENHANCE_YOUR_CALM, one WARNING) when its
    ``transport`` holds more than :data:`CONNECTION_QUEUE_BYTES` unsent bytes; True when it
    did (or the connection is closing already)."""
    if transport.is_closing():
        return True
    queued = transport.get_write_buffer_size()
    if queued <= CONNECTION_QUEUE_BYTES:
        return False
    connection = getattr(protocol, "connection", None)
    with contextlib.suppress(Exception):
        grpclib_private.connection_h2(connection).close_connection(ErrorCodes.ENHANCE_YOUR_CALM)
    log.warning(
        "closing HTTP/2 connection with GOAWAY ENHANCE_YOUR_CALM: %d bytes queued and not read "
        "by the peer, over the per-connection budget of %d bytes",
        queued,
        CONNECTION_QUEUE_BYTES,
    )
    with contextlib.suppress(Exception):
        protocol.processor.close("queued bytes over the connection's budget")
    transport.abort()
    return True


class ProgressWatch:
    """The write-timeout checks of one connection (see the module docstring).

    Args:
        protocol: The connection's grpclib ``H2Protocol`` (its ``processor.streams`` and
            ``connection``).
        write_timeout: Seconds.
    """

    def __init__(self, protocol: Any, write_timeout: float) -> None:
        self.protocol = protocol
        self.write_timeout = write_timeout
        self._stalled: dict[int, float] = {}
        self._paused_since: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.resets = 0
        """Streams reset for their write timeout on this connection."""

    def start(self) -> None:
        """Check every :func:`check_interval` seconds until :meth:`stop`."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(check_interval(self.write_timeout), self._tick)

    def stop(self) -> None:
        """Stop checking (the connection is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stalled.clear()

    def _tick(self) -> None:
        self._timer = None
        try:
            self.check(time.monotonic())
        finally:
            if not self._closing():
                self.start()

    def _closing(self) -> bool:
        connection = getattr(self.protocol, "connection", None)
        return connection is None or bool(connection.is_closing())

    def check(self, now: float) -> None:
        """Reset the streams stalled longer than the write timeout at ``now`` (monotonic
        seconds) and close the connection when its transport stayed paused that long."""
        if self._closing():
            return
        connection = self.protocol.connection
        if not connection.write_ready.is_set():
            if self._paused_since is None:
                self._paused_since = now
            elif now - self._paused_since >= self.write_timeout:
                self._close_paused()
                return
        else:
            self._paused_since = None
        processor = self.protocol.processor
        h2 = grpclib_private.connection_h2(connection)
        streams = getattr(processor, "streams", {})
        for stream_id in list(self._stalled):
            if stream_id not in streams:
                del self._stalled[stream_id]
        for stream_id, stream in list(streams.items()):
            try:
                window = h2.local_flow_control_window(stream_id)
            except Exception:  # the stream is closed on the HTTP/2 side: nothing to send
                window = 1
            if window > 0:
                self._stalled.pop(stream_id, None)
                continue
            since = self._stalled.setdefault(stream_id, now)
            if now - since >= self.write_timeout:
                del self._stalled[stream_id]
                self._reset(stream_id, stream)

    def _reset(self, stream_id: int, stream: Any) -> None:
        self.resets += 1
        setattr(stream, CANCEL_REASON_ATTR, write_timeout_message(self.write_timeout))
        log.info(
            "reset stream %d (RST_STREAM CANCEL): %s",
            stream_id,
            write_timeout_message(self.write_timeout),
        )
        with contextlib.suppress(Exception):
            stream.reset_nowait(ErrorCodes.CANCEL)
        with contextlib.suppress(Exception):
            self.protocol.connection.flush()
        with contextlib.suppress(Exception):
            stream.__terminated__(write_timeout_message(self.write_timeout))
        with contextlib.suppress(Exception):
            self.protocol.processor.handler.cancel(stream)

    def _close_paused(self) -> None:
        log.info(
            "closed a connection whose peer read nothing for the write timeout of %g s",
            self.write_timeout,
        )
        transport = None  # grpclib's close drops the connection's transport: take it first
        with contextlib.suppress(Exception):
            transport = grpclib_private.connection_transport(self.protocol.connection)
        with contextlib.suppress(Exception):
            self.protocol.processor.close("write timeout")
        if transport is not None:
            transport.abort()
