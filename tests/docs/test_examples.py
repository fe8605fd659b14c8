"""The programs in examples/ run against each other: the kernel example against the echo
provider."""

from __future__ import annotations

from pathlib import Path

from ..cli._console import stop_server
from ..support.proc import run_ok
from ..support.servers import CONSOLE_SCRIPT, REPO, spawn_server


def test_kernel_example_runs_against_the_echo_provider_too() -> None:
    sub = spawn_server("--provider", f"{REPO / 'examples' / 'echo_provider.py'}:EchoProvider")
    try:
        done = run_ok(
            [str(Path(CONSOLE_SCRIPT).parent / "python"), "examples/kernel.py", sub.address],
            cwd=REPO,
        )
        lines = done.stdout.splitlines()
        assert "without thinking: chose [0] echo/echo-1" in lines
        assert lines[-1].startswith("stop: END_TURN; cost: ")
    finally:
        stop_server(sub)
