"""Fixed-window bounds on repeated log lines (refused TLS handshakes, per-RPC records of failed
calls): at most ``burst`` lines per ``interval`` seconds, the window starting at its first line;
the lines past the bound are counted by the caller, and when the window ends the caller's
summary is written once (from a loop timer, or before the next line when no loop runs)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

__all__ = ["LogWindow"]


class LogWindow:
    """One fixed window of at most ``burst`` lines per ``interval`` seconds.

    Args:
        burst: Lines admitted per window.
        interval: The window, seconds.
        summary: Writes the summary of the lines counted in the window (called when the window
            ends and by :meth:`flush`; it decides whether anything was counted).
        clock: Monotonic time, seconds (tests pass their own).
    """

    __slots__ = ("_admitted", "_clock", "_start", "_summary", "_timer", "burst", "interval")

    def __init__(
        self,
        burst: int,
        interval: float,
        summary: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.interval = interval
        self._summary = summary
        self._clock = clock
        self._start: float | None = None
        self._admitted = 0
        self._timer: asyncio.TimerHandle | None = None

    def admit(self) -> bool:
        """True when one more line fits in the current window (a new window starts, after the
        last one's summary, when it has ended); False when the caller should count it instead,
        a timer then writing the summary when the window ends."""
        now = self._clock()
        if self._start is None or now - self._start >= self.interval:
            self.flush()
            self._start = now
            self._admitted = 0
        if self._admitted < self.burst:
            self._admitted += 1
            return True
        if self._timer is None:
            with contextlib.suppress(RuntimeError):  # no running loop: summed up on the next
                remaining = max(0.0, self._start + self.interval - now)
                self._timer = asyncio.get_running_loop().call_later(remaining, self._expired)
        return False

    def _expired(self) -> None:
        self._timer = None
        self._summary()
        self._start = None

    def flush(self) -> None:
        """Write the summary now (cancelling the window's timer)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._summary()
