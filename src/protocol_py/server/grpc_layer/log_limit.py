"""Server-wide rate limits of repeated WARNING lines (accept failures, refused connections,
flooding connections), so an attack from many connections at once cannot flood the log.

:class:`RateLimitedWarning` writes at most one line per :data:`WARNING_INTERVAL` seconds for a
kind of event; the next line it writes says how many were suppressed since the last one.
"""

from __future__ import annotations

import logging
import time
from typing import Final

__all__ = ["WARNING_INTERVAL", "RateLimitedWarning"]

WARNING_INTERVAL: Final = 10.0
"""Least time between two WARNING lines of one kind, in seconds (the ones between are counted
and reported with the next line)."""


class RateLimitedWarning:
    """One WARNING per ``interval`` seconds for one kind of event, with a suppressed count.

    Args:
        logger: Where the lines go.
        interval: Least seconds between two lines (default :data:`WARNING_INTERVAL`).
    """

    __slots__ = ("_interval", "_last", "_logger", "suppressed")

    def __init__(self, logger: logging.Logger, interval: float = WARNING_INTERVAL) -> None:
        self._logger = logger
        self._interval = interval
        self._last: float | None = None
        self.suppressed = 0
        """Events not logged since the last line."""

    def warn(self, message: str, *args: object) -> bool:
        """Log ``message % args`` (with ``; N more like this suppressed in the last S s`` when
        some were), or count it when the last line is under ``interval`` seconds old. True
        when a line was written."""
        now = time.monotonic()
        if self._last is not None and now - self._last < self._interval:
            self.suppressed += 1
            return False
        if self.suppressed:
            message += "; %d more like this suppressed in the last %.0f s"
            args = (*args, self.suppressed, now - (self._last or now))
        self._last = now
        self.suppressed = 0
        self._logger.warning(message, *args)
        return True
