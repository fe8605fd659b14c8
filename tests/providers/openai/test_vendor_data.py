"""Protocol 1.1 per-call vendor data (B03): Gemini's thought_signature on the OpenAI-compatible
endpoint is carried verbatim from the stream to the canonical block and replayed as
``tool_calls[i].extra_content`` of the next request."""

from __future__ import annotations

import json

import pytest

from protocol_py.codec.structs import from_struct
from protocol_py.errors import InvalidValueError
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.providers.openai.request import OpenAICompat, build_openai_body
from protocol_py.rules.accumulate import accumulate
from protocol_py.rules.vendor_data import MAX_VALUE_BYTES, OPENAI_EXTRA_CONTENT
from protocol_py_gen.common.v1 import CallContext
from protocol_py_gen.content.v1 import (
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    VendorData,
)
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelSpec,
    StopReason,
    StreamCompletionRequest,
    StreamEvent,
)

from ...support.adapters import kinds, lines_to_bytes, load_case, translate_body
from ...support.stub_upstream import Reply, StubUpstream

B03 = load_case("B03")
SIG = {"google": {"thought_signature": "SIG_G1"}}


def b03_lines(variant: str) -> list[str]:
    lines = list(B03["input"]["lines"])
    if variant == "index_null":
        lines = [line.replace('"tool_calls":[{', '"tool_calls":[{"index":null,') for line in lines]
        assert sum('"index":null' in line for line in lines) == 3
    return lines


def run(lines: list[str]) -> list[StreamEvent]:
    return translate_body(
        "openai", 200, {"content-type": "text/event-stream"}, lines_to_bytes(lines)
    )


@pytest.mark.parametrize("variant", ["no_index", "index_null"])
def test_thought_signature_lands_on_the_canonical_block_verbatim(variant: str) -> None:
    events = run(b03_lines(variant))
    assert kinds(events).count("tool_call_start") == B03["expected"]["tool_call_start_count"]
    assert "error" not in kinds(events)
    folded = accumulate(events)
    (block,) = folded.message.content
    tool_use = block.tool_use
    assert tool_use is not None
    (want,) = B03["expected"]["canonical_tool_calls"]
    assert (tool_use.id, tool_use.name) == (want["id"], want["name"])
    assert tool_use.input is not None and from_struct(tool_use.input) == want["arguments"]
    assert folded.tool_arguments[want["id"]] == want["arguments_json"]
    (entry,) = tool_use.vendor_data
    assert entry.location == OPENAI_EXTRA_CONTENT == "openai.tool_call.extra_content"
    assert entry.value == b'{"google":{"thought_signature":"SIG_G1"}}'
    assert json.loads(entry.value) == want["opaque_vendor_metadata"]
    assert folded.stop is not None and folded.stop.reason == StopReason.TOOL_USE


def test_signature_rides_on_tool_call_done_not_on_a_second_start() -> None:
    events = run(b03_lines("no_index"))
    starts = [e.tool_call_start for e in events if e.tool_call_start is not None]
    dones = [e.tool_call_done for e in events if e.tool_call_done is not None]
    assert [s.vendor_data for s in starts] == [[]]
    assert [(d.id, [v.location for v in d.vendor_data]) for d in dones] == [
        ("function-call-1", [OPENAI_EXTRA_CONTENT])
    ]


def test_extra_content_outside_any_open_call_opens_no_phantom_call() -> None:
    lines = [
        'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}',
        "",
        'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"extra_content":{"a":1}}]}}]}',
        "",
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        "",
        "data: [DONE]",
        "",
    ]
    events = run(lines)
    assert "tool_call_start" not in kinds(events)
    assert accumulate(events).stop.reason == StopReason.END_TURN  # type: ignore[union-attr]


