"""Anthropic content blocks: a tool call left open at ``message_stop`` is closed (or an error when
its arguments are invalid), a reused block index closes the open block first, a signature that
arrived before a cut is kept, and arguments for a block never started are an error."""

from __future__ import annotations

import json
from typing import Any

from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import (
    ErrorKind,
    StopReason,
    StreamEvent,
)

from ...support.adapters import kinds, translate_body
from .._vendor_calls import sse_body, value

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
    # content, then the usage message_start reported (docs/adapters.md "Upstream faults"), then the
    # error
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


def test_anthropic_arguments_for_a_block_never_started_are_an_error() -> None:
    events = anth(_START, json_delta(3, '{"q":1}'), _TOOL_DELTA, an("message_stop"))
    assert kinds(events)[-1] == "error" and "block 3" in value(events[-1]).message
    accumulate(events)
