"""Kernels and plugins of the previous release (1.1.0, the wheel in testdata/release-1.1.0/)
keep working with this one in both directions: this release's ``launch()`` starts a 1.1.0
``protocol-py serve --handshake`` and uses it; 1.1.0's ``launch()`` starts this release's and
uses it. Both with automatic mutual TLS (the default) and in plaintext, on the private unix
socket, which is removed afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from protocol_py.transport.launch import launch
from protocol_py.version import PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

from ..support.proc import run_ok

REPO_ROOT = Path(__file__).resolve().parents[2]
WHEEL = REPO_ROOT / "testdata" / "release-1.1.0" / "protocol_py-1.1.0-py3-none-any.whl"
CONSOLE_SCRIPT = Path(sys.executable).parent / "protocol-py"

RELEASE_PLUGIN = """
import sys
sys.path.insert(0, sys.argv.pop(1))
import protocol_py.cli
assert protocol_py.cli.__file__.startswith(sys.path[0]), protocol_py.cli.__file__
raise SystemExit(protocol_py.cli.main())
"""
"""1.1.0's ``protocol-py`` (argv: the unpacked wheel, then its arguments)."""

RELEASE_KERNEL = """
import asyncio, json, os, sys
sys.path.insert(0, sys.argv[1])
import protocol_py.launch
from protocol_py.launch import launch
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest
assert protocol_py.launch.__file__.startswith(sys.argv[1]), protocol_py.launch.__file__

async def main():
    argv, auto_mtls = json.loads(sys.argv[2])
    async with launch(argv, auto_mtls=auto_mtls, stderr=open(os.devnull, "w")) as plugin:
        caps = await plugin.client.get_capabilities(timeout=30)
        request = StreamCompletionRequest(
            model_id="reference-large",
            call_context=CallContext(session_id="s", turn_id="t"),
            messages=[Message(role=Role.USER, id="01JD7Q3V5W6X7Y8Z9A0B1C2D3F",
                              content=[ContentBlock(text=TextBlock(text="Say hello."))])],
        )
        events = [e async for e in plugin.client.stream(request, timeout=30)]
        report = {
            "version": plugin.handshake.version,
            "certificate": plugin.handshake.server_certificate is not None,
            "extra": list(plugin.handshake.extra),
            "transport": plugin.handshake.transport,
            "address": plugin.handshake.address,
            "auto_mtls": plugin.auto_mtls,
            "protocol_version": caps.protocol_version,
            "last_event": [k for k, v in events[-1].to_dict().items()][0],
        }
    report["returncode"] = plugin.process.returncode
    report["socket_left"] = os.path.exists(os.path.dirname(report["address"]))
    print(json.dumps(report))

asyncio.run(main())
"""
"""A kernel running 1.1.0's ``launch()`` (argv: the unpacked wheel, then ``[argv, auto_mtls]``
as JSON); prints what it saw."""


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 1.1.0 wheel, unpacked."""
    target = tmp_path_factory.mktemp("release-1.1.0")
    with zipfile.ZipFile(WHEEL) as wheel:
        wheel.extractall(target)
    assert (target / "protocol_py" / "launch.py").is_file()
    return target


def turn() -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id="reference-large",
        call_context=CallContext(session_id="s", turn_id="t"),
        messages=[
            Message(
                role=Role.USER,
                id="01JD7Q3V5W6X7Y8Z9A0B1C2D3F",
                content=[ContentBlock(text=TextBlock(text="Say hello."))],
            )
        ],
    )


@pytest.mark.parametrize("auto_mtls", [True, False])
async def test_this_launch_uses_a_plugin_of_the_previous_release(
    release: Path, auto_mtls: bool
) -> None:
    argv = [sys.executable, "-c", RELEASE_PLUGIN, str(release), "serve", "--handshake"]
    async with launch(argv, auto_mtls=auto_mtls, stderr=subprocess.DEVNULL) as plugin:
        assert plugin.handshake.layout == "protocol-py"
        assert plugin.handshake.transport == "unix"
        assert (plugin.handshake.server_certificate is not None) is auto_mtls
        caps = await plugin.client.get_capabilities(timeout=30)
        events = [event async for event in plugin.client.stream(turn(), timeout=30)]
        directory = Path(plugin.handshake.address).parent
        assert directory.is_dir()
    assert caps.protocol_version == "1.1"
    assert events[-1].stop is not None
    assert plugin.process.returncode == 0
    assert not directory.exists()


@pytest.mark.parametrize("auto_mtls", [True, False])
def test_the_previous_releases_launch_uses_this_plugin(release: Path, auto_mtls: bool) -> None:
    argv = [str(CONSOLE_SCRIPT), "serve", "--handshake"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLUGIN_", "MODEL_PLUGIN_"))}
    done = run_ok(
        [sys.executable, "-c", RELEASE_KERNEL, str(release), json.dumps([argv, auto_mtls])],
        env=env,
        timeout=120,
    )
    report = json.loads(done.stdout)
    assert report == {
        "version": 1,
        "certificate": auto_mtls,
        "extra": [],
        "transport": "unix",
        "address": report["address"],
        "auto_mtls": auto_mtls,
        "protocol_version": PROTOCOL_VERSION,
        "last_event": "stop",
        "returncode": 0,
        "socket_left": False,
    }
