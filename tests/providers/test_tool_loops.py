"""A 20-turn tool loop through the real server and client, against stub upstreams that number
tool calls per turn (``read_file:0`` in every turn), that send no ids at all, or (Anthropic)
that repeat one id every turn: every turn is accepted by the kernel's validation, the server and
the vendor body, and the vendor gets back the ids it produced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol_py.client.conversation import Conversation
from protocol_py.codec.structs import to_struct
from protocol_py.providers import catalog
from protocol_py.providers.http.call_ids import ANTHROPIC_TOOL_USE_ID, OPENAI_TOOL_CALL_ID
from protocol_py_gen.model.v1 import StopReason, ToolDeclaration

from ._agent_loop import served, sse_reply

TURNS = 20
TOOLS = [
    ToolDeclaration(
        name="read_file",
        description="Read a file",
        input_schema=to_struct({"type": "object", "properties": {"path": {"type": "string"}}}),
    )
]


def openai_turn(turn: int, ids: str) -> list[str]:
    """One response with two parallel calls: ids ``read_file:0``/``read_file:1`` every turn
    (``per_turn``) or none (``none``)."""
    calls = []
    for k in range(2):
        call: dict[str, Any] = {
            "index": k,
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{turn}_{k}"})},
        }
        if ids == "per_turn":
            call["id"] = f"read_file:{k}"
        calls.append(call)
    chunk = {
        "id": f"c{turn}",
        "model": "gpt-6-sol",
        "choices": [{"index": 0, "delta": {"tool_calls": calls}}],
    }
    finish = {
        "id": f"c{turn}",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    }
    return [f"data: {json.dumps(chunk)}", "", f"data: {json.dumps(finish)}", "", "data: [DONE]", ""]


def anthropic_turn(turn: int) -> list[str]:
    """One tool call whose id is the same in every turn."""

    def ev(kind: str, **obj: Any) -> list[str]:
        return [f"event: {kind}", f"data: {json.dumps({'type': kind, **obj})}", ""]

    start = {
        "id": f"msg_{turn}",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [],
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    block = {"type": "tool_use", "id": "toolu_same", "name": "read_file", "input": {}}
    return [
        *ev("message_start", message=start),
        *ev("content_block_start", index=0, content_block=block),
        *ev(
            "content_block_delta",
            index=0,
            delta={"type": "input_json_delta", "partial_json": json.dumps({"path": f"f{turn}"})},
        ),
        *ev("content_block_stop", index=0),
        *ev("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}),
        *ev("message_stop"),
    ]


def spec(model_id: str) -> Any:
    models = catalog.openai_models() + catalog.anthropic_models()
    return next(m for m in models if m.id == model_id)


@pytest.mark.parametrize("ids", ["per_turn", "none"])
async def test_a_20_turn_openai_compatible_tool_loop_is_accepted_at_every_turn(ids: str) -> None:
    replies = [sse_reply(openai_turn(t, ids)) for t in range(TURNS)]
    conv = Conversation(spec=spec("gpt-6-sol"), tools=TOOLS)
    conv.user("Read the files one by one.")
    seen_ids: list[str] = []
    async with served("openai", *replies) as s:
        for turn in range(TURNS):
            completion = await s.client.complete(conv.request(), timeout=30)  # validated
            assert completion.error is None, (turn, completion.error)
            assert completion.stop is not None and completion.stop.reason == StopReason.TOOL_USE
            conv.assistant(completion)
            for call in conv.pending_tool_calls():
                seen_ids.append(call.id)
                conv.tool_result(call.id, f"contents of turn {turn}")
        bodies = [seen.json()["messages"] for seen in s.stub.seen]
    assert len(seen_ids) == len(set(seen_ids)) == 2 * TURNS  # unique in the conversation
    assert len(bodies) == TURNS
    last = bodies[-1]
    assistants = [m for m in last if m["role"] == "assistant"]
    tools = [m for m in last if m["role"] == "tool"]
    assert len(assistants) == TURNS - 1 and len(tools) == 2 * (TURNS - 1)
    sent_ids = [c["id"] for m in assistants for c in m["tool_calls"]]
    if ids == "per_turn":
        # the vendor sees its own numbering back, turn after turn
        assert sent_ids == ["read_file:0", "read_file:1"] * (TURNS - 1)
        assert seen_ids[:2] == ["read_file:0", "read_file:1"]  # free in turn 1: kept
    else:
        assert sent_ids == seen_ids[: 2 * (TURNS - 1)]
    # each tool message answers the call right before it, under the id the vendor was sent
    assert [m["tool_call_id"] for m in tools] == sent_ids


async def test_kept_vendor_ids_ride_on_the_calls_as_vendor_data() -> None:
    replies = [sse_reply(openai_turn(t, "per_turn")) for t in range(2)]
    conv = Conversation(spec=spec("gpt-6-sol"), tools=TOOLS)
    conv.user("go")
    async with served("openai", *replies) as s:
        for _ in range(2):
            completion = await s.client.complete(conv.request(), timeout=30)
            conv.assistant(completion)
            for call in conv.pending_tool_calls():
                conv.tool_result(call.id, "x")
    second = [b.tool_use for b in conv.messages[-2].content if b.tool_use is not None]
    assert all(c.id.startswith("call_") and len(c.id) == 31 for c in second)
    assert [[(v.location, v.value) for v in c.vendor_data] for c in second] == [
        [(OPENAI_TOOL_CALL_ID, b"read_file:0")],
        [(OPENAI_TOOL_CALL_ID, b"read_file:1")],
    ]


async def test_a_20_turn_anthropic_tool_loop_with_a_repeated_id_is_accepted() -> None:
    replies = [sse_reply(anthropic_turn(t), {"request-id": f"req_{t}"}) for t in range(TURNS)]
    conv = Conversation(spec=spec("claude-haiku-4-5"), tools=TOOLS)
    conv.user("Read the files one by one.")
    seen_ids: list[str] = []
    async with served("anthropic", *replies) as s:
        for turn in range(TURNS):
            completion = await s.client.complete(conv.request(), timeout=30)
            assert completion.error is None, (turn, completion.error)
            conv.assistant(completion)
            for call in conv.pending_tool_calls():
                seen_ids.append(call.id)
                kept = [v.value for v in call.vendor_data if v.location == ANTHROPIC_TOOL_USE_ID]
                assert kept == ([] if turn == 0 else [b"toolu_same"])
                conv.tool_result(call.id, f"contents {turn}")
        last = s.stub.seen[-1].json()["messages"]
    assert len(set(seen_ids)) == TURNS and seen_ids[0] == "toolu_same"
    uses = [b["id"] for m in last if m["role"] == "assistant" for b in m["content"]]
    results = [
        b["tool_use_id"]
        for m in last
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
    ]
    assert uses == results == ["toolu_same"] * (TURNS - 1)
