"""The upstream fault matrix and the hostile-upstream checks of the other adapters, applied to
the gemini and vertex providers (tests/reliability/test_upstream_faults.py and
test_hostile_upstream.py: the same faults, the same assertions, Gemini's wire)."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest

from protocol_py.bounded_text import MAX_ERROR_MESSAGE_BYTES, encoded_size
from protocol_py.client.client import ModelClient
from protocol_py.providers.gemini.provider import GeminiProvider, VertexProvider
from protocol_py.providers.gemini.stream import MAX_RAW_JSON_BYTES
from protocol_py.providers.http.base import Timeouts
from protocol_py.providers.http.body import DECODE_STEP_BYTES, MAX_ERROR_BODY_BYTES
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.http.sse import MAX_SSE_LINE_BYTES
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ...reliability.test_hostile_upstream import (
    MIB,
    PEAK_LIMIT,
    _stream_measured,
    bomb,  # noqa: F401 (the fixture)
)
from ...reliability.test_upstream_faults import (
    FAST,
    FAULTS,
    REQUEST_ID,
    STALL,
    Bodies,
    Fault,
    _check,
    _through_adapter,
    _through_grpc,
)
from ...support.adapters import served_client
from ...support.stub_upstream import Reply, StubUpstream
from ..test_providers_stub import request
from ._gemini import kinds, sse

ADAPTERS = ["gemini", "vertex"]
MODEL = "gemini-2.5-flash"
KEY = "AIza-fault-test-key-0001"
_STATUS = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE"}


def _chunk(text: str, out: int, finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 12,
            "candidatesTokenCount": out,
            "totalTokenCount": 12 + out,
        },
        "modelVersion": "m-1",
        "responseId": REQUEST_ID,
    }


def _error(status: int, message: str) -> dict[str, Any]:
    error: dict[str, Any] = {"code": status, "message": message}
    if status in _STATUS:
        error["status"] = _STATUS[status]
    return {"error": error}


GEMINI = Bodies(
    headers={"content-type": "text/event-stream"},  # Google sends no request id header
    prefix=sse(_chunk("Hel", 1), _chunk("lo", 2)),
    rest=sse(_chunk("", 3, "STOP")),
    # a raw (not data-framed) error object after a STOP event: never a success (F5)
    error_finish=sse(_chunk("", 3, "STOP"))
    + json.dumps(_error(503, "The model is overloaded."), indent=2)
    .encode()
    .replace(b"\n", b"\r\n"),
    midstream_error=sse(_error(500, "upstream failed")),
    error_body=lambda status: json.dumps(_error(status, f"failure {status}")).encode(),
)


def _provider(adapter: str, url: str, timeouts: Timeouts) -> GeminiProvider:
    common: dict[str, Any] = {
        "api_key": KEY,  # Vertex in express mode: the faults, not the OAuth flow, are tested
        "base_url": url,
        "timeouts": timeouts,
        "retry": RetryPolicy(max_attempts=1),
    }
    return VertexProvider(**common) if adapter == "vertex" else GeminiProvider(**common)


async def _run(fault: Fault, adapter: str, *, grpc: bool) -> list[StreamEvent]:
    async with StubUpstream() as stub:
        stub.queue(fault.reply(GEMINI))
        provider = _provider(adapter, stub.url, STALL if fault.stall else FAST)
        try:
            if grpc:
                events: list[StreamEvent] = []
                async for got in _through_grpc(provider, MODEL):
                    events = got
            else:
                events = await _through_adapter(provider, MODEL)
            assert await stub.wait_all_closed(2.0), "the upstream connection was left open"
        finally:
            await provider.aclose()
    assert len(stub.seen) == 1
    return events


MATRIX = [
    pytest.param(fault, adapter, id=f"{fault.name}-{adapter}")
    for fault in FAULTS
    for adapter in ADAPTERS
]


@pytest.mark.parametrize(("fault", "adapter"), MATRIX)
async def test_upstream_fault_keeps_streamed_events_and_usage(fault: Fault, adapter: str) -> None:
    _check(await _run(fault, adapter, grpc=False), fault)


@pytest.mark.parametrize("fault", [pytest.param(f, id=f.name) for f in FAULTS[::2]])
async def test_upstream_fault_through_grpc_server(fault: Fault) -> None:
    _check(await _run(fault, "gemini", grpc=True), fault)


# --- hostile upstream -------------------------------------------------------------------------


def _normal() -> Reply:
    return Reply(headers=GEMINI.headers, chunks=[sse(_chunk("fine", 1, "STOP"))])


async def _still_serving(client: ModelClient, stub: StubUpstream) -> None:
    stub.queue(_normal())
    events = [e async for e in client.stream(request(MODEL), timeout=30)]
    assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
    assert events[-1].stop is not None, events[-1]


@pytest.mark.parametrize("times", [1, 2], ids=["gzip", "gzip-gzip"])
async def test_gzip_bomb_error_body_is_read_only_up_to_the_cap(times: int, bomb: bytes) -> None:  # noqa: F811
    body = bomb if times == 1 else zlib.compress(bomb, 9, wbits=31)
    coding = "gzip" if times == 1 else "gzip, gzip"
    async with StubUpstream() as stub:
        stub.queue(Reply(status=500, headers={"content-encoding": coding}, chunks=[body]))
        provider = _provider("gemini", stub.url, FAST)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL)
            assert kinds(events) == ["error"]
            error = events[0].error
            assert error is not None
            assert (error.kind, error.http_status, error.retryable) == (
                ErrorKind.TRANSIENT,
                500,
                True,
            )
            assert "\x00" not in error.message
            assert encoded_size(error.message) <= MAX_ERROR_MESSAGE_BYTES
            assert peak < MAX_ERROR_BODY_BYTES + 8 * DECODE_STEP_BYTES + 8 * MIB, peak
            await _still_serving(client, stub)
        await provider.aclose()


async def test_gzip_bomb_event_stream_ends_in_bounded_memory(bomb: bytes) -> None:  # noqa: F811
    async with StubUpstream() as stub:
        headers = {"content-type": "text/event-stream", "content-encoding": "gzip"}
        stub.queue(Reply(headers=headers, chunks=[bomb]))
        provider = _provider("gemini", stub.url, FAST)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL)
            assert kinds(events) == ["error"]
            error = events[0].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT and error.retryable
            assert "SSE line too long" in error.message
            assert peak < PEAK_LIMIT, peak
            await _still_serving(client, stub)
        await provider.aclose()


ENDLESS = [
    pytest.param(
        b"data: ",
        b"x" * 65536,
        f"SSE line too long: more than {MAX_SSE_LINE_BYTES} bytes without a newline",
        id="endless-data-line",
    ),
    pytest.param(
        b"{\r\n",
        b'  "k": "' + b"x" * 4096 + b'",\r\n',
        f"upstream sent a JSON value of more than {MAX_RAW_JSON_BYTES} characters outside the "
        "event stream",
        id="endless-raw-json-object",
    ),
]


@pytest.mark.parametrize(("head", "piece", "message"), ENDLESS)
async def test_endless_input_is_a_transient_error_keeping_streamed_events(
    head: bytes, piece: bytes, message: str
) -> None:
    async with StubUpstream() as stub:
        stub.queue(
            Reply(
                headers=GEMINI.headers, chunks=[sse(_chunk("fine", 1)), head], forever=(piece, 0.0)
            )
        )
        provider = _provider("gemini", stub.url, FAST)
        async for client in served_client(provider):
            events, peak = await _stream_measured(client, MODEL)
            assert kinds(events)[-2:] == ["usage", "error"]
            assert "".join(e.text_delta.text for e in events if e.text_delta is not None) == "fine"
            error = events[-1].error
            assert error is not None and error.kind == ErrorKind.TRANSIENT and error.retryable
            assert error.message == message
            assert peak < PEAK_LIMIT, peak
            assert await stub.wait_all_closed(10), "the upstream connection was not closed"
            await _still_serving(client, stub)
        await provider.aclose()
