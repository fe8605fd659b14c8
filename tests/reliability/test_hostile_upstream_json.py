"""Upstream JSON nested far past the bound, and invalid UTF-8 in a vendor delta.

A loopback stub upstream answers each adapter (openai, anthropic, gemini) with JSON nested 5,000
levels deep (``MAX_VENDOR_JSON_DEPTH`` is 128; ``json.loads`` alone raises RecursionError there):

* mid-stream, after a text delta: a TRANSIENT malformed-JSON error naming the bound, the text
  already streamed kept;
* as the body of an HTTP 500: classified by its status like any unreadable error body;

with no traceback in any log record at INFO or above, one record naming the failure, and the
server still serving a normal answer and a Describe afterwards. A text delta holding invalid
UTF-8 ends the stream the same way (docs/decisions.md#d34), with one WARNING.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from protocol_py.client.client import ModelClient
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.gemini.provider import GeminiProvider
from protocol_py.providers.http.base import INVALID_UTF8_MESSAGE, HTTPProvider
from protocol_py.providers.http.errors import RetryPolicy
from protocol_py.providers.http.vendor_json import MAX_VENDOR_JSON_DEPTH
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py_gen.model.v1 import ErrorKind, StreamEvent

from ..providers.test_providers_stub import request
from ..support.adapters import served_client
from ..support.stub_upstream import Reply, StubUpstream

ADAPTERS = ["openai", "anthropic", "gemini"]
MODEL = {"openai": "gpt-6-sol", "anthropic": "claude-sonnet-5-5", "gemini": "gemini-2.5-flash"}
DEPTH = 5000
DEEP = ("[" * DEPTH + "]" * DEPTH).encode()
"""A JSON value nested :data:`DEPTH` levels deep."""


def _provider(adapter: str, url: str) -> HTTPProvider:
    common: dict[str, Any] = {
        "api_key": "sk-hostile-json-key-0001",
        "base_url": url,
        "retry": RetryPolicy(max_attempts=1),
    }
    cls = {"openai": OpenAIProvider, "anthropic": AnthropicProvider, "gemini": GeminiProvider}
    provider: HTTPProvider = cls[adapter](**common)
    return provider


def _sse(adapter: str, text: str, *, finish: bool) -> bytes:
    """One SSE event carrying ``text``, and the events that end the answer when ``finish``."""
    if adapter == "anthropic":
        out = b""
        if text == "fine":
            out += (
                b'event: message_start\ndata: {"type":"message_start","message":{"model":"c",'
                b'"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
                b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                b'"content_block":{"type":"text","text":""}}\n\n'
            )
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}
        delta["delta"]["text"] = text  # type: ignore[index]
        out += (
            b"event: content_block_delta\ndata: "
            + json.dumps(delta, ensure_ascii=False).encode()
            + b"\n\n"
        )
        if finish:
            out += (
                b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
                b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
                b'"end_turn"},"usage":{"output_tokens":2}}\n\n'
                b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
            )
        return out
    if adapter == "gemini":
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
        if finish:
            candidate["finishReason"] = "STOP"
        chunk = {
            "candidates": [candidate],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1},
        }
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    chunks: list[dict[str, Any]] = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}]}
    ]
    if finish:
        chunks.append({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out = b"".join(b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if finish else b"")


def _stream(adapter: str, *chunks: bytes | float) -> Reply:
    return Reply(headers={"content-type": "text/event-stream"}, chunks=list(chunks))


async def _events(client: ModelClient, adapter: str) -> list[StreamEvent]:
    return [e async for e in client.stream(request(MODEL[adapter]), timeout=30)]


def _text(events: list[StreamEvent]) -> str:
    return "".join(e.text_delta.text for e in events if e.text_delta is not None)


async def _still_serving(client: ModelClient, stub: StubUpstream, adapter: str) -> None:
    stub.queue(_stream(adapter, _sse(adapter, "fine", finish=True)))
    events = await _events(client, adapter)
    assert _text(events) == "fine"
    assert events[-1].stop is not None, events[-1]
    assert (await client.describe(timeout=10)).name


def _no_traceback(records: list[logging.LogRecord]) -> None:
    for record in records:
        if record.levelno >= logging.INFO:
            assert record.exc_info is None, record.getMessage()
            assert "Traceback" not in record.getMessage(), record.getMessage()[:300]
            assert "RecursionError" not in record.getMessage(), record.getMessage()[:300]


def _midstream_deep_event(adapter: str) -> Reply:
    return _stream(adapter, _sse(adapter, "fine", finish=False), b"data: " + DEEP + b"\n\n")


def _check_midstream_deep_event(events: list[StreamEvent], _: list[logging.LogRecord]) -> None:
    assert _text(events) == "fine"
    error = events[-1].error
    assert error is not None, events[-1]
    assert (error.kind, error.retryable) == (ErrorKind.TRANSIENT, True)
    assert error.message.startswith("malformed JSON in an SSE data line"), error.message
    assert f"nested deeper than {MAX_VENDOR_JSON_DEPTH} levels" in error.message


def _deep_error_body(_: str) -> Reply:
    body = b'{"error": {"message": "x", "detail": ' + DEEP + b"}}"
    return Reply(status=500, headers={"content-type": "application/json"}, chunks=[body])


def _check_deep_error_body(events: list[StreamEvent], _: list[logging.LogRecord]) -> None:
    assert len(events) == 1, events
    error = events[0].error
    assert error is not None, events[0]
    assert (error.kind, error.http_status, error.retryable) == (ErrorKind.TRANSIENT, 500, True)
    assert "internal provider error" not in error.message


def _deep_whole_body(_: str) -> Reply:
    return Reply(headers={"content-type": "application/json"}, chunks=[DEEP])


def _check_deep_whole_body(events: list[StreamEvent], _: list[logging.LogRecord]) -> None:
    error = events[-1].error
    assert error is not None, events[-1]
    assert "internal provider error" not in error.message, error.message


def _invalid_utf8_delta(adapter: str) -> Reply:
    bad = _sse(adapter, "MARK", finish=True).replace(b"MARK", b"caf\xe9 \xff")
    return _stream(adapter, _sse(adapter, "fine", finish=False), bad)


def _check_invalid_utf8_delta(events: list[StreamEvent], records: list[logging.LogRecord]) -> None:
    assert _text(events) == "fine"  # the damaged delta is not passed on
    error = events[-1].error
    assert error is not None, events[-1]
    assert (error.kind, error.retryable) == (ErrorKind.TRANSIENT, True)
    assert error.message == INVALID_UTF8_MESSAGE
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert [r.levelno for r in warnings] == [logging.WARNING]


def _multibyte_split_across_chunks(adapter: str) -> Reply:
    body = _sse(adapter, "fine", finish=False) + _sse(adapter, " caf\u00e9 \U0001f600", finish=True)
    cut = body.index("\U0001f600".encode()) + 2  # inside the four bytes of the emoji
    cut_e = body.index("\u00e9".encode()) + 1  # between the two bytes of the e-acute
    return _stream(adapter, body[:cut_e], 0.01, body[cut_e:cut], 0.01, body[cut:])


def _check_multibyte_split_across_chunks(
    events: list[StreamEvent], _: list[logging.LogRecord]
) -> None:
    assert _text(events) == "fine caf\u00e9 \U0001f600"
    assert events[-1].stop is not None, events[-1]


@dataclass(frozen=True)
class Case:
    """One hostile upstream answer and what the client must see of it."""

    reply: Callable[[str], Reply]
    check: Callable[[list[StreamEvent], list[logging.LogRecord]], None]


CASES = {
    "deeply_nested_event_midstream_is_a_transient_malformed_json_error_keeping_text": Case(
        _midstream_deep_event, _check_midstream_deep_event
    ),
    "deeply_nested_error_body_is_classified_by_its_status": Case(
        _deep_error_body, _check_deep_error_body
    ),
    "deeply_nested_whole_json_body_is_not_an_internal_error": Case(
        _deep_whole_body, _check_deep_whole_body
    ),
    "invalid_utf8_in_a_text_delta_is_a_transient_error_with_one_warning": Case(
        _invalid_utf8_delta, _check_invalid_utf8_delta
    ),
    "multibyte_characters_split_across_network_chunks_stream_intact": Case(
        _multibyte_split_across_chunks, _check_multibyte_split_across_chunks
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_hostile_upstream_answer_is_handled_and_the_server_keeps_serving(
    adapter: str, case: Case, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with StubUpstream() as stub:
        stub.queue(case.reply(adapter))
        provider = _provider(adapter, stub.url)
        async for client in served_client(provider):
            case.check(await _events(client, adapter), caplog.records)
            _no_traceback(caplog.records)
            await _still_serving(client, stub, adapter)
        await provider.aclose()