def test_extra_content_above_the_limit_is_a_permanent_error_not_cut() -> None:
    big = "x" * MAX_VALUE_BYTES
    lines = list(B03["input"]["lines"])
    lines[4] = lines[4].replace('"SIG_G1"', json.dumps(big))
    events = run(lines)
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.PERMANENT
    assert f"above the vendor data limit of {MAX_VALUE_BYTES}" in error.message
    assert "xxxxxxxx" not in error.message  # the vendor's value is never echoed


def replay_request(vendor_data: list[VendorData]) -> StreamCompletionRequest:
    call = ToolUseBlock(id="function-call-1", name="get_weather", vendor_data=vendor_data)
    return StreamCompletionRequest(
        model_id="gemini-3-pro",
        messages=[
            Message(id="m1", role=Role.USER, content=[ContentBlock(text=TextBlock(text="w?"))]),
            Message(id="m2", role=Role.ASSISTANT, content=[ContentBlock(tool_use=call)]),
            Message(
                id="m3",
                role=Role.USER,
                content=[
                    ContentBlock(
                        tool_result=ToolResultBlock(
                            tool_use_id="function-call-1",
                            content=[ContentBlock(text=TextBlock(text="sunny"))],
                        )
                    )
                ],
            ),
        ],
    )


SPEC = ModelSpec(id="gemini-3-pro", context_window=1_000_000, max_output_tokens=65_536)


def test_replay_puts_extra_content_back_where_it_came_from() -> None:
    folded = accumulate(run(b03_lines("no_index")))
    (block,) = folded.message.content
    assert block.tool_use is not None
    body = build_openai_body(replay_request(list(block.tool_use.vendor_data)), SPEC, OpenAICompat())
    (call,) = body["messages"][1]["tool_calls"]
    assert call == {
        "id": "function-call-1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
        "extra_content": SIG,
    }


def test_vendor_data_of_another_location_is_not_sent_to_an_openai_endpoint() -> None:
    foreign = VendorData(location="anthropic.some_field", value=b"opaque")
    body = build_openai_body(replay_request([foreign]), SPEC, OpenAICompat())
    (call,) = body["messages"][1]["tool_calls"]
    assert "extra_content" not in call


def test_extra_content_that_is_not_a_json_object_is_rejected_naming_the_field() -> None:
    bad = VendorData(location=OPENAI_EXTRA_CONTENT, value=b'"just a string"')
    with pytest.raises(InvalidValueError) as info:
        build_openai_body(replay_request([bad]), SPEC, OpenAICompat())
    assert info.value.rule == "adapter.openai.tool_use.extra_content"
    assert info.value.path == "messages[1].content[0].tool_use.vendor_data[0].value"


async def test_round_trip_through_the_provider_and_a_stub_upstream() -> None:
    """Stream B03 from a stub OpenAI-compatible upstream, fold it, answer the call, and check
    the next request body carries the signature back in tool_calls[0].extra_content."""
    sse = lines_to_bytes(B03["input"]["lines"])
    async with StubUpstream() as stub:
        stub.queue(
            Reply(headers={"content-type": "text/event-stream"}, chunks=[sse]),
            Reply(headers={"content-type": "text/event-stream"}, chunks=[sse]),
        )
        provider = OpenAIProvider(api_key="sk-test-key", base_url=stub.url)
        try:
            first = replay_request([])
            first.model_id = "gpt-6-sol"
            first.messages = first.messages[:1]
            first.call_context = CallContext(session_id="s", turn_id="t")
            folded = accumulate([e async for e in provider.stream(first, CallContext())])
            (block,) = folded.message.content
            assert block.tool_use is not None
            second = replay_request(list(block.tool_use.vendor_data))
            second.model_id = "gpt-6-sol"
            second.call_context = CallContext(session_id="s", turn_id="t")
            events = [e async for e in provider.stream(second, CallContext())]
        finally:
            await provider.aclose()
    assert "error" not in kinds(events)
    sent = stub.seen[1].json()["messages"]
    (call,) = next(m for m in sent if m["role"] == "assistant")["tool_calls"]
    assert call["id"] == "function-call-1"
    assert call["extra_content"] == SIG
