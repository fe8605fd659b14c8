"""Streams that end on the output limit inside a tool call, and odd bytes: MAX_TOKENS with the
vendor's final usage, the cut call not reported as a call, never a retryable error; vendor
blocks of a 1.2 kernel's stream."""

from __future__ import annotations

import json
from typing import Any

import betterproto2
import pytest

from protocol_py.providers.anthropic.stream import AnthropicStreamTranslator
from protocol_py.providers.http import events as ev
from protocol_py.providers.http.sse import SSEParser
from protocol_py.providers.openai.stream import OpenAIStreamTranslator
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import (
    ErrorKind,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
    ToolCallDone,
)
from tests.support.adapters import RECORDED_ABSENT, SHARED_RECORDED, load_fixture


def an(kind: str, **obj: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **obj})}\n\n"


def run_anthropic(body: str, request: StreamCompletionRequest | None = None) -> list[StreamEvent]:
    translator = AnthropicStreamTranslator({"request-id": "req_1"}, request=request)
    parser = SSEParser()
    out = [e for sse in parser.feed(body.encode()) for e in translator.on_event(sse)]
    return out + translator.on_eof()


def run_openai(body: str) -> list[StreamEvent]:
    translator = OpenAIStreamTranslator({})
    parser = SSEParser()
    out = [e for sse in parser.feed(body.encode()) for e in translator.on_event(sse)]
    return out + translator.on_eof()


START = an(
    "message_start",
    message={
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "usage": {"input_tokens": 50, "output_tokens": 1},
    },
)


def cut_tool_call(stop_reason: str) -> str:
    return (
        START
        + an("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + an("content_block_delta", index=0, delta={"type": "text_delta", "text": "Writing."})
        + an("content_block_stop", index=0)
        + an(
            "content_block_start",
            index=1,
            content_block={"type": "tool_use", "id": "toolu_1", "name": "write", "input": {}},
        )
        + an(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"path": "a.txt", "text": "lo'},
        )
        + an("content_block_stop", index=1)
        + an(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": 4096},
        )
        + an("message_stop")
    )


def test_anthropic_max_tokens_inside_a_tool_call_is_a_max_tokens_stop() -> None:
    events = run_anthropic(cut_tool_call("max_tokens"))
    assert "error" not in [ev_kind(e) for e in events]
    usage = next(e.usage for e in events if e.usage is not None)
    assert (usage.input_tokens, usage.output_tokens) == (50, 4096)  # message_delta's figure
    stop = events[-1].stop
    assert stop is not None and (stop.reason, stop.model_affirmed) == (StopReason.MAX_TOKENS, True)
    result = accumulate(events)
    assert [b.text.text for b in result.message.content if b.text] == ["Writing."]
    assert [b for b in result.message.content if b.tool_use is not None] == []
    assert result.truncated_tool_calls == ["toolu_1"]
    assert result.tool_call_errors == {}
    assert result.tool_arguments["toolu_1"] == '{"path": "a.txt", "text": "lo'


def test_anthropic_malformed_arguments_without_the_limit_stay_a_transient_error() -> None:
    events = run_anthropic(cut_tool_call("tool_use"))
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.TRANSIENT
    assert "toolu_1" in error.message
    usage = next(e.usage for e in events if e.usage is not None)
    assert usage.output_tokens == 4096


def openai_chunks(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_openai_length_inside_a_tool_call_is_a_max_tokens_stop() -> None:
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "w"}}
    events = run_openai(
        openai_chunks(
            {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
            {
                "id": "c",
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": '{"a": "'}}]
                        },
                    }
                ],
            },
            {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
            {"id": "c", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 100}},
        )
    )
    assert events[-1].stop is not None and events[-1].stop.reason == StopReason.MAX_TOKENS
    result = accumulate(events)
    assert result.truncated_tool_calls == ["call_1"]
    assert result.message.content == []
    assert result.usage is not None and result.usage.output_tokens == 100


def ev_kind(event: StreamEvent) -> str:
    return betterproto2.which_one_of(event, "event")[0]


V12 = StreamCompletionRequest(kernel_protocol_version="1.2")


def test_a_compaction_block_reaches_a_1_2_kernel_whole_and_a_1_1_kernel_not_at_all() -> None:
    path = SHARED_RECORDED / "anthropic_compaction_cache_iterations.json"
    if not path.exists():
        pytest.skip(RECORDED_ABSENT)
    _, body = load_fixture(path)
    newer = run_anthropic(body.decode(), V12)
    older = run_anthropic(body.decode())
    blocks = [e.vendor_block for e in newer if e.vendor_block is not None]
    assert [(b.vendor, b.block_type) for b in blocks] == [("anthropic", "compaction")]
    data = json.loads(blocks[0].data)
    assert data["type"] == "compaction"
    assert data["content"].startswith("The user provided a very long context")
    assert [e for e in older if e.vendor_block is not None] == []
    assert [ev_kind(e) for e in newer if e.vendor_block is None] == [ev_kind(e) for e in older]


def test_a_lone_surrogate_in_any_vendor_string_is_made_encodable() -> None:
    event = StreamEvent(tool_call_done=ToolCallDone(id="call_\ud800x"))
    ev.scrub_event(event)
    assert event.tool_call_done is not None and event.tool_call_done.id == "call_\ufffdx"
    bytes(event)
