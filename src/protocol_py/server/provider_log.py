"""What the server logs about a misbehaving provider: exceptions as one capped text line, and
events yielded after the final event.

With the ``serve`` log format every non-JSON line is ``<date> <LEVEL> <logger> <message>``, so
a provider exception is logged as one ERROR line naming the exception type and where it was
raised (file, line, function), never its value (``KeyError: 'secret'`` could hold a secret);
the full traceback is logged at DEBUG only. An in-band error's message goes into the per-RPC
record's ``detail`` capped by :func:`capped`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import AsyncIterator
from typing import Final

log = logging.getLogger("protocol_py.server")

MAX_SUMMARY_CHARS: Final = 300
"""Longest exception summary or in-band error ``detail`` logged, characters (longer text is
cut and ends with ``...``)."""

FINAL_EVENT_PROBE: Final = 0.02
"""How long the server waits, after sending a provider's final event (``stop`` or ``error``),
for the provider's generator to yield again (a WARNING) or end, seconds; a provider still
awaiting then is closed as before. It delays the end of such a stream by at most this."""


def capped(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """``text`` on one line (line breaks as spaces), at most ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def exception_summary(exc: BaseException) -> str:
    """``KeyError at provider.py:42 in stream``: the exception type and the innermost frame,
    without the exception's value; at most :data:`MAX_SUMMARY_CHARS` characters."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {os.path.basename(last.filename)}:{last.lineno} in {last.name}"
    return capped(f"{type(exc).__name__}{where}")


def log_provider_exception(provider: str, action: str, exc: BaseException) -> None:
    """One ERROR line ``provider NAME: ACTION raised TYPE at FILE:LINE in FUNC`` and the full
    traceback at DEBUG."""
    log.error("provider %s: %s raised %s", provider, action, exception_summary(exc))
    log.debug("provider %s: %s traceback", provider, action, exc_info=exc)


def log_server_exception(what: str, exc: BaseException) -> None:
    """A server bug while serving ``what`` (an RPC name): one ERROR line ``WHAT failed: TYPE at
    FILE:LINE in FUNC`` and the full traceback at DEBUG (no traceback at the default INFO)."""
    log.error("%s failed: %s", what, exception_summary(exc))
    log.debug("%s traceback", what, exc_info=exc)


async def warn_if_more_events(upstream: object, provider: str) -> None:
    """After the final event: if ``upstream`` (the provider's async iterator) yields again
    within :data:`FINAL_EVENT_PROBE` seconds, log one WARNING naming the provider. The extra
    events are dropped (the client's stream already ended with the final event); exceptions
    the provider raises meanwhile are ignored (logged at DEBUG)."""
    if not isinstance(upstream, AsyncIterator):
        return
    try:
        async with asyncio.timeout(FINAL_EVENT_PROBE):
            await anext(upstream)
    except (StopAsyncIteration, TimeoutError):
        return
    except Exception as exc:  # the stream is over for the client; keep the log to one line
        log.debug("provider %s raised after its final event: %s", provider, type(exc).__name__)
        return
    log.warning(
        "provider %s yielded an event after its final event (stop or error); it was dropped "
        "and the provider's stream closed",
        provider,
    )
