"""asyncio's accept loop on a guarded listening socket stops at the first EMFILE, pauses with a
growing delay and reports to the socket's callback, not to the loop's exception handler
(:mod:`protocol_py._compat.asyncio_accept_backoff`)."""

from __future__ import annotations

import errno
from asyncio import selector_events
from typing import Any

import pytest

from protocol_py._compat import asyncio_accept_backoff as backoff


class _Listener:
    def __init__(self, fd: int, error: int = errno.EMFILE) -> None:
        self.fd = fd
        self.error = error
        self.accepts = 0

    def fileno(self) -> int:
        return self.fd

    def accept(self) -> Any:
        self.accepts += 1
        raise OSError(self.error, "Too many open files")


class _Loop:
    """The loop methods the accept loop calls, recorded."""

    def __init__(self) -> None:
        self.removed: list[int] = []
        self.later: list[float] = []
        self.handled: list[dict[str, Any]] = []

    def _remove_reader(self, fd: int) -> None:
        self.removed.append(fd)

    def call_later(self, delay: float, *_: Any) -> None:
        self.later.append(delay)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.handled.append(context)

    def _start_serving(self, *_: Any) -> None:
        raise AssertionError("only scheduled")

    def create_task(self, _coro: Any) -> None:
        raise AssertionError("nothing was accepted")


@pytest.fixture
def accept() -> Any:
    assert backoff.install()
    return selector_events.BaseSelectorEventLoop._accept_connection  # type: ignore[attr-defined]


def test_a_guarded_socket_stops_at_the_first_failure_and_backs_off(accept: Any) -> None:
    reports: list[tuple[int, float]] = []
    listener, loop = _Listener(10_001), _Loop()
    backoff.guard(listener.fd, lambda exc, delay: reports.append((exc.errno or 0, delay)))
    try:
        for _ in range(7):
            accept(loop, object, listener, None, None, 100)
    finally:
        backoff.unguard(listener.fd)
    assert listener.accepts == 7  # one per readable event, not 100
    assert loop.handled == []  # no traceback through the exception handler
    assert loop.later == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert reports == [(errno.EMFILE, delay) for delay in loop.later]
    assert loop.removed == [listener.fd] * 7


def test_an_unguarded_socket_keeps_asyncio_behaviour(accept: Any) -> None:
    listener, loop = _Listener(10_002), _Loop()
    accept(loop, object, listener, None, None, 5)
    assert listener.accepts == 5  # asyncio's loop (https://github.com/python/cpython/issues/151615)
    assert len(loop.handled) == 5
    assert loop.handled[0]["message"] == "socket.accept() out of system resource"


def test_other_accept_errors_still_propagate(accept: Any) -> None:
    listener, loop = _Listener(10_003, errno.EINVAL), _Loop()
    backoff.guard(listener.fd, lambda exc, delay: None)
    try:
        with pytest.raises(OSError) as raised:
            accept(loop, object, listener, None, None, 100)
    finally:
        backoff.unguard(listener.fd)
    assert raised.value.errno == errno.EINVAL and loop.later == []
