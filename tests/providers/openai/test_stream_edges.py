"""Edge shapes beyond the transcripts: mid-stream errors of both kinds, DeepSeek's resource
finish reason, server tools, moderation flags, usage conventions and malformed data."""

from __future__ import annotations

import json
from typing import Any

import betterproto2

from protocol_py.providers.openai.stream import map_openai_usage
from protocol_py_gen.model.v1 import ErrorKind, SafetyKind, StopReason, StreamEvent

from ...support.adapters import kinds, lines_to_bytes, load_case, translate_body

OK = {"content-type": "text/event-stream"}


def oa_chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
    body = {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    body.update(extra)
    return "data: " + json.dumps(body)


def oa(lines: list[str]) -> list[StreamEvent]:
    framed: list[str] = []
    for line in lines:
        framed += [line, ""]
    return translate_body("openai", 200, {"x-request-id": "req_1"}, lines_to_bytes(framed))


def value(event: StreamEvent) -> Any:
    return betterproto2.which_one_of(event, "event")[1]


def test_openai_data_error_midstream_is_terminal() -> None:
    events = oa(
        [
            oa_chunk({"content": "Hel"}),
            'data: {"error":{"message":"The server had an error","type":"server_error"}}',
            oa_chunk({"content": "never"}, "stop"),
            "data: [DONE]",
        ]
    )
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "error"]
    err = value(events[-1])
    assert (err.kind, err.retryable, err.vendor_code) == (ErrorKind.TRANSIENT, True, "server_error")
    assert err.provider_request_id == "req_1"


def test_openai_midstream_context_overflow_by_message() -> None:
    events = oa(
        ['data: {"error":{"message":"This model\'s maximum context length is 8192 tokens"}}']
    )
    assert value(events[-1]).kind == ErrorKind.CONTEXT_OVERFLOW


def test_deepseek_insufficient_system_resource_is_overloaded() -> None:
    events = oa([oa_chunk({"content": "partial"}), oa_chunk({}, "insufficient_system_resource")])
    assert kinds(events)[-2:] == ["text_delta", "error"]
    err = value(events[-1])
    assert (err.kind, err.retryable) == (ErrorKind.OVERLOADED, True)
    assert "stop" not in kinds(events)


def test_anthropic_error_event_midstream() -> None:
    lines = list(load_case("B06")["input"]["lines"][:12])
    lines += [
        "event: error",
        'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        "",
    ]
    events = translate_body("anthropic", 200, {"request-id": "req_9"}, lines_to_bytes(lines))
    assert kinds(events) == [
        "stream_start",
        "metadata",
        "thinking_delta",
        "thinking_delta",
        "usage",
        "error",
    ]
    assert value(events[-2]).input_tokens == 20  # message_start's usage, kept before the error
    err = value(events[-1])
    assert (err.kind, err.retryable, err.vendor_code) == (
        ErrorKind.OVERLOADED,
        True,
        "overloaded_error",
    )
    assert err.provider_request_id == "req_9"


def test_anthropic_server_tool_use_is_not_a_client_tool_call() -> None:
    lines = [
        "event: message_start",
        'data: {"type":"message_start","message":{"model":"claude-x",'
        '"usage":{"input_tokens":5,"output_tokens":1}}}',
        "",
        "event: content_block_start",
        'data: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search",'
        '"input":{}}}',
        "",
        "event: content_block_delta",
        'data: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"input_json_delta","partial_json":"{\\"query\\":\\"x\\"}"}}',
        "",
        "event: content_block_stop",
        'data: {"type":"content_block_stop","index":0}',
        "",
        "event: content_block_start",
        'data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
        "",
        "event: content_block_delta",
        'data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta",'
        '"text":"Found."}}',
        "",
        "event: content_block_stop",
        'data: {"type":"content_block_stop","index":1}',
        "",
        "event: message_delta",
        'data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
        '"usage":{"output_tokens":9}}',
        "",
        "event: message_stop",
        'data: {"type":"message_stop"}',
        "",
    ]
    events = translate_body("anthropic", 200, OK, lines_to_bytes(lines))
    assert kinds(events) == ["metadata", "text_delta", "usage", "stop"]


def test_moderation_flag_becomes_safety_notice_and_unflagged_nothing() -> None:
    flagged = {
        "output": {
            "model": "omni-moderation-latest",
            "results": [{"flagged": True, "categories": {"violence": True, "hate": False}}],
        },
        "input": {"results": [{"flagged": False, "categories": {}}]},
    }
    events = oa(
        [
            oa_chunk({"content": "x"}),
            oa_chunk({}, "stop"),
            "data: "
            + json.dumps({"id": "c1", "choices": [], "usage": None, "moderation": flagged}),
            "data: [DONE]",
        ]
    )
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "safety_notice", "stop"]
    notice = value(events[3])
    assert notice.kind == SafetyKind.MODERATION
    assert notice.attrs == {
        "side": "output",
        "categories": "violence",
        "model": "omni-moderation-latest",
    }


