"""Client TLS options of the CLI: ``--tls-cert`` without ``--tls-key`` is its own usage error, and
``--timeout`` bounds the TLS handshake with a listener that never answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol_py.cli import CONNECT_TIMEOUT, main

from ..support.security import CA, run_cli


@pytest.mark.parametrize("command", ["describe", "capabilities", "chat"])
def test_tls_cert_without_key_is_named_alone_without_the_address_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    ca = CA(tmp_path)
    client = ca.issue("client", client=True)
    extra = ["hello"] if command == "chat" else []
    argv = [command, "--server", "127.0.0.1:9", "--tls-ca", str(ca.cert)]
    assert main([*argv, "--tls-cert", str(client.cert), *extra]) == 2
    assert capsys.readouterr().err == (
        f"protocol-py {command}: --tls-cert and --tls-key must be given together\n"
    )


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP listener on 127.0.0.1 that accepts (the kernel's backlog) but never answers, not
    even the TLS ServerHello."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("command", ["describe", "capabilities", "chat"])
def test_timeout_bounds_the_tls_connect_to_a_silent_listener(
    tmp_path: Path, silent_listener: str, command: str
) -> None:
    ca = CA(tmp_path)
    extra = ["hello"] if command == "chat" else []
    started = time.monotonic()
    done = run_cli(
        command, "--server", silent_listener, "--timeout", "1", "--tls-ca", str(ca.cert), *extra
    )
    elapsed = time.monotonic() - started
    print(f"{command}: failed after {elapsed:.2f}s (--timeout 1, CONNECT_TIMEOUT 10)")
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"protocol-py {command}: cannot connect to {silent_listener}: TLS handshake not "
        "completed within 1s\n"
    )
    assert elapsed < CONNECT_TIMEOUT  # interpreter start-up included
