"""A stream opened on a connection that has just closed fails as a lost connection (grpclib 0.4).

grpclib's channel reuses its connection unless the connection already reported itself lost;
when the peer closes the connection between that check and the new stream (a listener that
accepts and closes at once, a server exiting), ``Connection.create_stream`` reads the transport
attribute ``close()`` just deleted and raises ``AttributeError: 'Connection' object has no
attribute '_transport'``. :func:`install` makes it raise what every other use of a lost
connection raises, ``StreamTerminatedError("Connection lost")``, so clients and the command
line report a lost connection instead of an internal error.

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when grpclib still has the shape it was written for (a ``Connection.create_stream``);
otherwise nothing changes. Checked on grpclib 0.4.9 (the pinned range is ``>=0.4.9,<0.5``).
"""

from __future__ import annotations

from typing import Any

from grpclib import protocol as _protocol
from grpclib.exceptions import StreamTerminatedError

__all__ = ["install"]


def install() -> bool:
    """Patch ``grpclib.protocol.Connection.create_stream`` (idempotent); True when installed."""
    connection = getattr(_protocol, "Connection", None)
    create = getattr(connection, "create_stream", None)
    if connection is None or create is None:
        return False
    if getattr(create, "_protocol_py_closed", False):
        return True

    def create_stream(self: Any, **kwargs: Any) -> Any:
        if not hasattr(self, "_transport"):
            raise StreamTerminatedError("Connection lost")
        return create(self, **kwargs)

    create_stream._protocol_py_closed = True  # type: ignore[attr-defined]
    connection.create_stream = create_stream
    return True
