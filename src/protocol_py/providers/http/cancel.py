"""Upstream I/O that a repeated cancellation cannot interrupt half-way.

Why: httpcore closes a connection it was using when the awaiting task is cancelled, inside
``AsyncShieldCancellation`` (an anyio shielded scope). On asyncio that shield does not stop a
*native* ``Task.cancel()``: a second cancellation delivered while httpcore is closing (for
example grpclib's server-side deadline timer and the client's RST_STREAM for the same deadline,
which arrive a few milliseconds apart) interrupts the close, and the connection stays in the
pool, ESTABLISHED, until the client is closed. An explicit client cancel sends one RST_STREAM
only, so it never leaked; a deadline did in about 1 of 7 runs.

The fix is to make sure httpcore's task is cancelled at most once:

* :func:`cancel_once` runs one upstream operation (send, read the next body chunk, read an error
  body, a unary request) in a child task. When the caller is cancelled, the child is cancelled
  exactly once, and the caller waits (up to :data:`CLEANUP_TIMEOUT_S`, further cancellations
  ignored while waiting) for the child's own cleanup before it re-raises CancelledError.
* :func:`shielded` runs a close (``response.aclose()``) to completion even when the caller is
  cancelled, again up to :data:`CLEANUP_TIMEOUT_S`.

A child that outlives the bound (a peer that never lets a socket close) is kept referenced until
it ends, so it is never garbage-collected while running; the caller is not held longer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

__all__ = ["CLEANUP_TIMEOUT_S", "cancel_once", "shielded"]

T = TypeVar("T")

CLEANUP_TIMEOUT_S: Final = 1.0
"""The longest a cancelled caller waits for an upstream operation's cleanup (closing the
connection), in seconds. Closing a socket takes microseconds; the bound only matters when the
event loop is starved."""

_abandoned: set[asyncio.Task[Any]] = set()
"""Children still running after their caller stopped waiting (kept referenced until done)."""


async def _wait_through_cancellation(task: asyncio.Task[Any]) -> bool:
    """Wait for ``task`` to end, at most :data:`CLEANUP_TIMEOUT_S`, ignoring cancellation.

    Returns:
        True when the caller was cancelled (again) while waiting.
    """
    loop = asyncio.get_running_loop()
    until = loop.time() + CLEANUP_TIMEOUT_S
    interrupted = False
    while not task.done():
        left = until - loop.time()
        if left <= 0:
            _abandoned.add(task)
            task.add_done_callback(_forget)
            break
        try:
            await asyncio.wait({task}, timeout=left)
        except asyncio.CancelledError:
            interrupted = True
    return interrupted


def _forget(task: asyncio.Task[Any]) -> None:
    _abandoned.discard(task)
    _discard_result(task)


def _discard_result(task: asyncio.Task[Any]) -> Any:
    """The task's result, or None when it failed or was cancelled (its exception retrieved)."""
    if task.cancelled():
        return None
    if task.exception() is not None:
        return None
    return task.result()


async def cancel_once(
    operation: Awaitable[T],
    *,
    discard: Callable[[T], Awaitable[object]] | None = None,
) -> T:
    """Await ``operation`` in a child task that is cancelled at most once.

    Args:
        operation: The coroutine (e.g. ``client.send(request, stream=True)``).
        discard: Called (shielded) with the result when the operation succeeded but the caller
            was cancelled at the same moment, e.g. ``lambda r: r.aclose()`` for a response.

    Returns:
        The operation's result; its exceptions propagate unchanged.

    Raises:
        asyncio.CancelledError: the caller was cancelled; the child was cancelled once and its
            cleanup has finished (or :data:`CLEANUP_TIMEOUT_S` passed).
    """
    task = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        await _wait_through_cancellation(task)
        if task.done():
            result = _discard_result(task)
            if result is not None and discard is not None:
                with contextlib.suppress(Exception):
                    await shielded(discard(result))
        raise


async def shielded(operation: Awaitable[T]) -> T:
    """Run ``operation`` (a close) to completion even if the caller is cancelled meanwhile.

    Returns:
        Its result.

    Raises:
        asyncio.CancelledError: the caller was cancelled while it ran; raised after the
            operation ended (or :data:`CLEANUP_TIMEOUT_S` passed).
    """
    task = asyncio.ensure_future(operation)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await _wait_through_cancellation(task)
        if task.done():
            _discard_result(task)
        raise
