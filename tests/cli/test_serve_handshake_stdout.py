"""``protocol-py serve --handshake`` with a stdout that cannot take the line: closed, its reader
gone, or a full pipe nobody reads. Each gives one clear line on stderr and exit status 1 (the
full pipe after the bounded wait, serving meanwhile); SIGTERM during the wait is honoured."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol_py.transport.handshake import HANDSHAKE_WRITE_TIMEOUT

from ..support.servers import CONSOLE_SCRIPT
from ._console import cli

PREFIX = "protocol-py serve: cannot write the handshake line: "


def _serve(socket: Path, stdout: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", "--socket", str(socket)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def _error_lines(stderr: str) -> list[str]:
    """Every line that is neither an INFO record nor a per-RPC JSON record."""
    return [
        line for line in stderr.splitlines() if " INFO " not in line and not line.startswith("{")
    ]


@pytest.fixture
def full_pipe() -> Iterator[int]:
    """The write end of a pipe whose buffer is full and whose read end is never read."""
    read_end, write_end = os.pipe()
    flags = fcntl.fcntl(write_end, fcntl.F_GETFL)
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(write_end, fcntl.F_SETFL, flags)
    try:
        yield write_end
    finally:
        os.close(read_end)
        os.close(write_end)


def _wait_serving(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if " serving " in line:
            return seen
    raise AssertionError(f"the server never served: {''.join(seen)}")


def test_closed_stdout_is_one_line_and_exit_1(tmp_path: Path) -> None:
    command = 'exec "$0" serve --handshake --socket "$1" >&-'
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command, str(CONSOLE_SCRIPT), str(tmp_path / "s.sock")],
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert _error_lines(err) == [PREFIX + "stdout is closed"]
    assert "Traceback" not in err and "AttributeError" not in err
    assert not (tmp_path / "s.sock").exists()


def test_a_reader_that_exited_is_one_line_and_exit_1(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _serve(tmp_path / "s.sock", write_end)
    finally:
        os.close(write_end)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert _error_lines(err) == [PREFIX + "the reader of stdout has exited (broken pipe)"]
    assert not (tmp_path / "s.sock").exists()


def test_a_full_pipe_serves_meanwhile_then_is_one_line_and_exit_1(
    tmp_path: Path, full_pipe: int
) -> None:
    socket = tmp_path / "s.sock"
    started = time.monotonic()
    proc = _serve(socket, full_pipe)
    try:
        _wait_serving(proc)
        described = cli("describe", "--server", f"unix:{socket}", timeout=60)
        assert described.returncode == 0, described.stderr  # the loop is not blocked
        assert "reference" in described.stdout
        _, err = proc.communicate(timeout=HANDSHAKE_WRITE_TIMEOUT + 50)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err
    assert time.monotonic() - started >= HANDSHAKE_WRITE_TIMEOUT
    assert _error_lines(err) == [
        PREFIX + "stdout did not take it within 10 s (a full pipe nobody reads)"
    ]
    assert not socket.exists()


def test_sigterm_is_honoured_while_the_line_waits_for_a_full_pipe(
    tmp_path: Path, full_pipe: int
) -> None:
    proc = _serve(tmp_path / "s.sock", full_pipe)
    try:
        _wait_serving(proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=HANDSHAKE_WRITE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert time.monotonic() - sent < HANDSHAKE_WRITE_TIMEOUT  # did not wait for the pipe
    assert "stopping before the handshake line was written" in err
    assert _error_lines(err) == []
