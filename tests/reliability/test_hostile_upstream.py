"""A hostile upstream cannot bloat the server.

A loopback stub upstream (``tests/support/stub_upstream.py``) answers the vendor adapters with

* an HTTP 500 whose gzip body expands to 128 MiB of NUL bytes (and the same bomb gzipped twice);
* a 200 ``text/event-stream`` gzip bomb;
* an SSE line that never ends;

and a caller Configures a new ``base_url`` again and again (each retired HTTP client must close once
its streams end).

Peak memory is measured with :mod:`tracemalloc` (every bytes object httpx, zlib and the parser
allocate is traced): no bomb is ever expanded whole. Each test then streams a normal answer and
calls Describe through the same server: it is still serving.
"""

from __future__ import annotations

import contextlib
import json
import tracemalloc
import zlib
from typing import Any

import betterproto2
import httpx
import pytest

from protocol_py.bounded_text import MAX_ERROR_MESSAGE_BYTES, encoded_size
from protocol_py.client.client import ModelClient
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.http.base import HTTPProvider, Timeouts
from protocol_py.providers.http.body import DECODE_STEP_BYTES, MAX_ERROR_BODY_BYTES
from protocol_py.providers.http.clients import MAX_RETIRED_CLIENTS, ClientPool
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.http.sse import MAX_SSE_LINE_BYTES
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ..providers.test_providers_stub import MODEL, request
from ..support.adapters import served_client
from ..support.stub_upstream import Reply, StubUpstream

MIB = 1024 * 1024
BOMB_MIB = 128
"""Decoded size of the test bombs, MiB (128 MiB is 8x every cap)."""
PEAK_LIMIT = 48 * MIB
"""Most traced memory a bomb may take, bytes: the SSE line cap (16 MiB) plus the raw-body
window (16 MiB) plus slack; never the whole bomb."""


