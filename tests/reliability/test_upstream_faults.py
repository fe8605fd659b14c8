"""Upstream faults keep what was streamed.

Every fault below is served by the loopback stub (``tests/support/stub_upstream.py``) to every
adapter code path: ``openai``, ``deepseek``, ``anthropic`` and the OpenAI-compatible settings used
for vLLM / Ollama (``max_tokens``, ``done_ends_turn``). Each row checks, through the adapter:

* the documented ModelError kind (docs/adapters.md "Upstream faults"), ``retryable`` and, for an
  HTTP error, ``http_status``;
* every event streamed before the fault, in order (stream_start, metadata, both text deltas);
* the usage the vendor had reported (a usage figure in the stream, Anthropic's message_start) as a
  ``usage`` event right before the ``error``, with the vendor's numbers;
* the whole output passes the order checker (docs/decisions.md#d12) and accumulates to the streamed
  text;
* the stub sees the upstream connection closed.

One row per fault (adapter rotating) also runs through the real gRPC server and client and must give
the same events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import betterproto2
import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.base import HTTPProvider, Timeouts
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.openai.provider import DeepSeekProvider, OpenAIProvider
from protocol_py.providers.openai.request import OpenAICompat
from protocol_py.rules.accumulate import StreamAccumulator
from protocol_py.rules.stream_order import StreamOrderChecker
from protocol_py.server import ModelServer
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import ErrorKind, StopReason, StreamEvent

from ..providers.test_providers_stub import MODEL, request
from ..support.stub_upstream import Reply, StubUpstream, dribble

ADAPTERS = ["openai", "deepseek", "anthropic", "compat"]
"""``compat``: OpenAIProvider with the settings docs/adapters.md gives for vLLM and Ollama."""

REQUEST_ID = "req-fault-1"
FAST = Timeouts(startup_deadline_s=10.0, idle_timeout_s=10.0, connect_timeout_s=5.0)
STALL = Timeouts(startup_deadline_s=0.3, idle_timeout_s=0.3, connect_timeout_s=5.0)
"""Short start-up / no-progress timers for the stall rows (seconds)."""


def _provider(adapter: str, url: str, timeouts: Timeouts) -> HTTPProvider:
    common: dict[str, Any] = {
        "api_key": "sk-fault-test-key-0001",
        "base_url": url,
        "timeouts": timeouts,
        "retry": RetryPolicy(max_attempts=1),  # the error itself, not a retry, is under test
    }
    if adapter == "anthropic":
        return AnthropicProvider(**common)
    if adapter == "deepseek":
        return DeepSeekProvider(**common)
    if adapter == "compat":
        compat = OpenAICompat(max_tokens_field="max_tokens", done_ends_turn=True)
        return OpenAIProvider(compat=compat, **common)
    return OpenAIProvider(**common)


def _model(adapter: str) -> str:
    return MODEL["openai" if adapter == "compat" else adapter]


# --- vendor bodies --------------------------------------------------------------------------


def _data(obj: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


def _oai(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return _data({"id": "chatcmpl-1", "model": "m-1", "choices": choices, **extra})


def _oai_usage(completion: int) -> dict[str, int]:
    return {"prompt_tokens": 12, "completion_tokens": completion, "total_tokens": 12 + completion}


def _anth(kind: str, **fields: Any) -> bytes:
    return _data({"type": kind, **fields}, event=kind)


def _anth_text(text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return _anth("content_block_delta", index=0, delta=delta)


@dataclass(frozen=True)
class Bodies:
    """One vendor family's stream pieces. ``prefix`` streams stream_start, metadata, "Hel",
    "lo" and reports usage 12 in / 2 out; ``rest`` ends the turn successfully with 12 / 3."""

    headers: dict[str, str]
    prefix: bytes
    rest: bytes
    error_finish: bytes  # the vendor's error ending after the prefix, with its usage (12 / 3)
    midstream_error: bytes  # an in-band error object right after the prefix
    error_body: Callable[[int], bytes]


OPENAI = Bodies(
    headers={"content-type": "text/event-stream", "x-request-id": REQUEST_ID},
    prefix=_oai({"role": "assistant", "content": "Hel"})
    # vLLM's continuous_usage_stats: usage on a content chunk
    + _oai({"content": "lo"}, usage=_oai_usage(2)),
    rest=_oai({}, "stop") + _oai(None, usage=_oai_usage(3)) + b"data: [DONE]\n\n",
    error_finish=_oai({}, "insufficient_system_resource")
    + _oai(None, usage=_oai_usage(3))
    + b"data: [DONE]\n\n",
    midstream_error=_data({"error": {"message": "upstream failed", "type": "server_error"}}),
    error_body=lambda status: json.dumps(
        {"error": {"message": f"failure {status}", "type": "server_error"}}
    ).encode(),
)
ANTHROPIC = Bodies(
    headers={"content-type": "text/event-stream", "request-id": REQUEST_ID},
    prefix=_anth(
        "message_start",
        message={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "m-1",
            "usage": {"input_tokens": 12, "output_tokens": 2},
        },
    )
    + _anth("content_block_start", index=0, content_block={"type": "text", "text": ""})
    + _anth_text("Hel")
    + b'event: ping\ndata: {"type":"ping"}\n\n'
    + _anth_text("lo"),
    rest=_anth("content_block_stop", index=0)
    + _anth("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3})
    + _anth("message_stop"),
    error_finish=_anth("message_delta", delta={}, usage={"output_tokens": 3})
    + _anth("error", error={"type": "overloaded_error", "message": "Overloaded"}),
    midstream_error=_anth("error", error={"type": "api_error", "message": "upstream failed"}),
    error_body=lambda status: json.dumps(
        {
            "type": "error",
            "error": {
                "type": "overloaded_error" if status == 529 else "api_error",
                "message": f"failure {status}",
            },
        }
    ).encode(),
)


def _bodies(adapter: str) -> Bodies:
    return ANTHROPIC if adapter == "anthropic" else OPENAI


# --- the fault table --------------------------------------------------------------------------

STREAMED = ["stream_start", "metadata", "text_delta", "text_delta"]
"""What the prefix streams before any fault."""


@dataclass(frozen=True)
class Fault:
    name: str
    reply: Callable[[Bodies], Reply]
    kind: ErrorKind | None
    """The documented ModelError kind; None: the turn must succeed unchanged."""
    streamed: list[str]
    """Event kinds before the usage/error tail."""
    usage: tuple[int, int] | None
    """(input_tokens, output_tokens) of the usage event; None: no usage event."""
    message: str = ""
    """A substring the error message must contain."""
    http_status: int | None = None
    stall: bool = False


def _status(status: int, html: bool = False) -> Callable[[Bodies], Reply]:
    def reply(b: Bodies) -> Reply:
        body = b"<html><body>Bad gateway</body></html>" if html else b.error_body(status)
        ctype = "text/html" if html else "application/json"
        return Reply(status=status, headers={"content-type": ctype}, chunks=[body])

    return reply


FAULTS = [
    Fault(
        "reset_mid_stream",
        # the pause lets the client read the prefix first: an RST discards unread bytes
        lambda b: Reply(headers=b.headers, chunks=[b.prefix, 0.2], reset=True),
        ErrorKind.TRANSIENT,
        STREAMED,
        (12, 2),
        message="ended before",
    ),
    Fault(
        "reset_before_headers",
        lambda b: Reply(reset_before_headers=True),
        ErrorKind.TRANSIENT,
        [],
        None,
        message="failed: connection closed by the upstream",
    ),
    Fault(
        "stall_before_first_byte",
        lambda b: Reply(hang=True),
        ErrorKind.TRANSIENT,
        [],
        None,
        message="start-up deadline",
        stall=True,
    ),
    Fault(
        "stall_after_headers",
        lambda b: Reply(headers=b.headers, hold=True),
        ErrorKind.TRANSIENT,
        [],
        None,
        message="did not start within the start-up deadline",
        stall=True,
    ),
    Fault(
        "stall_mid_stream",
        lambda b: Reply(headers=b.headers, chunks=[b.prefix], hold=True),
        ErrorKind.TRANSIENT,
        STREAMED,
        (12, 2),
        message="no progress",
        stall=True,
    ),
    Fault(
        "truncated_json_chunk",
        lambda b: Reply(headers=b.headers, chunks=[b.prefix, b'data: {"id":"chatcm\n\n']),
        ErrorKind.TRANSIENT,
        STREAMED,
        (12, 2),
        message="malformed JSON",
    ),
    Fault(
        "truncated_json_at_eof",
        lambda b: Reply(headers=b.headers, chunks=[b.prefix, b'data: {"id":"chatcm']),
        ErrorKind.TRANSIENT,
        STREAMED,
        (12, 2),
        message="ended before",
    ),
    Fault("http_500", _status(500), ErrorKind.TRANSIENT, [], None, http_status=500),
    Fault("http_502_html", _status(502, html=True), ErrorKind.TRANSIENT, [], None, http_status=502),
    Fault("http_503", _status(503), ErrorKind.TRANSIENT, [], None, http_status=503),
    Fault("http_429", _status(429), ErrorKind.RATE_LIMITED, [], None, http_status=429),
    Fault("http_529", _status(529), ErrorKind.OVERLOADED, [], None, http_status=529),
    Fault(
        "dribbled_one_byte_at_a_time",
        lambda b: Reply(headers=b.headers, chunks=dribble(b.prefix + b.rest)),
        None,
        STREAMED,
        (12, 3),
    ),
    Fault(
        "vendor_error_finish_then_usage",
        lambda b: Reply(headers=b.headers, chunks=[b.prefix, b.error_finish]),
        ErrorKind.OVERLOADED,
        STREAMED,
        (12, 3),
    ),
    Fault(
        "midstream_error_event",
        lambda b: Reply(headers=b.headers, chunks=[b.prefix, b.midstream_error], hold=True),
        ErrorKind.TRANSIENT,
        STREAMED,
        (12, 2),
        message="upstream failed",
    ),
]
MATRIX = [
    pytest.param(fault, adapter, id=f"{fault.name}-{adapter}")
    for fault in FAULTS
    for adapter in ADAPTERS
]
THROUGH_GRPC = [
    pytest.param(fault, ADAPTERS[i % len(ADAPTERS)], id=f"{fault.name}-{ADAPTERS[i % 4]}")
    for i, fault in enumerate(FAULTS)
]


def _check(events: list[StreamEvent], fault: Fault) -> None:
    """Every assertion of a row (see the module docstring)."""
    names = [betterproto2.which_one_of(e, "event")[0] for e in events]
    tail = (["usage"] if fault.usage else []) + (["stop"] if fault.kind is None else ["error"])
    assert names == fault.streamed + tail
    checker = StreamOrderChecker()
    accumulator = StreamAccumulator()
    for event in events:
        checker.check(event)
        accumulator.feed(event)
    result = accumulator.result()
    text = "".join(b.text.text for b in result.message.content if b.text is not None)
    assert text == ("Hello" if fault.streamed else "")
    if fault.streamed:
        assert events[0].stream_start is not None
        assert events[0].stream_start.provider_request_id == REQUEST_ID
        assert events[1].metadata is not None and events[1].metadata.actual_model == "m-1"
    if fault.usage is not None:
        usage = events[-2].usage
        assert usage is not None
        assert (usage.input_tokens, usage.output_tokens) == fault.usage
    if fault.kind is None:
        assert result.stop is not None and result.stop.reason == StopReason.END_TURN
        assert result.error is None
        return
    error = events[-1].error
    assert error is not None
    assert error.kind == fault.kind, error.message
    assert error.retryable is True  # every upstream fault here may succeed when retried
    assert fault.message in error.message
    assert error.http_status == fault.http_status
    assert "sk-fault-test-key-0001" not in error.message


async def _through_adapter(provider: HTTPProvider, model: str) -> list[StreamEvent]:
    return [e async for e in provider.stream(request(model), CallContext())]


async def _through_grpc(provider: HTTPProvider, model: str) -> AsyncIterator[list[StreamEvent]]:
    server = ModelServer(provider)
    port = await server.start("127.0.0.1", 0)
    client = ModelClient.connect(f"127.0.0.1:{port}")
    try:
        yield [e async for e in client.stream(request(model), timeout=20)]
        # the server still serves after the fault
        caps = await client.get_capabilities(timeout=5)
        assert model in [m.id for m in caps.models]
    finally:
        client.close()
        await server.shutdown(grace_period=0)


async def _run(fault: Fault, adapter: str, *, grpc: bool) -> list[StreamEvent]:
    async with StubUpstream() as stub:
        stub.queue(fault.reply(_bodies(adapter)))
        provider = _provider(adapter, stub.url, STALL if fault.stall else FAST)
        try:
            if grpc:
                events: list[StreamEvent] = []
                async for got in _through_grpc(provider, _model(adapter)):
                    events = got
            else:
                events = await _through_adapter(provider, _model(adapter))
            assert await stub.wait_all_closed(2.0), "the upstream connection was left open"
        finally:
            await provider.aclose()
    assert len(stub.seen) == 1
    return events


@pytest.mark.parametrize(("fault", "adapter"), MATRIX)
async def test_upstream_fault_keeps_streamed_events_and_usage(fault: Fault, adapter: str) -> None:
    _check(await _run(fault, adapter, grpc=False), fault)


@pytest.mark.parametrize(("fault", "adapter"), THROUGH_GRPC)
async def test_upstream_fault_through_grpc_server(fault: Fault, adapter: str) -> None:
    _check(await _run(fault, adapter, grpc=True), fault)


async def test_dribbled_body_gives_the_same_events_as_one_write() -> None:
    for adapter in ADAPTERS:
        bodies = _bodies(adapter)
        whole = Reply(headers=bodies.headers, chunks=[bodies.prefix + bodies.rest])
        dribbled = Reply(headers=bodies.headers, chunks=dribble(bodies.prefix + bodies.rest))
        async with StubUpstream() as stub:
            stub.queue(whole, dribbled)
            provider = _provider(adapter, stub.url, FAST)
            try:
                once = await _through_adapter(provider, _model(adapter))
                byte_by_byte = await _through_adapter(provider, _model(adapter))
            finally:
                await provider.aclose()
        assert [bytes(e) for e in byte_by_byte] == [bytes(e) for e in once], adapter


def test_matrix_covers_every_listed_fault_for_every_adapter() -> None:
    names = {f.name for f in FAULTS}
    assert {
        "reset_mid_stream",
        "stall_before_first_byte",
        "stall_mid_stream",
        "truncated_json_chunk",
        "http_500",
        "http_429",
        "http_529",
        "dribbled_one_byte_at_a_time",
        "vendor_error_finish_then_usage",
    } <= names
    assert len(MATRIX) == len(FAULTS) * len(ADAPTERS)
    assert {p.values[0].name for p in THROUGH_GRPC} == names  # each fault once through gRPC
