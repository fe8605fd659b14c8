"""A listening socket out of file descriptors pauses accepting with a growing delay, quietly.

asyncio's selector loop (``BaseSelectorEventLoop._accept_connection``, CPython 3.11 to 3.13)
handles ``accept()`` failing with EMFILE, ENFILE, ENOBUFS or ENOMEM by reporting it to the
loop's exception handler (a six-line ``socket.accept() out of system resource`` traceback),
removing the reader and scheduling a restart 1 s later, but then keeps looping: up to
``backlog`` (100) failures, tracebacks and restarts per readable event
(https://github.com/python/cpython/issues/151615). A server at its descriptor limit logged
tens of thousands of tracebacks a second.

For a listening socket registered with :func:`guard` (the reference server's), :func:`install`
makes the accept loop take at most :data:`ACCEPTS_PER_TURN` connections per turn, stop at the
first such failure, pause accepting for
:data:`ACCEPT_BACKOFF_INITIAL` seconds, doubling on each failure in a row up to
:data:`ACCEPT_BACKOFF_MAX`, back to the initial delay after an accept succeeds, and call the
socket's ``on_exhausted(error, delay)`` instead of the exception handler (the server logs one
rate-limited WARNING and closes an idle connection). A paused socket that was closed
meanwhile is not resumed. Every other socket keeps asyncio's behaviour.

Installed by :func:`protocol_py._compat.install` only when the method still has the signature
it was written for; checked on CPython 3.11.
"""

from __future__ import annotations

import errno
import inspect
from asyncio import selector_events
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "ACCEPTS_PER_TURN",
    "ACCEPT_BACKOFF_INITIAL",
    "ACCEPT_BACKOFF_MAX",
    "RESOURCE_ERRNOS",
    "guard",
    "install",
    "unguard",
]

ACCEPT_BACKOFF_INITIAL: Final = 0.05
"""First pause of accepting after ``accept()`` ran out of a resource, in seconds."""

ACCEPT_BACKOFF_MAX: Final = 1.0
"""Longest pause of accepting (the delay doubles per failure in a row up to this), seconds."""

ACCEPTS_PER_TURN: Final = 16
"""Most connections a guarded listening socket accepts per event loop turn (asyncio's
``backlog``, 100, otherwise): accepted sockets hold descriptors before the server counts
them, so fewer at once keep the connection limit ahead of the descriptor limit; the rest wait
in the kernel's queue for the next turn."""

RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""``accept()`` errors that mean the process or system is out of a resource."""

_EXPECTED_PARAMETERS: Final = (
    "self",
    "protocol_factory",
    "sock",
    "sslcontext",
    "server",
    "backlog",
    "ssl_handshake_timeout",
    "ssl_shutdown_timeout",
)


@dataclass(slots=True)
class _Guard:
    on_exhausted: Callable[[OSError, float], None]
    delay: float = ACCEPT_BACKOFF_INITIAL


_guarded: dict[int, _Guard] = {}
"""Listening socket descriptor -> its back-off state."""


def guard(fd: int, on_exhausted: Callable[[OSError, float], None]) -> None:
    """Give the listening socket ``fd`` the back-off of this module; ``on_exhausted(error,
    delay)`` is called (on the loop) for each failure, ``delay`` being the pause in seconds."""
    _guarded[fd] = _Guard(on_exhausted)


def unguard(fd: int) -> None:
    """Forget ``fd`` (its server closed); a no-op for an unknown one."""
    _guarded.pop(fd, None)


def install() -> bool:
    """Patch ``asyncio.selector_events.BaseSelectorEventLoop._accept_connection``
    (idempotent); True when installed."""
    loop_class = selector_events.BaseSelectorEventLoop
    original = getattr(loop_class, "_accept_connection", None)
    if original is None:
        return False
    if getattr(original, "_protocol_py_backoff", False):
        return True
    try:
        parameters = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return False
    if parameters != _EXPECTED_PARAMETERS or not hasattr(loop_class, "_accept_connection2"):
        return False

    def _accept_connection(  # noqa: PLR0917 - asyncio's positional signature
        self: Any,
        protocol_factory: Any,
        sock: Any,
        sslcontext: Any = None,
        server: Any = None,
        backlog: int = 100,
        ssl_handshake_timeout: Any = None,
        ssl_shutdown_timeout: Any = None,
    ) -> None:
        arguments = (
            protocol_factory,
            sock,
            sslcontext,
            server,
            backlog,
            ssl_handshake_timeout,
            ssl_shutdown_timeout,
        )
        state = _guarded.get(sock.fileno())
        if state is None:
            return original(self, *arguments)  # type: ignore[no-any-return]
        for _ in range(min(backlog, ACCEPTS_PER_TURN)):
            try:
                conn, addr = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return None
            except OSError as exc:
                if exc.errno not in RESOURCE_ERRNOS:
                    raise  # the loop logs it, as asyncio does
                delay = state.delay
                state.delay = min(ACCEPT_BACKOFF_MAX, delay * 2)
                self._remove_reader(sock.fileno())
                self.call_later(delay, _resume, self, arguments)
                state.on_exhausted(exc, delay)
                return None
            state.delay = ACCEPT_BACKOFF_INITIAL
            self.create_task(
                self._accept_connection2(
                    protocol_factory,
                    conn,
                    {"peername": addr},
                    sslcontext,
                    server,
                    ssl_handshake_timeout,
                    ssl_shutdown_timeout,
                )
            )
        return None

    _accept_connection._protocol_py_backoff = True  # type: ignore[attr-defined]
    setattr(loop_class, "_accept_connection", _accept_connection)  # noqa: B010
    return True


def _resume(loop: Any, arguments: tuple[Any, ...]) -> None:
    """Accept again after a pause, unless the socket or its server was closed meanwhile."""
    sock, server = arguments[1], arguments[3]
    if sock.fileno() < 0 or sock.fileno() not in _guarded:
        return
    if server is not None and not server.is_serving():
        return
    loop._start_serving(*arguments)
