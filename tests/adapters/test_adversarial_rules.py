"""Rules pinned by an adversarial review of the adapters: secrets never leave the adapter,
retry hints are parsed by the HTTP grammar and fit a Duration, OpenAI tool-call keying,
Anthropic blocks left open, CONTEXT_OVERFLOW scope, 2xx JSON bodies, documents, cache markers,
metadata, ``[DONE]`` without a finish reason and thinking-only replays."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from typing import Any

import betterproto2
import pytest

from protocol_py.errors import InvalidValueError
from protocol_py.provider import ProviderError, ProviderStartError
from protocol_py.providers.anthropic.provider import AnthropicProvider
from protocol_py.providers.anthropic.request import build_anthropic_body
from protocol_py.providers.http.base import HTTPProvider
from protocol_py.providers.http.errors import (
    MAX_DURATION_S,
    RetryPolicy,
    duration_from_seconds,
    error_from_http,
    openai_rate_limits,
    parse_retry_after,
    redact,
    secret_values,
)
from protocol_py.providers.openai.provider import DeepSeekProvider, OpenAIProvider
from protocol_py.providers.openai.request import OpenAICompat, build_openai_body
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    DocumentBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
)
from protocol_py_gen.model.v1 import (
    CacheBreakpoint,
    CachingSpec,
    CountTokensRequest,
    ErrorKind,
    ModelError,
    ModelSpec,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    ThinkingReplay,
    ThinkingSpec,
)

from ._stub import Reply, StubUpstream
from ._support import kinds, translate_body

KEY = "TOPSECRET-QWERTY-0123456789"  # not sk-shaped, like vLLM / Ollama / gateway keys
MODEL = {"openai": "gpt-6-sol", "deepseek": "deepseek-flash", "anthropic": "claude-sonnet-5-5"}
PROVIDERS: dict[str, type[HTTPProvider]] = {
    "openai": OpenAIProvider,
    "deepseek": DeepSeekProvider,
    "anthropic": AnthropicProvider,
}
SSE = {"content-type": "text/event-stream"}


def value(event: StreamEvent) -> Any:
    return betterproto2.which_one_of(event, "event")[1]


def user(text: str, mid: str = "u1") -> Message:
    return Message(role=Role.USER, id=mid, content=[ContentBlock(text=TextBlock(text=text))])


def request(model: str) -> StreamCompletionRequest:
    return StreamCompletionRequest(model_id=model, messages=[user("hello")])


def make(vendor: str, url: str) -> HTTPProvider:
    return PROVIDERS[vendor](api_key=KEY, base_url=url, retry=RetryPolicy(max_attempts=1))


async def collect(provider: HTTPProvider, model: str) -> list[StreamEvent]:
    return [e async for e in provider.stream(request(model), CallContext())]


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    data = json.dumps(body).encode()
    return Reply(
        status=status,
        headers={"content-type": "application/json", "content-length": str(len(data))}
        | (headers or {}),
        chunks=[data],
    )


def sse_body(*events: str) -> bytes:
    return "".join(e + "\n\n" for e in events).encode()


# -- 1. secrets ------------------------------------------------------------------------------


_ECHO_401 = {
    "openai": {
        "error": {
            "message": f"Incorrect API key provided: {KEY}. You can find your API key at ...",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    },
    "deepseek": {
        "error": {
            "message": f"Authentication Fails, Your api key: {KEY} is invalid",
            "type": "authentication_error",
        }
    },
    "anthropic": {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    },
}


@pytest.mark.parametrize("vendor", ["openai", "deepseek", "anthropic"])
async def test_api_key_echoed_by_a_401_is_redacted_from_the_error_and_logs(
    vendor: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401[vendor]))
        provider = make(vendor, stub.url)
        try:
            events = await collect(provider, MODEL[vendor])
        finally:
            await provider.aclose()
    assert kinds(events) == ["error"]
    err = value(events[0])
    assert err.kind == ErrorKind.AUTHENTICATION
    assert KEY not in err.message and "<redacted>" in err.message
    assert KEY not in bytes(err).decode("utf-8", "replace")
    assert KEY not in caplog.text


@pytest.mark.parametrize(
    "line",
    [
        'data: {"error":{"message":"bad key %s","type":"invalid_request_error"}}',
        'event: error\ndata: {"error":{"message":"key %s rejected"}}',
    ],
)
async def test_api_key_echoed_in_a_midstream_error_is_redacted(line: str) -> None:
    chunk = 'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}'
    body = sse_body(chunk, line % KEY)
    async with StubUpstream() as stub:
        stub.queue(Reply(headers=SSE, chunks=[body]))
        provider = make("openai", stub.url)
        try:
            events = await collect(provider, MODEL["openai"])
        finally:
            await provider.aclose()
    assert kinds(events)[-2:] == ["text_delta", "error"]
    assert KEY not in value(events[-1]).message


async def test_api_key_echoed_by_anthropic_count_tokens_401_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401["anthropic"]))
        provider = make("anthropic", stub.url)
        try:
            with pytest.raises(ProviderError) as info:
                await provider.count_tokens(
                    CountTokensRequest(model_id=MODEL["anthropic"], messages=[user("hi")])
                )
        finally:
            await provider.aclose()
    assert info.value.error.kind == ErrorKind.AUTHENTICATION
    for text in (info.value.error.message, str(info.value), repr(info.value.args)):
        assert KEY not in text
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert KEY not in caplog.text


def test_redact_removes_the_key_and_credential_header_values() -> None:
    secrets = secret_values("k3y-Value", {"Authorization": "Bearer tok-123", "x-api-key": "xk"})
    assert set(secrets) >= {"k3y-Value", "Bearer tok-123", "tok-123", "xk"}
    text = "a k3y-Value b Bearer tok-123 c tok-123 d sk-abcdefgh1234 e"
    assert redact(text, secrets) == "a <redacted> b <redacted> c <redacted> d <redacted> e"


async def test_an_unexpected_exception_never_escapes_with_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = OpenAIProvider(api_key=KEY, base_url="http://127.0.0.1:9")

    def boom(*_: object) -> dict[str, Any]:
        raise RuntimeError(f"exploded while holding {KEY}")

    provider.build_body = boom  # type: ignore[method-assign]
    try:
        with pytest.raises(ProviderError) as info:
            await collect(provider, MODEL["openai"])
    finally:
        await provider.aclose()
    assert info.value.error.kind == ErrorKind.PERMANENT
    assert KEY not in str(info.value) and KEY not in caplog.text
    assert "RuntimeError" in caplog.text


# -- 2/3/14. retry hints ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "99999999999999999999"}, float(MAX_DURATION_S)),
        ({"retry-after-ms": "1" + "0" * 30}, float(MAX_DURATION_S)),
        ({"retry-after": "9" * 400}, float(MAX_DURATION_S)),
        ({"retry-after": "1e200"}, None),
        ({"retry-after-ms": "1e15"}, None),
        ({"retry-after": "1_0"}, None),
        ({"retry-after-ms": "2_500"}, None),
        ({"retry-after": "+2"}, None),
        ({"retry-after": "0x10"}, None),
        ({"retry-after": "\uff11\uff10"}, None),  # full-width digits are not HTTP DIGITs
        ({"retry-after": " 2 "}, 2.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "1_0"}, 0.25),
        ({"retry-after-ms": "1_0", "retry-after": "3"}, 3.0),
    ],
)
def test_retry_after_follows_the_http_number_grammar_and_duration_range(
    headers: dict[str, str], expected: float | None
) -> None:
    assert parse_retry_after(headers) == expected


@pytest.mark.parametrize("raw", ["99999999999999999999", "1e200", "1" + "0" * 40])
def test_huge_retry_after_is_rate_limited_not_retried_and_serializable(raw: str) -> None:
    err = error_from_http(
        429, b'{"error":{"message":"slow down"}}', {"retry-after": raw}, request_id_header="x"
    )
    assert (err.kind, err.retryable) == (ErrorKind.RATE_LIMITED, True)
    if err.retry_after is not None:
        assert err.retry_after.total_seconds() <= MAX_DURATION_S
        assert RetryPolicy().delay(1, err) is None  # not waited for
    decoded = ModelError.parse(bytes(err))
    assert decoded.kind == ErrorKind.RATE_LIMITED


def test_duration_from_seconds_clamps_to_the_protobuf_range() -> None:
    assert duration_from_seconds(1e300) == timedelta(seconds=MAX_DURATION_S)
    assert duration_from_seconds(float("inf")) == timedelta(seconds=MAX_DURATION_S)
    assert duration_from_seconds(-1e300) == timedelta(seconds=-MAX_DURATION_S)
    assert duration_from_seconds(float("nan")) == timedelta(0)
    assert duration_from_seconds(2.5) == timedelta(seconds=2.5)


def test_rate_limit_headers_take_only_plain_digits_and_clamp_resets() -> None:
    snaps = openai_rate_limits(
        {
            "x-ratelimit-limit-requests": "1_000",
            "x-ratelimit-remaining-requests": "99999999999999999999999",
            "x-ratelimit-reset-requests": "99999999999999h",
            "x-ratelimit-limit-tokens": "500",
        }
    )
    assert snaps[0].limit is None and snaps[0].remaining is None
    assert snaps[0].resets_after == timedelta(seconds=MAX_DURATION_S)
    assert snaps[1].limit == 500


# -- 8. CONTEXT_OVERFLOW ------------------------------------------------------------------------

_ANTHROPIC_400 = "invalid_request_error"


@pytest.mark.parametrize(
    ("status", "vtype", "message", "expected"),
    [
        (400, _ANTHROPIC_400, "tools: Number of tools exceeds the maximum of 128", "INVALID"),
        (
            400,
            _ANTHROPIC_400,
            "max_tokens: 100000 exceeds the maximum allowed value of 64000 for this model",
            "INVALID",
        ),
        (400, _ANTHROPIC_400, "Image exceeds the maximum size of 5 MB", "INVALID"),
        (400, _ANTHROPIC_400, "stop: too many stop sequences; exceeds the maximum of 4", "INVALID"),
        (
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
            "INVALID",
        ),
        (400, None, "string too long. Expected a string with maximum length 1048576", "INVALID"),
        (400, _ANTHROPIC_400, "prompt is too long: 210000 tokens > 200000 maximum", "OVERFLOW"),
        (
            400,
            _ANTHROPIC_400,
            "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000",
            "OVERFLOW",
        ),
        (400, None, "This model's maximum context length is 4096 tokens.", "OVERFLOW"),
        (400, None, "This model's maximum prompt length is 131072 but got 140000", "OVERFLOW"),
        (400, None, "Input tokens exceed the configured limit of 272000 tokens.", "OVERFLOW"),
        (400, None, "the input length exceeds the context length", "OVERFLOW"),
        (
            400,
            None,
            "The input token count (1200000) exceeds the maximum number of tokens allowed",
            "OVERFLOW",
        ),
        (400, None, "Requested 9000 tokens which exceeds the model's context window", "OVERFLOW"),
    ],
)
def test_context_overflow_only_when_the_prompt_did_not_fit(
    status: int, vtype: str | None, message: str, expected: str
) -> None:
    err: dict[str, Any] = {"message": message}
    if vtype:
        err["type"] = vtype
    body = json.dumps({"type": "error", "error": err}).encode()
    got = error_from_http(status, body, {}, request_id_header="request-id", anthropic=True)
    want = ErrorKind.CONTEXT_OVERFLOW if expected == "OVERFLOW" else ErrorKind.INVALID_REQUEST
    assert got.kind == want, message


def test_context_length_exceeded_code_is_overflow_whatever_the_message() -> None:
    body = b'{"error":{"message":"Please reduce the length.","code":"context_length_exceeded"}}'
    got = error_from_http(400, body, {}, request_id_header="x-request-id")
    assert got.kind == ErrorKind.CONTEXT_OVERFLOW


# -- 4/5/6. OpenAI tool-call keying -------------------------------------------------------------


def tc(
    index: int | None, call_id: str | None, name: str | None, args: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "function", "function": {}}
    if index is not None:
        entry["index"] = index
    if call_id is not None:
        entry["id"] = call_id
    if name is not None:
        entry["function"]["name"] = name
    if args is not None:
        entry["function"]["arguments"] = args
    return entry


def oa_chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> str:
    body: dict[str, Any] = {"id": "c1", "model": "m"}
    body["choices"] = (
        [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    )
    body.update(extra)
    return "data: " + json.dumps(body)


def oa(*events: str, **settings: Any) -> list[StreamEvent]:
    return translate_body("openai", 200, {"x-request-id": "req_1"}, sse_body(*events), **settings)


def calls_of(events: list[StreamEvent]) -> list[tuple[str, str, str]]:
    acc = accumulate(events)
    return [
        (b.tool_use.id, b.tool_use.name, json.dumps(b.tool_use.input.to_dict()))
        for b in acc.message.content
        if b.tool_use is not None
    ]


def test_same_tool_call_id_at_a_second_index_continues_the_call() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, "call_a", "f", '{"a":')]}),
        oa_chunk({"tool_calls": [tc(1, "call_a", "f", "1}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    assert kinds(events).count("tool_call_start") == 1
    assert kinds(events)[-1] == "stop"
    assert calls_of(events) == [("call_a", "f", '{"a": 1.0}')]  # Struct numbers are doubles


def test_a_late_real_id_is_adopted_by_a_call_that_arrived_without_one() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, None, "f", '{"a":')]}),
        oa_chunk({"tool_calls": [tc(0, "call_late", None, "1}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    assert kinds(events).count("tool_call_start") == 1
    start = next(value(e) for e in events if kinds([e]) == ["tool_call_start"])
    assert (start.id, start.name) == ("call_late", "f")
    assert value(events[-1]).reason == StopReason.TOOL_USE
    assert [c[:2] for c in calls_of(events)] == [("call_late", "f")]


def test_a_new_id_on_the_index_of_a_nameless_call_does_not_merge_into_it() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, "call_a", None, "{}")]}),
        oa_chunk({"tool_calls": [tc(0, "call_b", "g", "{}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    # call_a never got a name: it is reported, never renamed "g" with arguments "{}{}"
    assert kinds(events)[-1] == "error"
    err = value(events[-1])
    assert err.kind == ErrorKind.TRANSIENT and "call_a" in err.message and "name" in err.message
    assert "tool_call_start" not in kinds(events)
    accumulate(events)  # D12-valid


def test_a_new_id_on_the_same_index_opens_a_new_call_after_a_named_one() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, "call_a", "f", "{}")]}),
        oa_chunk({"tool_calls": [tc(0, "call_b", "g", '{"x":1}')]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    assert [c[:2] for c in calls_of(events)] == [("call_a", "f"), ("call_b", "g")]


def test_an_id_reused_by_a_new_named_call_after_its_call_closed_is_a_new_call() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, "call_a", "f", "{}")]}),
        oa_chunk({"tool_calls": [tc(0, "call_b", "g", "{}")]}),
        oa_chunk({"tool_calls": [tc(1, "call_a", "f", "{}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    calls = calls_of(events)
    assert [c[1:] for c in calls] == [("f", "{}"), ("g", "{}"), ("f", "{}")]
    assert [c[0] for c in calls[:2]] == ["call_a", "call_b"]
    assert calls[2][0].startswith("call_") and calls[2][0] not in ("call_a", "call_b")
    assert kinds(events)[-1] == "stop"


def test_a_fragment_for_an_id_whose_call_closed_is_an_error_not_a_second_start() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, "call_a", "f", "{")]}),
        oa_chunk({"tool_calls": [tc(0, "call_b", "g", "{}")]}),
        oa_chunk({"tool_calls": [tc(1, "call_a", None, "}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    assert kinds(events).count("tool_call_start") <= 2
    assert kinds(events)[-1] == "error"
    accumulate(events)


def test_id_less_server_streams_a_call_from_its_second_entry() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, None, "f", '{"a"')]}),
        oa_chunk({"tool_calls": [tc(0, None, None, ":")]}),
        oa_chunk({"content": "x"}),
        oa_chunk({"tool_calls": [tc(0, "call_real", None, "1}")]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    assert kinds(events)[2:6] == [
        "tool_call_start",
        "tool_call_delta",
        "tool_call_delta",
        "text_delta",
    ]
    synthesized = value(events[2]).id
    assert re.fullmatch(r"call_[0-9A-HJKMNP-TV-Z]{26}", synthesized)  # call_ + a ULID
    # the real id that came later continues the started call instead of splitting it
    assert kinds(events).count("tool_call_start") == 1
    assert calls_of(events) == [(synthesized, "f", '{"a": 1.0}')]


def test_echoed_key_in_another_letter_case_is_redacted() -> None:
    assert redact("key topsecret-qwerty-0123456789 bad", [KEY]) == "key <redacted> bad"


def test_id_less_calls_get_distinct_synthesized_ids_at_finish() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, None, "f", "{}"), tc(1, None, "g", '{"b":2}')]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    calls = calls_of(events)
    assert [c[1] for c in calls] == ["f", "g"] and calls[0][0] != calls[1][0]
    assert all(c[0] for c in calls)


# -- 7/16. Anthropic blocks left open --------------------------------------------------------

_AH = {"request-id": "req_1"}


def an(etype: str, **obj: Any) -> str:
    return f"event: {etype}\ndata: " + json.dumps({"type": etype, **obj})


_START = an(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-x",
        "usage": {"input_tokens": 10, "output_tokens": 1},
    },
)
_TOOL_DELTA = an("message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None})


def tool_block(index: int, call_id: str, name: str = "t") -> str:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return an("content_block_start", index=index, content_block=block)


def json_delta(index: int, partial: str) -> str:
    return an(
        "content_block_delta",
        index=index,
        delta={"type": "input_json_delta", "partial_json": partial},
    )


def anth(*events: str) -> list[StreamEvent]:
    return translate_body("anthropic", 200, _AH, sse_body(*events))


def test_anthropic_message_stop_closes_a_tool_call_left_open() -> None:
    events = anth(
        _START, tool_block(0, "toolu_1"), json_delta(0, '{"q":1}'), _TOOL_DELTA, an("message_stop")
    )
    assert kinds(events)[-4:] == ["tool_call_delta", "tool_call_done", "usage", "stop"]
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason == StopReason.TOOL_USE
    assert [b.tool_use.id for b in result.message.content if b.tool_use] == ["toolu_1"]


def test_anthropic_message_stop_with_invalid_open_arguments_is_an_error() -> None:
    events = anth(
        _START, tool_block(0, "toolu_1"), json_delta(0, '{"q":'), _TOOL_DELTA, an("message_stop")
    )
    assert kinds(events)[-1] == "error" and "toolu_1" in value(events[-1]).message
    accumulate(events)


def test_anthropic_reused_block_index_closes_the_open_block_first() -> None:
    events = anth(
        _START,
        tool_block(0, "toolu_1"),
        tool_block(0, "toolu_2", "u"),
        an("content_block_stop", index=0),
        _TOOL_DELTA,
        an("message_stop"),
    )
    tool_kinds = [k for k in kinds(events) if k.startswith("tool")]
    assert tool_kinds == ["tool_call_start", "tool_call_done", "tool_call_start", "tool_call_done"]
    result = accumulate(events)
    assert [b.tool_use.id for b in result.message.content if b.tool_use] == ["toolu_1", "toolu_2"]


def test_anthropic_signature_that_arrived_before_a_cut_is_kept() -> None:
    events = anth(
        _START,
        an("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
        an("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
        an("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "SIG=="}),
    )
    # content, then the usage message_start reported (issue 8 item 9), then the error
    assert kinds(events)[-4:] == ["thinking_delta", "thinking_signature", "usage", "error"]
    assert value(events[-3]).signature == b"SIG=="
    assert value(events[-1]).kind == ErrorKind.TRANSIENT
    result = accumulate(events)
    thinking = result.message.content[0].thinking
    assert thinking is not None and thinking.signature == b"SIG=="


def test_anthropic_stop_sequence_without_the_sequence_is_an_inferred_end_turn() -> None:
    events = anth(
        _START,
        an("message_delta", delta={"stop_reason": "stop_sequence", "stop_sequence": None}),
        an("message_stop"),
    )
    stop = value(events[-1])
    assert (stop.reason, stop.model_affirmed, stop.vendor_reason) == (
        StopReason.END_TURN,
        False,
        "stop_sequence",
    )
    assert not stop.matched_stop_sequence
    accumulate(events)


# -- 9. HTTP 2xx with a JSON body ------------------------------------------------------------


async def _stream_reply(vendor: str, reply: Reply) -> list[StreamEvent]:
    async with StubUpstream() as stub:
        stub.queue(reply)
        provider = make(vendor, stub.url)
        try:
            return await collect(provider, MODEL[vendor])
        finally:
            await provider.aclose()


async def test_http_200_json_error_object_is_classified() -> None:
    body = {"error": {"message": "model 'x' not found, try pulling it first", "code": 404}}
    events = await _stream_reply("openai", json_reply(200, body))
    err = value(events[-1])
    assert (err.kind, err.retryable) == (ErrorKind.NOT_FOUND, False)
    assert err.message == "model 'x' not found, try pulling it first"


async def test_http_200_whole_chat_completion_is_translated() -> None:
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "whole answer",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":1}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    events = await _stream_reply("openai", json_reply(200, body))
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason == StopReason.TOOL_USE
    assert result.message.content[0].text is not None
    assert result.message.content[0].text.text == "whole answer"
    assert result.usage is not None and (result.usage.input_tokens, result.usage.output_tokens) == (
        3,
        2,
    )
    assert [b.tool_use.id for b in result.message.content if b.tool_use] == ["call_1"]


async def test_http_200_whole_anthropic_message_is_translated() -> None:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "t", "signature": "S"},
            {"type": "text", "text": "hello"},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    events = await _stream_reply("anthropic", json_reply(200, body))
    result = accumulate(events)
    assert result.stop is not None and result.stop.reason == StopReason.END_TURN
    assert [betterproto2.which_one_of(b, "block")[0] for b in result.message.content] == [
        "thinking",
        "text",
    ]


async def test_http_200_anthropic_json_error_is_classified() -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = await _stream_reply("anthropic", json_reply(200, body))
    assert value(events[-1]).kind == ErrorKind.OVERLOADED


async def test_http_200_html_body_is_a_permanent_error_naming_the_content_type() -> None:
    page = b"<html><body>captive portal</body></html>"
    reply = Reply(
        headers={"content-type": "text/html", "content-length": str(len(page))}, chunks=[page]
    )
    events = await _stream_reply("openai", reply)
    err = value(events[-1])
    assert (err.kind, err.retryable) == (ErrorKind.PERMANENT, False)
    assert "text/html" in err.message


# -- 13/17. metadata and [DONE] ----------------------------------------------------------------


def test_metadata_comes_with_the_first_chunk_that_names_the_model() -> None:
    first = 'data: {"id":"c1","model":"","choices":[{"index":0,"delta":{"role":"assistant"}}]}'
    events = oa(first, oa_chunk({"content": "hi"}), oa_chunk({}, "stop"), "data: [DONE]")
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "stop"]
    assert value(events[1]).actual_model == "m"
    accumulate(events)


def test_metadata_without_a_model_still_carries_the_other_fields() -> None:
    first = (
        'data: {"id":"c1","model":"","system_fingerprint":"fp_1",'
        '"choices":[{"index":0,"delta":{"content":"a"}}]}'
    )
    events = oa(
        first,
        'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        "data: [DONE]",
    )
    meta = value(events[1])
    assert (meta.actual_model, meta.system_fingerprint) == (None, "fp_1")


def test_done_without_finish_reason_is_a_transient_error_keeping_content() -> None:
    events = oa(oa_chunk({"content": "partial"}), "data: [DONE]")
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "error"]
    assert value(events[-1]).kind == ErrorKind.TRANSIENT
    assert kinds(oa("data: [DONE]")) == ["stream_start", "error"]


def test_done_without_finish_reason_ends_the_turn_when_configured() -> None:
    events = oa(oa_chunk({"content": "partial"}), "data: [DONE]", done_ends_turn=True)
    stop = value(events[-1])
    assert (stop.reason, stop.model_affirmed) == (StopReason.END_TURN, False)


# -- 10/11/12/18. request translation -----------------------------------------------------------


def model_spec(
    markers: bool = False, replay: ThinkingReplay = ThinkingReplay.UNSPECIFIED
) -> ModelSpec:
    return ModelSpec(
        id="m",
        max_output_tokens=1000,
        caching=CachingSpec(explicit_markers=True) if markers else None,
        thinking=ThinkingSpec(replay=replay),
    )


def doc(media_type: str, data: bytes, filename: str = "") -> ContentBlock:
    return ContentBlock(document=DocumentBlock(media_type=media_type, data=data, filename=filename))


def doc_request(*blocks: ContentBlock) -> StreamCompletionRequest:
    return StreamCompletionRequest(
        model_id="m",
        messages=[
            Message(
                role=Role.USER,
                id="u1",
                content=[*blocks, ContentBlock(text=TextBlock(text="read"))],
            )
        ],
    )


def test_anthropic_documents_use_the_text_source_for_text_and_base64_for_pdf() -> None:
    body = build_anthropic_body(
        doc_request(
            doc("text/plain", "plain é".encode(), "a.txt"),
            doc("text/markdown; charset=utf-8", b"# md"),
            doc("application/pdf", b"%PDF-1.4", "b.pdf"),
        ),
        model_spec(),
    )
    blocks = body["messages"][0]["content"]
    assert blocks[0] == {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "plain é"},
        "title": "a.txt",
    }
    assert blocks[1]["source"] == {"type": "text", "media_type": "text/plain", "data": "# md"}
    assert blocks[2]["source"] == {
        "type": "base64",
        "media_type": "application/pdf",
        "data": "JVBERi0xLjQ=",
    }


def test_openai_sends_file_parts_for_pdf_only_and_text_documents_as_text() -> None:
    body = build_openai_body(
        doc_request(
            doc("text/csv", b"a,b\n1,2", "t.csv"), doc("application/pdf", b"%PDF", "b.pdf")
        ),
        model_spec(),
        OpenAICompat(),
    )
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "a,b\n1,2"}
    assert parts[1] == {
        "type": "file",
        "file": {"filename": "b.pdf", "file_data": "data:application/pdf;base64,JVBERg=="},
    }


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_unsupported_or_undecodable_documents_are_rejected_naming_the_field(vendor: str) -> None:
    for block in (
        doc("application/vnd.openxmlformats-officedocument.wordprocessingml.document", b"PK"),
        doc("text/plain", b"\xff\xfe\xfa"),
    ):
        with pytest.raises(InvalidValueError, match=r"messages\[0\]\.content\[0\]\.document"):
            if vendor == "openai":
                build_openai_body(doc_request(block), model_spec(), OpenAICompat())
            else:
                build_anthropic_body(doc_request(block), model_spec())


def test_cache_marker_never_lands_on_a_thinking_block() -> None:
    assistant = Message(
        role=Role.ASSISTANT,
        id="a1",
        content=[
            ContentBlock(text=TextBlock(text="ok")),
            ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S")),
            ContentBlock(redacted_thinking=RedactedThinkingBlock(data=b"R")),
        ],
    )
    only_thinking = Message(
        role=Role.ASSISTANT,
        id="a2",
        content=[ContentBlock(thinking=ThinkingBlock(text="t", signature=b"S"))],
    )
    req = StreamCompletionRequest(
        model_id="m",
        messages=[user("q"), assistant, user("q2", "u2"), only_thinking, user("q3", "u3")],
        cache_breakpoints=[
            CacheBreakpoint(after_message_index=1),
            CacheBreakpoint(after_message_index=3),
        ],
    )
    msgs = build_anthropic_body(req, model_spec(markers=True, replay=ThinkingReplay.ALL))[
        "messages"
    ]
    assert [("cache_control" in b, b["type"]) for b in msgs[1]["content"]] == [
        (True, "text"),
        (False, "thinking"),
        (False, "redacted_thinking"),
    ]
    assert all("cache_control" not in b for b in msgs[3]["content"])


@pytest.mark.parametrize(
    ("compat", "replay"),
    [
        (OpenAICompat(), ThinkingReplay.OMIT),
        (OpenAICompat(), ThinkingReplay.ALL),
        (OpenAICompat(), ThinkingReplay.TOOL_TURNS),
    ],
)
def test_openai_thinking_only_assistant_turn_is_not_replayed(
    compat: OpenAICompat, replay: ThinkingReplay
) -> None:
    interrupted = Message(
        role=Role.ASSISTANT, id="a", content=[ContentBlock(thinking=ThinkingBlock(text="partial"))]
    )
    req = StreamCompletionRequest(model_id="m", messages=[user("q"), interrupted, user("q2", "u2")])
    body = build_openai_body(req, model_spec(replay=replay), compat)
    assert body["messages"] == [{"role": "user", "content": "q"}, {"role": "user", "content": "q2"}]


async def test_api_key_echoed_to_discover_is_redacted() -> None:
    async with StubUpstream() as stub:
        stub.queue(json_reply(401, _ECHO_401["openai"]))
        provider = OpenAIProvider(api_key=KEY, base_url=stub.url, discover=True)
        try:
            with pytest.raises(ProviderStartError) as info:
                await provider.start()
        finally:
            await provider.aclose()
    assert "<redacted>" in str(info.value) and KEY not in str(info.value)


async def test_http_200_vllm_error_object_uses_its_code_as_status() -> None:
    body = {"object": "error", "message": "bad temperature", "type": "BadRequestError", "code": 400}
    events = await _stream_reply("openai", json_reply(200, body))
    err = value(events[-1])
    assert (err.kind, err.http_status, err.message) == (
        ErrorKind.INVALID_REQUEST,
        400,
        "bad temperature",
    )


def test_anthropic_arguments_for_a_block_never_started_are_an_error() -> None:
    events = anth(_START, json_delta(3, '{"q":1}'), _TOOL_DELTA, an("message_stop"))
    assert kinds(events)[-1] == "error" and "block 3" in value(events[-1]).message
    accumulate(events)
