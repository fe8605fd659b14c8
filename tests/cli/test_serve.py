"""``protocol-py serve``: two quick SIGTERMs exit 0; ``--discover`` against an unreachable upstream
is a plain message."""

from __future__ import annotations

import signal
import time

import pytest

from ..support.servers import spawn_server
from ._console import cli


@pytest.mark.parametrize("gap", [0.0, 0.005, 0.02, 0.04])
def test_two_quick_sigterms_exit_0(gap: float) -> None:
    sub = spawn_server()
    sub.proc.send_signal(signal.SIGTERM)
    time.sleep(gap)
    if sub.proc.poll() is None:
        sub.proc.send_signal(signal.SIGTERM)
    _, err = sub.proc.communicate(timeout=30)
    assert sub.proc.returncode == 0, err
    assert "stopped" in err


def test_discover_against_an_unreachable_upstream_is_a_plain_message() -> None:
    done = cli(
        "serve", "--provider", "openai", "--discover", "--base-url",
        "http://127.0.0.1:9/v1?key=SECRETQ", "--port", "0",
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.splitlines()[-1]
    assert last == (
        "protocol-py serve: model discovery: cannot reach upstream "
        "GET http://127.0.0.1:9/v1/models: connection refused"
    )
    assert "internal error" not in done.stderr and "RuntimeError" not in done.stderr
    assert "SECRETQ" not in done.stderr
