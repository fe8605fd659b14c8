"""A stream beyond SETTINGS_MAX_CONCURRENT_STREAMS is refused alone (h2 4).

RFC 9113 section 5.1.2 (https://www.rfc-editor.org/rfc/rfc9113#section-5.1.2) makes a peer's
stream over the advertised limit a stream error of type PROTOCOL_ERROR or REFUSED_STREAM: that
stream is reset, the connection and its other streams go on. h2 (4.x) raises
``TooManyStreamsError`` from ``H2Connection._receive_headers_frame`` before it decodes the
header block, which ends the whole connection with GOAWAY PROTOCOL_ERROR, and cannot simply be
caught: the HPACK decoder would then miss that block and decode every later block on the
connection against a stale dynamic table.

:func:`install` wraps ``_receive_headers_frame``: a HEADERS frame that would open a stream
over the limit has its header block decoded (the HPACK state stays the peer's), opens the
stream in h2's books (the stream ID rules still apply: a stream ID too low or of the wrong
parity stays a connection error, as does an invalid header block) and resets it at once with
RST_STREAM REFUSED_STREAM. No event reaches grpclib, so no handler runs for it; DATA the peer
sends on it before it sees the reset is ignored and its bytes given back to the connection's
flow-control window (h2 does that for every stream it has reset). A gRPC client treats
REFUSED_STREAM as nothing having been processed and may retry.

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when h2 still has the shape it was written for (``H2Connection._receive_headers_frame``
and the private helpers it uses); otherwise nothing changes. Checked on h2 4.4.1 (the window
is ``>=4.1,<5``; grpclib requires ``h2<5``).
"""

from __future__ import annotations

from typing import Any

from h2 import connection as _connection
from h2.errors import ErrorCodes

__all__ = ["install"]

_MARK = "_protocol_py_refused_stream"


def install() -> bool:
    """Patch ``h2.connection.H2Connection._receive_headers_frame`` (idempotent).

    Returns:
        True when installed (now or before); False when h2's shape differs: then nothing is
        changed.
    """
    h2_connection: Any = getattr(_connection, "H2Connection", None)
    receive = getattr(h2_connection, "_receive_headers_frame", None)
    decode = getattr(_connection, "_decode_headers", None)
    inputs = getattr(_connection, "ConnectionInputs", None)
    allowed = getattr(_connection, "AllowedStreamIDs", None)
    if receive is None or decode is None or inputs is None or allowed is None:
        return False
    if getattr(receive, _MARK, False):
        return True
    if not hasattr(h2_connection, "_get_or_create_stream"):
        return False

    def _receive_headers_frame(self: Any, frame: Any) -> Any:
        if (
            frame.stream_id in self.streams
            or self.open_inbound_streams + 1 <= self.local_settings.max_concurrent_streams
        ):
            return receive(self, frame)
        headers = decode(self.decoder, frame.data)  # keeps the HPACK dynamic table in step
        self.state_machine.process_input(inputs.RECV_HEADERS)
        stream = self._get_or_create_stream(frame.stream_id, allowed(not self.config.client_side))
        frames, _events = stream.receive_headers(
            headers, "END_STREAM" in frame.flags, self.config.header_encoding
        )
        self.state_machine.process_input(inputs.SEND_RST_STREAM)
        frames = [*frames, *stream.reset_stream(ErrorCodes.REFUSED_STREAM)]
        self.config.logger.debug(
            "Refused stream ID %d: over SETTINGS_MAX_CONCURRENT_STREAMS", frame.stream_id
        )
        return frames, []

    setattr(_receive_headers_frame, _MARK, True)
    h2_connection._receive_headers_frame = _receive_headers_frame
    return True
