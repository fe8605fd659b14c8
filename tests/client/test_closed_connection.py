"""A connection the server closes at once is a lost connection, never an internal error."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.exceptions import StreamTerminatedError

from protocol_py.client.client import ModelClient


@pytest.fixture
def closing_listener(tmp_path: Path) -> Iterator[str]:
    """A unix socket whose listener accepts every connection and closes it at once."""
    path = str(tmp_path / "closing.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(64)
    server.settimeout(0.2)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join(2)
        server.close()


def test_calls_on_a_connection_closed_at_once_fail_as_lost_connections(
    closing_listener: str,
) -> None:
    async def calls() -> list[str]:
        seen = []
        for _ in range(20):
            client = ModelClient.connect(f"unix:{closing_listener}")
            try:
                await client.describe(timeout=3)
            except (StreamTerminatedError, OSError) as exc:
                seen.append(type(exc).__name__)
            finally:
                client.close()
        return seen

    seen = asyncio.run(calls())
    assert len(seen) == 20
    assert set(seen) <= {"StreamTerminatedError", "ConnectionResetError", "BrokenPipeError"}


def test_describe_on_a_connection_closed_at_once_reports_a_lost_connection(
    closing_listener: str,
) -> None:
    for _ in range(3):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "protocol_py.cli",
                "describe",
                "--server",
                f"unix:{closing_listener}",
                "--timeout",
                "5",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == 1
        assert "internal error" not in run.stderr
        assert f"unix:{closing_listener}" in run.stderr
