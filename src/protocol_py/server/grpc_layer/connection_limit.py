"""The server's bound on open connections, and what happens at it.

Each open connection costs a file descriptor; a server whose descriptors run out accepts no
one, so idle connections (``RLIMIT_NOFILE`` 1024, 1,100 idle HTTP/2 connections) locked every
new client out. :class:`ConnectionLimit` admits at most ``maximum`` connections (default
:func:`default_max_connections`, from the soft ``RLIMIT_NOFILE``). A connection over it first
closes the idle connection (no open stream) idle longest (its last stream ended, or it opened,
before any other's) with GOAWAY (NO_ERROR); when every
connection has a stream open, the new one is closed at once (GOAWAY NO_ERROR, before any of
its streams run) and a WARNING is logged, at most one per
:data:`~protocol_py.server.grpc_layer.log_limit.WARNING_INTERVAL` seconds with a count of the
suppressed ones.

When ``accept()`` itself fails for lack of descriptors or memory (other files, upstream
sockets), :meth:`ConnectionLimit.accept_exhausted` (called by
:mod:`protocol_py._compat.asyncio_accept_backoff`, which pauses accepting with a growing
delay) closes the :data:`ACCEPT_EVICTIONS` connections idle longest, so the next accepts can
succeed, and logs one rate-limited WARNING.
"""

from __future__ import annotations

import errno
import importlib
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from protocol_py.server.grpc_layer.log_limit import RateLimitedWarning

__all__ = [
    "ACCEPT_EVICTIONS",
    "CONNECTION_FD_RESERVE",
    "MAX_CONNECTIONS_CAP",
    "ConnectionLimit",
    "default_max_connections",
]

log = logging.getLogger("protocol_py.server")

CONNECTION_FD_RESERVE: Final = 128
"""File descriptors kept out of the default connection limit for everything else (upstream
HTTP connections, files, the event loop's own, worker threads), descriptors."""

ACCEPT_EVICTIONS: Final = 8
"""Idle connections closed, idle longest first, each time ``accept()`` fails for lack of a resource
(so the connections waiting in the kernel's queue get descriptors), connections."""

MAX_CONNECTIONS_CAP: Final = 10_000
"""Largest default connection limit, connections (a larger one takes ``max_connections=``)."""


def _resource_module() -> ModuleType | None:
    """The ``resource`` module (POSIX only), or None."""
    try:
        return importlib.import_module("resource")
    except ImportError:
        return None


def default_max_connections(soft_limit: int | None = None) -> int:
    """The default maximum of open connections: the soft ``RLIMIT_NOFILE`` (``soft_limit``,
    default the process's) minus :data:`CONNECTION_FD_RESERVE`, but at least half of it,
    and at most :data:`MAX_CONNECTIONS_CAP` (also for an unlimited one, and where there is no
    ``resource`` module). 1024 gives 896, 256 gives 128."""
    if soft_limit is None:
        resource = _resource_module()
        if resource is None:
            return MAX_CONNECTIONS_CAP
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_limit == resource.RLIM_INFINITY:
            return MAX_CONNECTIONS_CAP
    if soft_limit <= 0:
        return MAX_CONNECTIONS_CAP
    return max(
        1, min(MAX_CONNECTIONS_CAP, max(soft_limit // 2, soft_limit - CONNECTION_FD_RESERVE))
    )


class ConnectionLimit:
    """Open connections of one server, least recently active first, and the bound on them.

    Args:
        maximum: Most connections open at once (positive).
        close: ``close(protocol, reason)`` sends GOAWAY (NO_ERROR) and closes a connection
            (:func:`~protocol_py.server.grpc_layer.connections.close_connection`).

    Raises:
        ValueError: ``maximum`` is not a positive integer.
    """

    def __init__(self, maximum: int, close: Callable[[Any, str], None]) -> None:
        if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum <= 0:
            raise ValueError(f"max_connections: must be a positive integer, got {maximum!r}")
        self.maximum = maximum
        self._close = close
        self._open: dict[Any, None] = {}  # least recently active first (see touch)
        self.evicted = 0
        """Idle connections closed to make room (counted since start)."""
        self.refused = 0
        """Connections closed at once because every open one was busy."""
        self._refusals = RateLimitedWarning(log)
        self._accept_failures = RateLimitedWarning(log)

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, protocol: Any) -> bool:
        """Count a new connection (``protocol`` has a ``handler`` with ``open_streams``);
        at the limit close the one idle longest first, or, with none idle, close ``protocol``
        itself (False: it is refused)."""
        if len(self._open) >= self.maximum and not self.evict_idle("connection limit reached"):
            self.refused += 1
            self._refusals.warn(
                "refused a connection: %d connections open (the limit, max_connections) and "
                "none idle",
                len(self._open),
            )
            self._close(protocol, "connection limit reached")
            return False
        self._open[protocol] = None
        return True

    def release(self, protocol: Any) -> None:
        """A connection ended (a no-op for one not counted)."""
        self._open.pop(protocol, None)

    def touch(self, protocol: Any) -> None:
        """A stream of ``protocol`` just ended: it becomes the most recently active connection,
        the last to be closed for room (a no-op for one not counted)."""
        if self._open.pop(protocol, False) is None:
            self._open[protocol] = None

    def evict_idle(self, reason: str) -> bool:
        """Close the connection with no open stream that has been idle longest (GOAWAY
        NO_ERROR); False when every connection has one."""
        for protocol in self._open:
            handler = getattr(protocol, "handler", None)
            if getattr(handler, "open_streams", 1) == 0:
                del self._open[protocol]
                self.evicted += 1
                self._close(protocol, reason)
                return True
        return False

    def accept_exhausted(self, error: OSError, delay: float) -> None:
        """``accept()`` failed for lack of a resource (``error``; accepting pauses ``delay``
        seconds): close the :data:`ACCEPT_EVICTIONS` connections idle longest and log one
        rate-limited WARNING."""
        freed = 0
        while freed < ACCEPT_EVICTIONS and self.evict_idle("out of file descriptors"):
            freed += 1
        name = errno.errorcode.get(error.errno or 0, str(error.errno))
        self._accept_failures.warn(
            "cannot accept connections: %s (%s) with %d connections open; accepting paused "
            "for %g s, %d idle connection(s) closed",
            error.strerror or name,
            name,
            len(self._open) + freed,
            delay,
            freed,
        )