def test_json_body_instead_of_sse_is_transient() -> None:
    body = b'{"id":"x","choices":[{"message":{"content":"hi"}}]}'
    events = translate_body("openai", 200, {"content-type": "application/json"}, body)
    assert kinds(events) == ["error"]
    assert value(events[0]).kind == ErrorKind.TRANSIENT


def test_malformed_json_data_line_is_terminal_error() -> None:
    events = oa([oa_chunk({"content": "a"}), "data: {not json"])
    assert kinds(events)[-1] == "error"
    assert value(events[-1]).kind == ErrorKind.TRANSIENT


def test_usage_conventions_by_total_tokens() -> None:
    base = {
        "prompt_tokens": 100,
        "completion_tokens": 40,
        "completion_tokens_details": {"reasoning_tokens": 30},
    }
    inside = map_openai_usage({**base, "total_tokens": 140})
    assert (inside.reasoning_already_counted, inside.vendor_total_tokens) == (True, None)
    outside = map_openai_usage({**base, "total_tokens": 170})
    assert (outside.reasoning_already_counted, outside.vendor_total_tokens) == (None, None)
    odd = map_openai_usage({**base, "total_tokens": 500})
    assert odd.reasoning_already_counted is True  # endpoint default when total decides nothing
    assert odd.vendor_total_tokens == 500  # recorded because it is not the sum of the parts
    forced = map_openai_usage({**base, "total_tokens": 140}, reasoning_in_completion=False)
    assert forced.reasoning_already_counted is None
    no_reasoning = map_openai_usage(
        {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    )
    assert (no_reasoning.reasoning_tokens, no_reasoning.reasoning_already_counted) == (None, None)
    writes = map_openai_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
        }
    )
    assert (writes.input_tokens, writes.cache_read_tokens, writes.cache_write_tokens) == (
        10,
        60,
        30,
    )


def test_anthropic_one_hour_cache_writes() -> None:
    lines = [
        "event: message_start",
        'data: {"type":"message_start","message":{"model":"claude-x",'
        '"usage":{"input_tokens":5,"cache_creation_input_tokens":300,'
        '"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":100,'
        '"ephemeral_1h_input_tokens":200},"output_tokens":1}}}',
        "",
        "event: message_delta",
        'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},'
        '"usage":{"output_tokens":7}}',
        "",
        "event: message_stop",
        'data: {"type":"message_stop"}',
        "",
    ]
    events = translate_body("anthropic", 200, OK, lines_to_bytes(lines))
    usage = value(events[-2])
    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (
        5,
        300,
        200,
    )
    assert usage.output_tokens == 7
    assert value(events[-1]).reason == StopReason.MAX_TOKENS


def test_tool_call_name_in_a_later_chunk_and_id_missing_entirely() -> None:
    events = oa(
        [
            oa_chunk(
                {"tool_calls": [{"index": 0, "id": "call_9", "function": {"arguments": '{"a":'}}]}
            ),
            oa_chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "1}"}}]}),
            oa_chunk({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "{}"}}]}),
            oa_chunk({}, "tool_calls"),
            "data: [DONE]",
        ]
    )
    tool = [
        (k, value(e).to_dict())
        for k, e in zip(kinds(events), events, strict=True)
        if k.startswith("tool")
    ]
    assert tool[0] == ("tool_call_start", {"id": "call_9", "name": "f"})
    assert tool[1:3] == [
        ("tool_call_delta", {"id": "call_9", "argumentsFragment": '{"a":'}),
        ("tool_call_delta", {"id": "call_9", "argumentsFragment": "1}"}),
    ]
    # the id-less call waits for an id until it is closed, then gets a synthesized one
    assert tool[3] == ("tool_call_done", {"id": "call_9"})
    synthesized = tool[4][1]["id"]
    assert tool[4] == ("tool_call_start", {"id": synthesized, "name": "g"}) and synthesized
    assert tool[5:] == [
        ("tool_call_delta", {"id": synthesized, "argumentsFragment": "{}"}),
        ("tool_call_done", {"id": synthesized}),
    ]
    assert value(events[-1]).reason == StopReason.TOOL_USE


def test_error_as_plain_string_keeps_its_message() -> None:
    events = oa([oa_chunk({"content": "a"}), 'data: {"error": "upstream timed out"}'])
    err = value(events[-1])
    assert (err.kind, err.message) == (ErrorKind.TRANSIENT, "upstream timed out")
