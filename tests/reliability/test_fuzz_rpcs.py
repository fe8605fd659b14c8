"""Random and mutated bytes into every RPC of the real server.

The server runs on its own event loop in a thread; google's grpcio client sends each input
as the raw request body of one of the six ModelService RPCs. Every answer is a defined status
(OK, INVALID_ARGUMENT, UNIMPLEMENTED, RESOURCE_EXHAUSTED or FAILED_PRECONDITION: never
UNKNOWN or INTERNAL), a StreamCompletion that answers OK ends with a ``stop`` or ``error``
event, nothing is logged at ERROR (no traceback), and the server still serves afterwards.
Bounded with ``max_examples``; the inputs tried are printed (run with ``-s``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol_py.codec.structs import to_struct
from protocol_py.providers.reference.provider import ReferenceProvider
from protocol_py.server import ModelServer
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol_py_gen.model.v1 import (
    ConfigureRequest,
    CountTokensRequest,
    GenerationParams,
    RenderRequest,
    StreamCompletionRequest,
    StreamEvent,
    ToolDeclaration,
)

from .conftest import SERVICE, Captured, fuzz_examples, fuzz_settings, mutated, request, user

EXAMPLES_PER_RPC = fuzz_examples(300)
"""Hypothesis examples per RPC (default 300; ``PROTOCOL_PY_FUZZ_EXAMPLES`` overrides it)."""


CALL_TIMEOUT = 20.0
"""grpcio deadline of one fuzzed call, seconds (a generous bound; calls take milliseconds)."""

DEFINED = {
    "OK",
    "INVALID_ARGUMENT",
    "UNIMPLEMENTED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
}


def rich_request() -> StreamCompletionRequest:
    """A request using tools, params, a tool call and its result, and provider options."""
    base = request("What is the weather? use tool")
    base.params = GenerationParams(max_output_tokens=50, temperature=0.5, stop_sequences=["x"])
    base.tools = [
        ToolDeclaration(
            name="weather",
            description="Weather in a city",
            input_schema=to_struct({"type": "object", "properties": {"city": {"type": "string"}}}),
        )
    ]
    call_block = ToolUseBlock(id="t1", name="weather", input=to_struct({"city": "Paris"}))
    base.messages += [
        Message(role=Role.ASSISTANT, id="m2", content=[ContentBlock(tool_use=call_block)]),
        Message(
            role=Role.USER,
            id="m3",
            content=[
                ContentBlock(
                    tool_result=ToolResultBlock(
                        tool_use_id="t1", content=[ContentBlock(text=TextBlock(text="21 C"))]
                    )
                )
            ],
        ),
    ]
    base.provider_options = to_struct({"seed": 1, "tags": ["a", None, True]})
    return base


SEEDS: dict[str, list[bytes]] = {
    "GetCapabilities": [b""],
    "Describe": [b""],
    "Configure": [
        bytes(ConfigureRequest(config=to_struct({"max_tokens": 10}))),
        bytes(ConfigureRequest(config=to_struct({"simulate_error": {"kind": "transient"}}))),
        bytes(ConfigureRequest(config=to_struct({"base_url": "https://example.com/v1"}))),
    ],
    "StreamCompletion": [
        bytes(request("Hello there")),
        bytes(request("hi", model="reference-small")),
        bytes(rich_request()),
    ],
    "CountTokens": [bytes(CountTokensRequest(model_id="reference-small", messages=[user("hi")]))],
    "Render": [
        bytes(RenderRequest(payload_type="reference.echo", payload=b"abc")),
        bytes(RenderRequest(payload_type="reference.repeat", payload=b'{"text":"a","times":3}')),
    ],
}
TRIED: dict[str, int] = {}
STATUSES: dict[str, set[str]] = {}


class ThreadServer:
    """A ModelServer on the reference provider, on its own event loop in a thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: ModelServer = self.run(self._make())
        self.port: int = self.run(self.server.start("127.0.0.1", 0))

    async def _make(self) -> ModelServer:
        return ModelServer(ReferenceProvider())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.run(self.server.shutdown(grace_period=0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def threaded() -> Iterator[ThreadServer]:
    server = ThreadServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def channel(threaded: ThreadServer) -> Iterator[grpc.Channel]:
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(f"127.0.0.1:{threaded.port}", options=options) as chan:
        yield chan


def call(chan: grpc.Channel, rpc: str, body: bytes) -> tuple[str, list[bytes]]:
    try:
        if rpc == "StreamCompletion":
            return "OK", list(chan.unary_stream(SERVICE + rpc)(body, timeout=CALL_TIMEOUT))
        return "OK", [chan.unary_unary(SERVICE + rpc)(body, timeout=CALL_TIMEOUT)]
    except grpc.RpcError as exc:
        return exc.code().name, []


@pytest.mark.parametrize("rpc", list(SEEDS))
def test_fuzzed_rpc_answers_a_defined_status_and_never_logs_an_error(
    channel: grpc.Channel, logs: Captured, rpc: str
) -> None:
    @fuzz_settings(EXAMPLES_PER_RPC)
    @given(st.one_of(st.binary(max_size=200), mutated(SEEDS[rpc])))
    def check(body: bytes) -> None:
        TRIED[rpc] = TRIED.get(rpc, 0) + 1
        code, replies = call(channel, rpc, body)
        STATUSES.setdefault(rpc, set()).add(code)
        assert code in DEFINED, (code, body)
        if rpc == "StreamCompletion" and code == "OK":
            last = StreamEvent.parse(replies[-1])
            assert last.stop is not None or last.error is not None, (body, last)
        if rpc == "Configure" and code == "OK":
            call(channel, "Configure", b"")  # back to the default configuration
        errors = [r for r in logs.errors() if r.name.startswith(("protocol_py", "grpclib"))]
        assert errors == [], (body, [logging.Formatter().format(r) for r in errors])

    check()
    code, replies = call(channel, "StreamCompletion", bytes(request()))
    assert code == "OK" and StreamEvent.parse(replies[-1]).stop is not None
    assert call(channel, "Describe", b"")[0] == "OK"


def test_rpc_inputs_tried_are_reported() -> None:
    for rpc, count in TRIED.items():
        print(f"RPC fuzzing {rpc}: {count} inputs, statuses {sorted(STATUSES.get(rpc, ()))}")
    assert set(TRIED) <= set(SEEDS)


def test_valueless_struct_entry_found_by_fuzzing_reads_as_null(
    channel: grpc.Channel, logs: Captured
) -> None:
    # Found by the decoder fuzzing: a Struct map entry without a value (legal protobuf) in
    # provider_options decoded as None, and the reference provider's re-encoding of the
    # request raised TypeError (a PERMANENT "internal provider error" and an ERROR traceback).
    entry = b"\x0a\x01a"  # key "a", no value
    struct = b"\x0a" + bytes([len(entry)]) + entry
    body = bytes(request()) + b"\x42" + bytes([len(struct)]) + struct
    code, replies = call(channel, "StreamCompletion", body)
    assert code == "OK"
    last = StreamEvent.parse(replies[-1])
    assert last.stop is not None, last
    assert logs.errors() == []
