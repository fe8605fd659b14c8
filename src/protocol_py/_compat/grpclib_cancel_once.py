"""A call's cancellation is delivered once by grpclib, and its first cause stands (grpclib 0.4).

grpclib ends a call from outside its handler through the call's cancellation wrapper
(``grpclib.utils.Wrapper.cancel``): at its deadline (``DeadlineWrapper``), when the peer resets
the stream, when the connection is lost. Each of these cancelled the handler's task again and
replaced the error the call ended with. A deadline is usually followed within milliseconds by
the client's own reset of the stream, and a client's cancel by its connection closing, so a
provider's ``finally`` that awaited the close of its upstream connection was cut within about a
millisecond of the first cancellation (a provider that re-raised as asked included), and the
call's recorded cause became the later "stream reset" instead of the deadline.

:func:`install` makes ``Wrapper.cancel`` of an already cancelled wrapper do nothing: the tasks
were cancelled once, and the first error stays the call's. A handler that caught that one
cancellation and went on is cancelled again by the server's own sweep
(:mod:`protocol_py.server.lifecycle`, docs/decisions.md#d46), no sooner than a second later.
grpclib's own code never catches a cancellation, so a second delivery changed nothing else.

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when grpclib still has the shape it was written for (``Wrapper.cancel(self, error)``
setting ``_error`` and ``cancelled`` and cancelling the tasks of ``_tasks``); otherwise nothing
changes. Checked on grpclib 0.4.9 (the pinned range is ``>=0.4.9,<0.5``).
"""

from __future__ import annotations

import inspect
from typing import Any

import grpclib.utils as _utils

__all__ = ["delivered_to", "install"]

_MARK = "_protocol_py_cancel_once"
_DELIVERED = "_protocol_py_delivered_to"


def delivered_to(wrapper: Any, task: Any) -> bool:
    """Whether ``wrapper``'s cancellation (installed :func:`install`) cancelled ``task``: the
    task was inside the wrapper when it was cancelled. False before any cancellation, and for
    a task that was outside it (a handler that had returned and was sending its trailers)."""
    delivered: frozenset[Any] = getattr(wrapper, _DELIVERED, frozenset())
    return task in delivered


def install() -> bool:
    """Make grpclib's cancellation wrapper deliver a call's cancellation once (idempotent).

    Returns:
        True when installed (now or before); False when grpclib's shape differs (then nothing
        is changed).
    """
    wrapper: Any = getattr(_utils, "Wrapper", None)
    original = getattr(wrapper, "cancel", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    try:
        source = inspect.getsource(original)
        parameters = list(inspect.signature(original).parameters)
    except (OSError, TypeError, ValueError):
        return False
    if parameters != ["self", "error"] or not all(
        name in source for name in ("self._error = error", "self._tasks", "self.cancelled = True")
    ):
        return False

    def cancel(self: Any, error: Exception) -> None:
        if self.cancelled:  # delivered already: its tasks were cancelled, its error stands
            return
        # the tasks inside the wrapper now (a handler sending its trailers after returning is
        # not): the ones this cancellation reaches
        setattr(self, _DELIVERED, frozenset(self._tasks))
        original(self, error)

    setattr(cancel, _MARK, True)
    cancel.__doc__ = original.__doc__
    wrapper.cancel = cancel
    return True
