"""LogWriter: log lines queued for a writer thread, so a stream nobody reads never blocks the
caller; past the bounded queue lines are dropped, counted and reported once the stream takes
lines again (docs/decisions.md#d42)."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from protocol_py.server.log_writer import FLUSH_TIMEOUT, LogWriter


def _record(message: str, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("protocol_py.server", level, __file__, 1, message, None, None)


@pytest.fixture
def pipe() -> Iterator[tuple[int, io.TextIOWrapper]]:
    """(read descriptor, a text stream on the write end)."""
    read_fd, write_fd = os.pipe()
    stream = os.fdopen(write_fd, "w")
    try:
        yield read_fd, stream
    finally:
        os.close(read_fd)
        stream.close()


def _drain(fd: int) -> bytes:
    """Everything the pipe holds now (the descriptor made non-blocking)."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    chunks = []
    try:
        while True:
            chunks.append(os.read(fd, 1 << 16))
    except BlockingIOError:
        pass
    finally:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags)
    return b"".join(chunks)


def _emit_in_thread(writer: LogWriter, lines: list[str]) -> None:
    """Emit ``lines``; fails (instead of hanging) when an emit blocks."""
    done = threading.Thread(target=lambda: [writer.handle(_record(line)) for line in lines])
    done.start()
    done.join(10)
    assert not done.is_alive(), "emit blocked on a stream nobody reads"


def _settle(writer: LogWriter) -> None:
    """Wait until the thread has taken what it can from the queue."""
    for _ in range(200):
        if writer.queued == (0, 0):
            return
        time.sleep(0.01)


def test_lines_reach_the_stream_in_order() -> None:
    stream = io.StringIO()
    writer = LogWriter(stream)
    try:
        for i in range(500):
            writer.handle(_record(f"line {i}"))
        writer.flush()
    finally:
        writer.close()
    assert stream.getvalue().splitlines() == [f"line {i}" for i in range(500)]


def test_an_unread_pipe_never_blocks_and_drops_are_counted_then_reported(
    pipe: tuple[int, io.TextIOWrapper],
) -> None:
    read_fd, stream = pipe
    writer = LogWriter(stream, max_lines=100, max_bytes=1 << 20)
    try:
        payload = "x" * 200
        lines = [f"{i:05d} {payload}" for i in range(2_000)]  # ~400 KB: far past the pipe
        _emit_in_thread(writer, lines)
        assert writer.dropped_total > 0
        # the reader comes back: what the pipe and the queue held arrives, then the drop notice
        # before the next line
        received = b""
        for _ in range(200):
            received += _drain(read_fd)
            if writer.queued == (0, 0):
                break
            time.sleep(0.01)
        writer.handle(_record("after"))
        writer.flush()
        received += _drain(read_fd)
    finally:
        writer.close()
    out = received.decode().splitlines()
    kept = [line for line in out if line[:5].isdigit()]
    notices = [line for line in out if line.startswith("dropped ")]
    assert kept == sorted(kept) and kept[0] == lines[0]
    assert len(kept) + writer.dropped_total == len(lines)
    # each notice counts the lines dropped since the one before; together, every drop
    assert sum(int(line.split()[1]) for line in notices) == writer.dropped_total
    assert notices[-1].endswith(
        "log lines: stderr did not take them (at most 100 lines, 1048576 bytes wait)"
    )
    assert out[-1] == "after" and writer.dropped == 0


def test_the_queue_holds_at_most_its_bytes(pipe: tuple[int, io.TextIOWrapper]) -> None:
    read_fd, stream = pipe
    writer = LogWriter(stream, max_lines=10_000, max_bytes=4096)
    try:
        _emit_in_thread(writer, ["y" * 1000] * 400)
        _settle(writer)
        lines, size = writer.queued
        assert size <= 4096 and lines <= 4
        # counted over the whole run: ``dropped`` restarts once a notice of them is queued
        assert writer.dropped_total > 0
    finally:
        _drain(read_fd)
        writer.close()


def test_a_reader_that_has_exited_drops_lines_without_raising() -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    stream = os.fdopen(write_fd, "w")
    writer = LogWriter(stream)
    try:
        writer.handle(_record("to nobody"))
        writer.flush()
        writer.handle(_record("still nobody"))
        assert writer.dropped_total == 2
    finally:
        writer.close()
        stream.close()


def test_close_gives_up_on_a_stream_that_never_takes_the_queue(
    pipe: tuple[int, io.TextIOWrapper],
) -> None:
    read_fd, stream = pipe
    writer = LogWriter(stream)
    _emit_in_thread(writer, ["z" * 500] * 500)  # 250 KB: the pipe is full, the rest queued
    assert writer.queued[0] > 0
    started = time.monotonic()
    writer.close()
    waited = time.monotonic() - started
    assert waited < FLUSH_TIMEOUT + 1.0
    writer.handle(_record("after close"))
    assert writer.dropped > 0
    # the thread still writes what was queued as the pipe drains: let it finish here, or it
    # outlives this pipe and writes into whatever the next test opens under the same number
    for _ in range(1000):
        _drain(read_fd)
        if not writer._thread.is_alive():
            break
        time.sleep(0.01)
    assert not writer._thread.is_alive()


def test_a_non_blocking_descriptor_waits_instead_of_losing_lines(
    pipe: tuple[int, io.TextIOWrapper],
) -> None:
    read_fd, stream = pipe
    flags = fcntl.fcntl(stream.fileno(), fcntl.F_GETFL)
    fcntl.fcntl(stream.fileno(), fcntl.F_SETFL, flags | os.O_NONBLOCK)
    writer = LogWriter(stream)
    lines = [f"{i:06d} " + "w" * 300 for i in range(1_000)]  # 300 KB: past the pipe's 64 KiB
    received = b""
    try:
        _emit_in_thread(writer, lines)
        for _ in range(500):
            received += _drain(read_fd)
            if writer.queued == (0, 0) and received.count(b"\n") >= len(lines):
                break
            time.sleep(0.01)
    finally:
        writer.close()
    assert received.decode().splitlines() == lines
    assert writer.dropped_total == 0


def test_no_stderr_at_all_drops_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)  # descriptor 2 was closed at start-up
    writer = LogWriter()
    try:
        writer.handle(_record("nowhere"))
        writer.handle(_record("still nowhere"))
        assert writer.dropped_total == 2
    finally:
        writer.close()
