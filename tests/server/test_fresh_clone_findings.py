"""What a new user found trying the integration branch from a fresh clone with the README only
(round nu3): each test pins one fixed behaviour."""

from __future__ import annotations

import subprocess
import sys

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.client import ModelClient
from protocol_py.errors import InvalidValueError
from protocol_py.launch import LaunchError, launch
from protocol_py_gen.model.v1 import ErrorKind, RenderRequest

from .conftest import Running, make_request


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


async def test_client_error_contract_as_the_readme_states_it(running: Running) -> None:
    """README "Client": in-band errors return, a deadline raises TimeoutError, refused unary
    calls raise GRPCError, a wrong request type raises InvalidValueError."""
    async with ModelClient.connect(running.address) as client:
        done = await client.complete(make_request(model="no-such-model"), timeout=30)
        assert done.stop is None and done.error is not None
        assert done.error.kind == ErrorKind.INVALID_REQUEST
        with pytest.raises(GRPCError) as refused:
            await client.configure({"nope": 1}, timeout=30)
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(GRPCError) as refused:
            await client.render(RenderRequest(payload_type="reference.nope", payload=b"{}"))
        assert refused.value.status == Status.INVALID_ARGUMENT
        with pytest.raises(InvalidValueError, match="expected a StreamCompletionRequest"):
            await client.complete("not a request", timeout=30)  # type: ignore[arg-type]
        await client.configure({"pace_tokens_per_second": 5}, timeout=30)
        with pytest.raises(TimeoutError):
            await client.complete(make_request(), timeout=0.3)
        assert (await client.describe(timeout=30)).name == "reference"  # still serving
