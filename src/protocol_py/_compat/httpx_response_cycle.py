"""A closed httpx response no longer sits in a reference cycle with its stream (httpx 0.28).

httpx wraps every streamed response body in a ``BoundAsyncStream`` (``BoundSyncStream`` for
the sync client) that holds the response, so it can set ``response.elapsed`` when the stream
closes; the response holds the stream. The pair, with the request and the request's body
(a vendor body of a megabyte on a long conversation), is therefore freed by the cyclic
garbage collector, not when the last reference goes. The server pauses that collector while
it decodes a large request and freezes what is alive at the end
(``protocol_py.server.offload.GC_QUIET_MIN_BYTES``), so each turn's cycle outlived the turn:
under a steady stream of 601-message turns the server's RSS grew by the vendor body, about
1.1 MB, every turn until a second without large requests let the idle reclaim collect them
(811 MB after 700 turns), and every turn's new heap pages cost about 300 page faults.

:func:`install` makes the stream drop its reference to the response when it closes, after
setting ``elapsed`` exactly as httpx does, so a closed response, its request and the body are
freed by reference counting as soon as their holders let go. The adapters always close their
responses (``providers/http/base.py``). Installed by :func:`protocol_py._compat.install`, only
when httpx still has the shape it was written for (both classes with an ``aclose``/``close``
that reads ``_response``); otherwise nothing changes. Checked on httpx 0.28.1.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from httpx import _client

__all__ = ["install"]


async def bound_async_stream_aclose(self: Any) -> None:
    """``BoundAsyncStream.aclose``: set the response's ``elapsed`` (first close only), drop
    the reference to the response, close the underlying stream."""
    response = self.__dict__.pop("_response", None)
    if response is not None:
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - self._start)
    await self._stream.aclose()


def bound_sync_stream_close(self: Any) -> None:
    """``BoundSyncStream.close``, as :func:`bound_async_stream_aclose`."""
    response = self.__dict__.pop("_response", None)
    if response is not None:
        response.elapsed = datetime.timedelta(seconds=time.perf_counter() - self._start)
    self._stream.close()


def _reads_response(function: Any) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and "_response" in code.co_names and "elapsed" in code.co_names


def install() -> bool:
    """Make httpx's bound response streams drop their response when closed (idempotent).

    Returns:
        True when installed (now or before); False when httpx's shape differs (no
        ``BoundAsyncStream``/``BoundSyncStream``, or a close that no longer sets the response's
        ``elapsed``): then nothing is changed.
    """
    async_cls: Any = getattr(_client, "BoundAsyncStream", None)
    sync_cls: Any = getattr(_client, "BoundSyncStream", None)
    if async_cls is None or sync_cls is None:
        return False
    async_close = async_cls.__dict__.get("aclose")
    sync_close = sync_cls.__dict__.get("close")
    if async_close is bound_async_stream_aclose and sync_close is bound_sync_stream_close:
        return True
    if not (_reads_response(async_close) and _reads_response(sync_close)):
        return False
    async_cls.aclose = bound_async_stream_aclose
    sync_cls.close = bound_sync_stream_close
    return True