def _gzip(data_mib: int, *, times: int = 1) -> bytes:
    """``data_mib`` MiB of NUL bytes, gzipped ``times`` times (about 1,000:1 each)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    body = b"".join(c.compress(zeros) for _ in range(data_mib)) + c.flush()
    for _ in range(times - 1):
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = c.compress(body) + c.flush()
    return body


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _gzip(BOMB_MIB)


def _provider(adapter: str, url: str, **kwargs: Any) -> HTTPProvider:
    common: dict[str, Any] = {
        "api_key": "sk-hostile-test-key-0001",
        "base_url": url,
        "retry": RetryPolicy(max_attempts=1),
        **kwargs,
    }
    return AnthropicProvider(**common) if adapter == "anthropic" else OpenAIProvider(**common)


def _normal_reply(adapter: str) -> Reply:
    if adapter == "anthropic":
        body = (
            b'event: message_start\ndata: {"type":"message_start","message":{"model":"c",'
            b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"text","text":""}}\n\n'
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"fine"}}\n\n'
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
            b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
            b'"end_turn"},"usage":{"output_tokens":2}}\n\n'
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
        )
    else:
        chunks = [
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "fine"}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        body += b"data: [DONE]\n\n"
    return Reply(headers={"content-type": "text/event-stream"}, chunks=[body])


def _endless_line(adapter: str, piece: bytes, interval: float) -> Reply:
    """The normal answer up to and including its text delta, then a ``data:`` line that never
    ends: ``piece`` written every ``interval`` seconds until the client hangs up."""
    first = _normal_reply(adapter).chunks[0]
    assert isinstance(first, bytes)
    cut = first.index(b"fine") + first[first.index(b"fine") :].index(b"\n\n") + 2
    return Reply(
        headers={"content-type": "text/event-stream"},
        chunks=[first[:cut], b"data: "],
        forever=(piece, interval),
    )


async def _stream_measured(client: ModelClient, model: str) -> tuple[list[StreamEvent], int]:
    """The events of one StreamCompletion and the peak traced memory while it ran, bytes."""
    tracemalloc.start()
    try:
        events = [e async for e in client.stream(request(model), timeout=30)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"peak traced memory: {peak / MIB:.1f} MiB")
    return events, peak


async def _still_serving(client: ModelClient, stub: StubUpstream, adapter: str) -> None:
    stub.queue(_normal_reply(adapter))
    events = [e async for e in client.stream(request(MODEL[adapter]), timeout=30)]
    assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
    assert events[-1].stop is not None, events[-1]
    assert (await client.describe(timeout=10)).name


def _kinds(events: list[StreamEvent]) -> list[str]:
    return [betterproto2.which_one_of(e, "event")[0] for e in events]


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
@pytest.mark.parametrize("times", [1, 2], ids=["gzip", "gzip-gzip"])
async def test_gzip_bomb_error_body_is_read_only_up_to_the_cap_and_shown_printable(
    adapter: str, times: int, bomb: bytes
) -> None:
    body = bomb if times == 1 else zlib.compress(bomb, 9, wbits=31)
    async with StubUpstream() as stub:
        stub.queue(Reply(status=500, headers={"content-encoding": "gzip"}, chunks=[body]))
        if times == 2:
            stub.replies[0].headers["content-encoding"] = "gzip, gzip"
        provider = _provider(adapter, stub.url)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL[adapter])
            assert _kinds(events) == ["error"]
            error = events[0].error
            assert error is not None
            assert (error.kind, error.http_status, error.retryable) == (
                ErrorKind.TRANSIENT,
                500,
                True,
            )
            # the NUL bytes of the decoded body are escaped, the message capped
            assert "\x00" not in error.message
            assert error.message.startswith("\\x00\\x00")
            assert encoded_size(error.message) <= MAX_ERROR_MESSAGE_BYTES
            assert peak < MAX_ERROR_BODY_BYTES + 8 * DECODE_STEP_BYTES + 8 * MIB, peak
            await _still_serving(client, stub, adapter)
        await provider.aclose()


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_gzip_bomb_event_stream_ends_with_line_too_long_in_bounded_memory(
    adapter: str, bomb: bytes
) -> None:
    async with StubUpstream() as stub:
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        stub.queue(Reply(headers=headers, chunks=[bomb]))
        provider = _provider(adapter, stub.url)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL[adapter])
            assert _kinds(events) == ["error"]
            error = events[0].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT and error.retryable
            assert "SSE line too long" in error.message
            assert peak < PEAK_LIMIT, peak
            await _still_serving(client, stub, adapter)
        await provider.aclose()


@pytest.mark.parametrize("adapter", ["openai", "anthropic"])
async def test_endless_sse_line_is_a_transient_error_keeping_streamed_events(
    adapter: str,
) -> None:
    async with StubUpstream() as stub:
        stub.queue(_endless_line(adapter, b"x" * 65536, 0.0))
        provider = _provider(adapter, stub.url)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL[adapter])
            assert _kinds(events)[-1] == "error"
            assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
            error = events[-1].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT and error.retryable
            assert error.message == (
                f"SSE line too long: more than {MAX_SSE_LINE_BYTES} bytes without a newline"
            )
            assert peak < PEAK_LIMIT, peak
            assert await stub.wait_all_closed(10), "the upstream connection was not closed"
            await _still_serving(client, stub, adapter)
        await provider.aclose()


async def test_bytes_of_an_endless_line_are_not_progress() -> None:
    """Documented decision: only complete content events reset the no-progress timer, so a
    line that grows slowly forever ends with the no-progress error, not after hours."""
    timeouts = Timeouts(startup_deadline_s=5.0, idle_timeout_s=0.5, connect_timeout_s=5.0)
    async with StubUpstream() as stub:
        stub.queue(_endless_line("openai", b"x" * 16, 0.01))
        provider = _provider("openai", stub.url, timeouts=timeouts)
        async for client in served_client(provider):
            events = [e async for e in client.stream(request(MODEL["openai"]), timeout=30)]
            error = events[-1].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT
            assert error.message == "upstream stalled: no progress for 0.5 s (no-progress timeout)"
            await _still_serving(client, stub, "openai")
        await provider.aclose()


@pytest.mark.parametrize("coding", ["br", "gzip, gzip, gzip"])
async def test_unsupported_or_too_deeply_stacked_content_encoding_is_refused(coding: str) -> None:
    async with StubUpstream() as stub:
        headers = {"content-encoding": coding, "content-type": "application/json"}
        stub.queue(Reply(status=500, headers=headers, chunks=[b"\x00" * 100]))
        provider = _provider("openai", stub.url)
        async for client in served_client(provider):
            events = [e async for e in client.stream(request(MODEL["openai"]), timeout=30)]
            error = events[-1].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT
            assert error.message == "vendor error (HTTP 500)"  # the body is not decoded
            assert stub.seen[0].headers["accept-encoding"] == "gzip, deflate"
            await _still_serving(client, stub, "openai")
        await provider.aclose()


# --- retired HTTP clients ------------------------------------------------------------------


async def test_configure_closes_the_retired_client_as_soon_as_it_is_idle() -> None:
    """Each Configure+stream cycle used to keep one more client open (0.83 MB each)."""
    async with StubUpstream() as stub:
        provider = _provider("openai", stub.url)
        async for client in served_client(provider):
            old: list[Any] = []
            for i in range(20):
                stub.queue(_normal_reply("openai"))
                events = [e async for e in client.stream(request(MODEL["openai"]), timeout=30)]
                assert events[-1].stop is not None
                old.append(provider._clients.current())
                await client.configure({"base_url": f"{stub.url}/v{i}"}, timeout=10)
                assert provider._clients.retired == ()
            assert all(c.is_closed for c in old)
            await _still_serving(client, stub, "openai")
        await provider.aclose()


async def test_a_client_retired_mid_stream_serves_the_stream_then_closes() -> None:
    body = _normal_reply("openai").chunks[0]
    assert isinstance(body, bytes)
    half = body.index(b"\n\n") + 2
    async with StubUpstream() as stub:
        stub.queue(
            Reply(
                headers={"content-type": "text/event-stream"},
                chunks=[body[:half], 0.5, body[half:]],
            )
        )
        provider = _provider("openai", stub.url)
        async for client in served_client(provider):
            events: list[StreamEvent] = []
            stream = client.stream(request(MODEL["openai"]), timeout=30)
            events.append(await anext(stream))  # the stream is running on the first client
            first = provider._clients.current()
            await client.configure({"base_url": stub.url + "/other"}, timeout=10)
            assert provider._clients.retired == (first,) and not first.is_closed
            events += [e async for e in stream]
            assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
            assert events[-1].stop is not None
            assert provider._clients.retired == () and first.is_closed
        await provider.aclose()


async def test_retired_clients_in_use_are_bounded_oldest_closed_first() -> None:
    made: list[httpx.AsyncClient] = []

    def factory() -> httpx.AsyncClient:
        made.append(httpx.AsyncClient())
        return made[-1]

    pool = ClientPool(factory)
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(MAX_RETIRED_CLIENTS + 3):
            await stack.enter_async_context(pool.lease())
            await pool.retire()
        assert len(pool.retired) == MAX_RETIRED_CLIENTS
        assert [c.is_closed for c in made[:3]] == [True] * 3
        assert not any(c.is_closed for c in made[3:])
    assert pool.retired == () and all(c.is_closed for c in made)


async def test_a_response_already_read_by_a_custom_transport_is_translated() -> None:
    body = _normal_reply("openai").chunks[0]
    assert isinstance(body, bytes)

    def handle(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    provider = OpenAIProvider(
        api_key="sk-hostile-test-key-0001",
        base_url="http://upstream.invalid/v1",
        transport=httpx.MockTransport(handle),
    )
    events = [e async for e in provider.stream(request(MODEL["openai"]), CallContext())]
    await provider.aclose()
    assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
    assert events[-1].stop is not None
