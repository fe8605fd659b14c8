"""A 2xx reply with a JSON body instead of an event stream: a vendor error object is classified
(vLLM's by its code), a whole chat completion or Anthropic message is translated, an HTML body is
a PERMANENT error naming the content type."""

from __future__ import annotations

import betterproto2

from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import (
    ErrorKind,
    StopReason,
    StreamEvent,
)

from ..support.stub_upstream import Reply, StubUpstream
from ._vendor_calls import MODEL, collect, json_reply, make, value


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


async def test_http_200_vllm_error_object_uses_its_code_as_status() -> None:
    body = {"object": "error", "message": "bad temperature", "type": "BadRequestError", "code": 400}
    events = await _stream_reply("openai", json_reply(200, body))
    err = value(events[-1])
    assert (err.kind, err.http_status, err.message) == (
        ErrorKind.INVALID_REQUEST,
        400,
        "bad temperature",
    )
