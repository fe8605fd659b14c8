"""Client deadlines of the CLI: ``describe``, ``capabilities`` and ``chat`` give up on a listener
that never answers within ``--timeout`` (chat's first call bounded on its own), and the deadlines
are named, documented constants."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from protocol_py.cli import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, main

from ..support.servers import REPO
from ._console import cli


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener that accepts connections and never sends a byte (no HTTP/2 preface)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("command", ["describe", "capabilities"])
def test_describe_and_capabilities_give_up_on_a_silent_listener_after_timeout(
    command: str, silent_listener: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main([command, "--server", silent_listener, "--timeout", "1"]) == 1
    took = time.monotonic() - started
    err = capsys.readouterr().err
    expected = f"no answer from {silent_listener} within 1s (deadline exceeded)"
    assert err == f"protocol-py {command}: {expected}\n"
    assert took < 20  # generous: the contract is the 1 s deadline, the machine may be loaded


def test_chat_first_call_is_bounded_even_with_a_long_timeout(
    silent_listener: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("protocol_py.cli.chat.CAPABILITIES_TIMEOUT", 1.0)
    started = time.monotonic()
    assert main(["chat", "--server", silent_listener, "--timeout", "300", "hi"]) == 1
    took = time.monotonic() - started
    assert capsys.readouterr().err == (
        f"protocol-py chat: no answer from {silent_listener} within 1s (deadline exceeded)\n"
    )
    assert took < 20


def test_client_deadlines_are_named_documented_constants() -> None:
    assert (DEFAULT_TIMEOUT, CONNECT_TIMEOUT) == (30.0, 10.0)
    for command in ("describe", "capabilities"):
        help_text = cli(command, "--help").stdout
        assert "--timeout SECONDS" in help_text and "(default 30)" in help_text
    readme = (REPO / "docs" / "cli.md").read_text()
    assert "`describe [--server H:P] [--timeout S]`" in readme
    assert "open the connection within 10 s" in readme
