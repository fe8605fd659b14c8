"""``protocol_py.transport.launch``: a command not on PATH, not executable or overlong raises
LaunchError naming it (bounded); the interpreter-and-module form starts the plugin."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from protocol_py.transport.launch import LaunchError, launch


async def test_launch_of_a_command_not_on_path_raises_launch_error_naming_it() -> None:
    """A raw ``FileNotFoundError`` traceback escaped from ``create_subprocess_exec``."""
    with pytest.raises(LaunchError) as caught:
        async with launch(["protocol-py-not-installed-here", "serve", "--handshake"]):
            pass
    message = str(caught.value)
    assert message.startswith(
        "cannot start the plugin command 'protocol-py-not-installed-here': "
        "ENOENT: No such file or directory (not found on PATH"
    )
    assert "sys.executable, '-m', 'protocol_py.cli'" in message


async def test_launch_of_a_non_executable_file_names_the_os_error() -> None:
    with pytest.raises(LaunchError, match=r"^cannot start the plugin command '/dev/null': EACCES"):
        async with launch(["/dev/null"]):
            pass


async def test_launch_echoes_an_overlong_command_bounded() -> None:
    with pytest.raises(LaunchError) as caught:
        async with launch(["x" * 100_000]):
            pass
    message = str(caught.value)
    print(f"overlong command refused with a {len(message)}-character message")
    assert "(100000 chars, cut)" in message and len(message) < 300


async def test_launch_with_the_interpreter_and_module_path_starts_the_plugin() -> None:
    """The README's alternative to PATH: ``[sys.executable, "-m", "protocol_py.cli", ...]``."""
    argv = [sys.executable, "-m", "protocol_py.cli", "serve", "--handshake"]
    async with launch(argv, stderr=subprocess.DEVNULL) as plugin:
        assert (await plugin.client.describe(timeout=10)).name == "reference"


PLUGIN = [sys.executable, "-m", "protocol_py.cli", "serve", "--handshake"]


async def test_launch_hands_each_stderr_line_to_a_callable_and_logs_an_orderly_close() -> None:
    lines: list[str] = []
    async with launch(PLUGIN, stderr=lines.append) as plugin:
        assert (await plugin.client.describe()).name == "reference"
    assert any("INFO protocol_py.server serving reference on" in line for line in lines)
    assert any("the launching kernel closed the plugin: orderly shutdown" in x for x in lines)
    assert not any("the launching kernel is gone" in x for x in lines)


async def test_launch_sends_stderr_lines_to_a_logger(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("kernel.plugin")
    with caplog.at_level(logging.INFO, logger="kernel.plugin"):
        async with launch(PLUGIN, stderr=logger):
            pass
    records = [r.getMessage() for r in caplog.records if r.name == "kernel.plugin"]
    assert records and all(m.startswith("plugin stderr: ") for m in records)
    assert any("serving reference on" in m for m in records)
