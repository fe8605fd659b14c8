"""Fixtures for the server tests: an in-process server, a grpclib client, the real console
script as a subprocess, and request builders."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.provider import Provider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role, TextBlock
from protocol_py_gen.model.v1 import GenerationParams, StreamCompletionRequest, ToolDeclaration

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "testdata" / "cases"
CONSOLE_SCRIPT = Path(sys.executable).parent / "protocol-py"


def load_case(case_id: str) -> dict[str, Any]:
    """The copied case file ``testdata/cases/<id>.json``."""
    data: dict[str, Any] = json.loads((CASES / f"{case_id}.json").read_text())
    assert data["id"] == case_id
    return data


def user(text: str, msg_id: str = "01J00000000000000000000001") -> Message:
    return Message(role=Role.USER, id=msg_id, content=[ContentBlock(text=TextBlock(text=text))])


def make_request(
    prompt: str = "Hello there",
    *,
    model: str = "reference-large",
    params: GenerationParams | None = None,
    tools: list[ToolDeclaration] | None = None,
    system: str | None = None,
    messages: list[Message] | None = None,
) -> StreamCompletionRequest:
    context = []
    if system is not None:
        context.append(
            ContextSection(
                provider="test",
                label="system",
                content=[ContentBlock(text=TextBlock(text=system))],
            )
        )
    return StreamCompletionRequest(
        model_id=model,
        messages=messages if messages is not None else [user(prompt)],
        params=params,
        tools=tools or [],
        assembled_context=context,
        call_context=CallContext(session_id="sess-1", turn_id="turn-1"),
    )


@dataclass
class Running:
    server: ModelServer
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


async def start_server(provider: Provider | None = None, **kwargs: Any) -> Running:
    server = ModelServer(provider or ReferenceProvider(), **kwargs)
    port = await server.start("127.0.0.1", 0)
    return Running(server, port)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    """An in-process server on the reference provider."""
    run = await start_server()
    try:
        yield run
    finally:
        await run.server.shutdown(grace_period=0)


@pytest.fixture
async def client(running: Running) -> AsyncIterator[ModelClient]:
    c = ModelClient.connect(running.address)
    try:
        yield c
    finally:
        c.close()


@dataclass
class Subprocess:
    proc: subprocess.Popen[str]
    host: str
    port: int
    handshake: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def stderr_text(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def stop(self) -> str:
        """SIGTERM (SIGKILL after 10 s), then all the server wrote to stderr."""
        self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def spawn_server(*extra: str, timeout: float = 15.0) -> Subprocess:
    """Start ``protocol-py serve --handshake --port 0`` (the real console script) and wait for
    the handshake line."""
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "serve", "--handshake", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            line = proc.stdout.readline()
            break
        if proc.poll() is not None:
            break
    if not line:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no handshake line; stderr:\n{err}")
    parts = line.rstrip("\n").split("|")
    host, _, port = parts[2].rpartition(":")
    return Subprocess(proc, host, int(port), line)


@pytest.fixture
def cli_server() -> Iterator[Subprocess]:
    """The console script serving the reference provider (stopped with SIGTERM afterwards)."""
    sub = spawn_server()
    try:
        yield sub
    finally:
        if sub.proc.poll() is None:
            sub.proc.terminate()
            try:
                sub.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                sub.proc.kill()
                sub.proc.wait()
        for stream in (sub.proc.stdout, sub.proc.stderr):
            if stream is not None:
                stream.close()
