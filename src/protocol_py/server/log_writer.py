"""Log lines written to stderr by a thread of their own, through a bounded queue.

A log call on the event loop must never wait for its reader: a stderr pipe that nobody drains
(a supervisor that stopped reading, a kernel that only reads stdout) fills after 64 KiB on
Linux, and a blocking write would then hold the loop, so nothing is served and SIGTERM is never
handled. :class:`LogWriter` formats each record where it is logged (bounded work: every line of
this package is bounded, docs/decisions.md#d41), queues the line and returns; one daemon thread
writes the queue to the stream. While the stream does not take lines, the queue holds at most
:data:`MAX_QUEUED_LINES` lines and :data:`MAX_QUEUED_BYTES` bytes; lines past that are dropped
and counted, and the next line that fits is preceded by one WARNING giving the count
(docs/decisions.md#d42). At exit (:func:`logging.shutdown`) the queue is written out for at
most :data:`FLUSH_TIMEOUT` seconds, so a stream that is never read cannot keep the process
alive.

The thread writes to the stream's file descriptor with :func:`os.write` when it has one (never
through ``sys.stderr``'s buffer, whose lock a blocked thread would hold at interpreter exit), and
to the stream's ``write`` otherwise (a :class:`io.StringIO`). A stream that fails (a reader
that has exited: ``EPIPE``) is given up: later lines are dropped and counted, nothing raised.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import select
import sys
import threading
import time
from typing import Final, TextIO

__all__ = ["FLUSH_TIMEOUT", "MAX_QUEUED_BYTES", "MAX_QUEUED_LINES", "LogWriter"]

MAX_QUEUED_LINES: Final = 10_000
"""Most lines waiting for the stream; past it a line is dropped and counted."""

MAX_QUEUED_BYTES: Final = 8 * 1024 * 1024
"""Most bytes (UTF-8) waiting for the stream (8 MiB); past it a line is dropped and counted."""

FLUSH_TIMEOUT: Final = 2.0
"""Seconds :meth:`LogWriter.close` waits for the queue to be written out (at exit)."""

_BATCH_BYTES: Final = 64 * 1024
"""Most bytes joined into one write by the thread."""


class LogWriter(logging.Handler):
    """A :class:`logging.Handler` that queues formatted lines for a writer thread.

    Args:
        stream: Where the lines go (``sys.stderr`` by default); written from the thread.
        max_lines: Most lines queued (:data:`MAX_QUEUED_LINES`).
        max_bytes: Most bytes queued (:data:`MAX_QUEUED_BYTES`).

    ``dropped`` counts the lines dropped since the last drop WARNING was queued (the queue
    full, or the stream given up); ``dropped_total`` all of them.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        max_lines: int = MAX_QUEUED_LINES,
        max_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        super().__init__()
        self.stream: TextIO | None = stream if stream is not None else sys.stderr
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.dropped = 0
        self.dropped_total = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._ready = threading.Condition(threading.Lock())
        self._busy = False
        self._closed = False
        self._failed = self.stream is None
        self._flush_timed_out = False
        self._fd = None if self.stream is None else _fileno(self.stream)
        self._thread = threading.Thread(target=self._run, name="protocol-py-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        """Format ``record`` and queue its line; drop and count it when the queue is full or
        the stream was given up. Never blocks on the stream."""
        try:
            line = (self.format(record) + "\n").encode("utf-8", "backslashreplace")
        except Exception:
            self.handleError(record)
            return
        with self._ready:
            if self._failed or self._closed:
                self._count_drop()
                return
            if self.dropped:
                notice = self._drop_notice()
                if self._fits(len(notice) + len(line)):
                    self._put(notice)
                    self.dropped = 0
            if self.dropped or not self._fits(len(line)):
                self._count_drop()
                return
            self._put(line)
            self._ready.notify()

    def flush(self) -> None:
        """Wait up to :data:`FLUSH_TIMEOUT` seconds for the queued lines to be written (not
        at all once a wait has timed out and the stream has taken nothing since)."""
        deadline = time.monotonic() + FLUSH_TIMEOUT
        with self._ready:
            while (self._queue or self._busy) and not self._failed and not self._flush_timed_out:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._flush_timed_out = True
                    return
                self._ready.wait(left)

    def close(self) -> None:
        """Write out the queue (at most :data:`FLUSH_TIMEOUT` seconds), then stop the thread.
        Lines logged afterwards are dropped and counted."""
        self.flush()
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        super().close()

    @property
    def queued(self) -> tuple[int, int]:
        """(lines, bytes) waiting for the stream."""
        with self._ready:
            return len(self._queue), self._queued_bytes

    def _fits(self, size: int) -> bool:
        return len(self._queue) < self.max_lines and self._queued_bytes + size <= self.max_bytes

    def _put(self, line: bytes) -> None:
        self._queue.append(line)
        self._queued_bytes += len(line)

    def _count_drop(self) -> None:
        self.dropped += 1
        self.dropped_total += 1

    def _drop_notice(self) -> bytes:
        record = logging.LogRecord(
            "protocol_py.server",
            logging.WARNING,
            __file__,
            0,
            "dropped %d log lines: stderr did not take them (at most %d lines, %d bytes wait)",
            (self.dropped, self.max_lines, self.max_bytes),
            None,
        )
        return (self.format(record) + "\n").encode("utf-8", "backslashreplace")

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closed:
                    self._ready.wait()
                if not self._queue:
                    return
                batch = [self._queue.popleft()]
                size = len(batch[0])
                while self._queue and size + len(self._queue[0]) <= _BATCH_BYTES:
                    line = self._queue.popleft()
                    batch.append(line)
                    size += len(line)
                self._queued_bytes -= size
                self._busy = True
            ok = self._write(b"".join(batch))
            with self._ready:
                self._busy = False
                self._flush_timed_out = False
                if not ok:
                    self._failed = True
                    lost = len(self._queue) + len(batch)
                    self.dropped += lost
                    self.dropped_total += lost
                    self._queue.clear()
                    self._queued_bytes = 0
                self._ready.notify_all()
                if not ok:
                    return

    def _write(self, data: bytes) -> bool:
        """Write ``data`` whole; False when the stream fails (it is then given up)."""
        try:
            if self._fd is None:
                assert self.stream is not None
                self.stream.write(data.decode("utf-8"))
                self.stream.flush()
                return True
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._fd, view)
                except BlockingIOError:  # a non-blocking descriptor: wait until writable
                    select.select([], [self._fd], [], 1.0)
                    continue
                view = view[written:]
            return True
        except (OSError, ValueError):
            return False


def _fileno(stream: TextIO) -> int | None:
    """The stream's file descriptor, its Python buffer flushed first; None when it has none."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    with contextlib.suppress(OSError, ValueError):
        stream.flush()
    return fd
