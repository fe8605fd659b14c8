"""The real console script: ``protocol-py serve --provider anthropic --base-url URL --discover``
with the key from ANTHROPIC_API_KEY, against the stub upstream."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from protocol_py.client.client import ModelClient

from ...support.adapters import VENDOR, load_fixture
from ...support.stub_upstream import Reply, StubUpstream
from .._compare import assert_events
from ..test_providers_stub import request

CONSOLE_SCRIPT = Path(sys.executable).parent / "protocol-py"


async def test_cli_serves_anthropic_with_discover_and_env_key() -> None:
    meta, body = load_fixture(VENDOR / "anthropic_text_plain.json")
    listing = {"data": [{"id": "claude-sonnet-5-5"}, {"id": "claude-new-preview"}]}
    async with StubUpstream() as stub:
        stub.queue(
            Reply(
                headers={"content-type": "application/json"}, chunks=[json.dumps(listing).encode()]
            ),
            Reply(headers=dict(meta["http"]["headers"]), chunks=[body]),
        )
        proc = await asyncio.create_subprocess_exec(
            str(CONSOLE_SCRIPT),
            "serve",
            "--provider",
            "anthropic",
            "--base-url",
            stub.url,
            "--discover",
            "--handshake",
            "--port",
            "0",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ANTHROPIC_API_KEY": "sk-ant-cli", "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert line, "no handshake line"
            address = line.rstrip("\n").split("|")[2]
            client = ModelClient.connect(address)
            try:
                caps = await client.get_capabilities(timeout=10)
                ids = [m.id for m in caps.models]
                assert "claude-new-preview" in ids and "claude-sonnet-5-5" in ids
                events = [e async for e in client.stream(request("claude-sonnet-5-5"), timeout=10)]
            finally:
                client.close()
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 10)
    assert_events(events, meta["expected_events"])
    assert [s.path for s in stub.seen] == ["/v1/models", "/v1/messages"]
    assert all(s.headers["x-api-key"] == "sk-ant-cli" for s in stub.seen)


async def test_cli_serve_log_never_shows_base_url_credentials() -> None:
    meta, body = load_fixture(VENDOR / "anthropic_text_plain.json")
    async with StubUpstream() as stub:
        stub.queue(Reply(headers=dict(meta["http"]["headers"]), chunks=[body]))
        base = stub.url + "?key=SECRETQ"
        proc = await asyncio.create_subprocess_exec(
            str(CONSOLE_SCRIPT),
            "serve",
            "--provider",
            "anthropic",
            "--base-url",
            base,
            "--no-discover",
            "--handshake",
            "--port",
            "0",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ANTHROPIC_API_KEY": "sk-ant-cli", "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
            assert line, "no handshake line"
            client = ModelClient.connect(line.rstrip("\n").split("|")[2])
            try:
                events = [e async for e in client.stream(request("claude-sonnet-5-5"), timeout=10)]
            finally:
                client.close()
        finally:
            proc.terminate()
            _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert_events(events, meta["expected_events"])
    assert stub.seen[0].path == "/v1/messages?key=SECRETQ"
    log = stderr.decode()
    assert "HTTP Request: POST http://127.0.0.1" in log  # the request line is still logged
    assert "key=***" in log and "SECRETQ" not in log
