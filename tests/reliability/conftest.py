"""Fixtures of the reliability suite: an in-process server on the reference provider,
a capture of every log record, grpcio calls with raw bytes, and a raw HTTP/2 (``h2``) client
for frames no gRPC client sends."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from protocol_py.provider import Provider
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import RPC_RECORD_ATTR, ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest, StreamEvent

from ..support.h2_client import SERVICE, RawH2, grpc_frame

UNARY_RPCS = ("GetCapabilities", "Configure", "CountTokens", "Render", "Describe")


class Captured(logging.Handler):
    """Every log record emitted while installed (any logger, any level)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def rpc_records(self) -> list[dict[str, Any]]:
        """The per-RPC JSON records of ``protocol_py.server``, parsed."""
        return [
            json.loads(r.getMessage()) for r in self.records if getattr(r, RPC_RECORD_ATTR, False)
        ]

    def errors(self) -> list[logging.LogRecord]:
        """Records at ERROR or above, and any record carrying a traceback."""
        return [r for r in self.records if r.levelno >= logging.ERROR or r.exc_info]

    def clear(self) -> None:
        self.records.clear()


@pytest.fixture
def logs() -> Iterator[Captured]:
    handler = Captured()
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


@dataclass
class Served:
    server: ModelServer
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


async def serve(provider: Provider | None = None, **kwargs: Any) -> Served:
    server = ModelServer(provider or ReferenceProvider(), **kwargs)
    port = await server.start("127.0.0.1", 0)
    return Served(server, port)


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    run = await serve()
    try:
        yield run
    finally:
        await run.server.shutdown(grace_period=0)


def user(text: str, msg_id: str = "01J00000000000000000000001") -> Message:
    return Message(role=Role.USER, id=msg_id, content=[ContentBlock(text=TextBlock(text=text))])


def request(
    prompt: str = "Hello there", *, model: str = "reference-large"
) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id=model,
        messages=[user(prompt)],
        call_context=CallContext(session_id="sess-1", turn_id="turn-1"),
    )


@dataclass
class GrpcioResult:
    """What grpcio's client saw: the status code name, details, replies and seconds taken."""

    code: str
    details: str
    replies: list[bytes] = field(default_factory=list)
    seconds: float = 0.0


def grpcio_call(
    address: str, rpc: str, body: bytes, *, timeout: float = 30.0, stream: bool = False
) -> GrpcioResult:
    """Call ``rpc`` with raw request bytes through grpcio (blocking; run it in a thread)."""
    started = time.monotonic()
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(address, options=options) as channel:
        try:
            if stream:
                call = channel.unary_stream(SERVICE + rpc)
                replies = list(call(body, timeout=timeout))
            else:
                replies = [channel.unary_unary(SERVICE + rpc)(body, timeout=timeout)]
        except grpc.RpcError as exc:
            return GrpcioResult(
                exc.code().name, exc.details() or "", seconds=time.monotonic() - started
            )
    return GrpcioResult("OK", "", replies, time.monotonic() - started)


async def acall(address: str, rpc: str, body: bytes, **kwargs: Any) -> GrpcioResult:
    return await asyncio.to_thread(grpcio_call, address, rpc, body, **kwargs)


async def still_serving(served: Served) -> None:
    """A normal StreamCompletion and a Describe still succeed."""
    result = await acall(served.address, "StreamCompletion", bytes(request()), stream=True)
    assert result.code == "OK", result
    events = [StreamEvent.parse(r) for r in result.replies]
    assert events[-1].stop is not None, events
    describe = await acall(served.address, "Describe", b"")
    assert describe.code == "OK", describe


def fuzz_examples(default: int) -> int:
    """Hypothesis examples per fuzzed target: ``default``, or ``PROTOCOL_PY_FUZZ_EXAMPLES``."""
    return int(os.environ.get("PROTOCOL_PY_FUZZ_EXAMPLES", str(default)))


def fuzz_settings(max_examples: int) -> settings:
    """The suite's hypothesis settings: no per-example deadline, no example database, and the
    same inputs on every run (a CI failure is reproducible, never a flake) unless
    ``PROTOCOL_PY_FUZZ_RANDOM`` is set to explore new ones."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=not os.environ.get("PROTOCOL_PY_FUZZ_RANDOM"),
        suppress_health_check=list(HealthCheck),
    )


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """One of ``seeds`` with 1 to 4 mutations: a flipped byte, inserted random bytes, deleted
    bytes, a truncation or a duplicated run (for the hypothesis fuzzing tests)."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "duplicate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate" and data:
            data[at:at] = data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


@dataclass
class RawReply:
    """A raw HTTP/2 exchange's outcome: response headers, trailers and DATA bytes."""

    headers: dict[str, str]
    trailers: dict[str, str]
    data: bytes
    reset: bool = False

    @property
    def grpc_status(self) -> str | None:
        return self.trailers.get("grpc-status") or self.headers.get("grpc-status")

    @property
    def grpc_message(self) -> str:
        return self.trailers.get("grpc-message") or self.headers.get("grpc-message") or ""


frame = grpc_frame
"""A gRPC length-prefixed message (uncompressed)."""


def raw_h2_call(
    port: int,
    rpc: str,
    data: bytes,
    *,
    extra_headers: list[tuple[str, str]] | None = None,
    timeout: float = 10.0,
) -> RawReply:
    """Send one request on a fresh HTTP/2 connection (:class:`RawH2`) with ``data`` as the DATA
    payload (whatever bytes, framed or not) and END_STREAM; read until the stream ends."""
    raw = RawH2(port, timeout=timeout)
    try:
        stream_id = raw.open(rpc, data, extra_headers=extra_headers)
        state = raw.outcome(stream_id, limit=timeout)
    finally:
        raw.close()
    return RawReply(state["response"], state["trailers"], state["data"], state["reset"] is not None)


async def raw_call(port: int, rpc: str, data: bytes, **kwargs: Any) -> RawReply:
    return await asyncio.to_thread(raw_h2_call, port, rpc, data, **kwargs)
