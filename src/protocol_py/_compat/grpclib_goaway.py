"""A GOAWAY stays the reason a client's streams fail (grpclib 0.4), and graceful ones are named.

When the server sends HTTP/2 GOAWAY (RFC 9113 section 6.8), grpclib fails every open stream
with ``StreamTerminatedError("Received GOAWAY frame, closing connection; error_code: N")``,
closes the transport, and, when the transport reports the connection lost, fails the same
streams again with ``"Connection lost"``: whichever runs last before the awaiting task resumes
wins, so a server shutting down (GOAWAY with NO_ERROR) was usually reported as a lost
connection. :func:`install` makes grpclib keep the GOAWAY as the reason of every later close of
that connection; :func:`goaway_error_code` reads the code back from the error's text.

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when grpclib still has the shape it was written for
(``EventsProcessor.process_connection_terminated`` and ``EventsProcessor.close``); otherwise
nothing changes. Checked on grpclib 0.4.9 (the pinned range is ``>=0.4.9,<0.5``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from grpclib import protocol as _protocol

__all__ = ["GOAWAY_NO_ERROR", "goaway_error_code", "install"]

GOAWAY_NO_ERROR: Final = 0
"""The HTTP/2 error code NO_ERROR (RFC 9113 section 7): a graceful GOAWAY, the peer is
shutting down; a request that was not processed can be retried on a new connection."""

_GOAWAY: Final = re.compile(r"Received GOAWAY frame, closing connection; error_code: (\d+)")

_ATTRIBUTE: Final = "_protocol_py_goaway_reason"


def goaway_error_code(error: BaseException) -> int | None:
    """The HTTP/2 error code of the GOAWAY that ended ``error``'s stream (grpclib's
    ``StreamTerminatedError`` text), or None when the stream did not end with a GOAWAY."""
    match = _GOAWAY.search(str(error))
    return int(match.group(1)) if match else None


def install() -> bool:
    """Keep a received GOAWAY as the reason of every later close of its connection
    (idempotent).

    Returns:
        True when installed (now or before); False when grpclib's shape differs (then
        nothing is changed).
    """
    processor: Any = _protocol.EventsProcessor
    terminated: Callable[..., None] | None = processor.__dict__.get("process_connection_terminated")
    close: Callable[..., None] | None = processor.__dict__.get("close")
    if terminated is None or close is None:
        return False
    if getattr(close, "__wrapped_by_protocol_py__", False):
        return True

    def process_connection_terminated(self: Any, event: Any) -> None:
        setattr(
            self,
            _ATTRIBUTE,
            f"Received GOAWAY frame, closing connection; error_code: {int(event.error_code)}",
        )
        terminated(self, event)

    def close_keeping_goaway(self: Any, reason: str = "Connection closed") -> None:
        close(self, getattr(self, _ATTRIBUTE, None) or reason)

    close_keeping_goaway.__wrapped_by_protocol_py__ = True  # type: ignore[attr-defined]
    processor.process_connection_terminated = process_connection_terminated
    processor.close = close_keeping_goaway
    return True
