"""Cases B05, B06, B08 and B09 (testdata/cases/, copied from ../shared/cases): the Anthropic SSE
lines are mapped onto StreamEvents here by hand (the adapter's own translation is tested in
tests/providers), folded by the accumulator, and the case's expected values asserted exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from protocol_py.codec.structs import from_struct
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.content.v1 import Message
from protocol_py_gen.model.v1 import (
    ErrorKind,
    ModelError,
    RedactedThinking,
    Stop,
    StopReason,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ThinkingSignature,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStart,
    Usage,
)

CASES = Path(__file__).resolve().parents[2] / "testdata" / "cases"
_STOP = {"end_turn": StopReason.END_TURN, "tool_use": StopReason.TOOL_USE}


def _case(case_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CASES / f"{case_id}.json").read_text(encoding="utf-8"))
    assert data["id"] == case_id
    return data


def _events(lines: list[str]) -> list[StreamEvent]:
    """A by-hand mapping of the Anthropic events these cases use (one event per delta)."""
    out: list[StreamEvent] = []
    tools: dict[int, str] = {}
    start_usage: dict[str, Any] = {}
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = json.loads(line[len("data: ") :])
        kind = data["type"]
        if kind == "message_start":
            start_usage = data["message"]["usage"]
        elif kind == "content_block_start":
            block = data["content_block"]
            if block["type"] == "tool_use":
                tools[data["index"]] = block["id"]
                out.append(
                    StreamEvent(tool_call_start=ToolCallStart(id=block["id"], name=block["name"]))
                )
            elif block["type"] == "redacted_thinking":
                out.append(
                    StreamEvent(redacted_thinking=RedactedThinking(data=block["data"].encode()))
                )
        elif kind == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                out.append(StreamEvent(text_delta=TextDelta(text=delta["text"])))
            elif delta["type"] == "thinking_delta":
                out.append(StreamEvent(thinking_delta=ThinkingDelta(text=delta["thinking"])))
            elif delta["type"] == "signature_delta":
                sig = delta["signature"].encode()
                out.append(StreamEvent(thinking_signature=ThinkingSignature(signature=sig)))
            elif delta["type"] == "input_json_delta":
                frag = ToolCallDelta(
                    id=tools[data["index"]], arguments_fragment=delta["partial_json"]
                )
                out.append(StreamEvent(tool_call_delta=frag))
        elif kind == "content_block_stop" and data["index"] in tools:
            out.append(StreamEvent(tool_call_done=ToolCallDone(id=tools[data["index"]])))
        elif kind == "message_delta":
            usage = Usage(
                input_tokens=start_usage["input_tokens"],
                output_tokens=data["usage"]["output_tokens"],
                cache_read_tokens=start_usage.get("cache_read_input_tokens", 0),
                cache_write_tokens=start_usage.get("cache_creation_input_tokens", 0),
            )
            out.append(StreamEvent(usage=usage))
            reason = data["delta"]["stop_reason"]
            out.append(
                StreamEvent(
                    stop=Stop(reason=_STOP[reason], vendor_reason=reason, model_affirmed=True)
                )
            )
    return out


def _replay(message: Message) -> list[dict[str, Any]]:
    """The message as Anthropic replay content (what the cases' *_replay_content show)."""
    out: list[dict[str, Any]] = []
    for block in message.content:
        if block.thinking is not None:
            out.append(
                {
                    "type": "thinking",
                    "thinking": block.thinking.text,
                    "signature": block.thinking.signature.decode(),
                }
            )
        elif block.redacted_thinking is not None:
            out.append({"type": "redacted_thinking", "data": block.redacted_thinking.data.decode()})
        elif block.tool_use is not None:
            out.append(
                {
                    "type": "tool_use",
                    "id": block.tool_use.id,
                    "name": block.tool_use.name,
                    "input": from_struct(block.tool_use.input),
                }
            )
        elif block.text is not None:
            out.append({"type": "text", "text": block.text.text})
    return out


def test_tool_arguments_parsed_once_from_all_fragments() -> None:
    case = _case("B05")
    events = _events(case["input"]["lines"])
    fragments = [
        e.tool_call_delta.arguments_fragment
        for e in events
        if e.tool_call_delta is not None and e.tool_call_delta.id == "toolu_B"
    ]
    assert fragments == case["expected"]["tool_call_delta_fragments_for_toolu_B"]
    result = accumulate(events)
    calls = [
        {"id": b.tool_use.id, "name": b.tool_use.name, "arguments": from_struct(b.tool_use.input)}
        for b in result.message.content
        if b.tool_use is not None
    ]
    assert calls == case["expected"]["canonical_tool_calls"]
    assert len(result.message.content) == len(calls)
    assert result.tool_call_errors == {}
    assert result.usage is not None
    for key, value in case["expected"]["usage"].items():
        assert getattr(result.usage, key) == value
    assert result.stop is not None
    assert result.stop.vendor_reason == case["expected"]["stop"]["reason"]
    assert result.stop.reason == StopReason.TOOL_USE
    assert result.complete


def test_one_thinking_block_with_its_signature() -> None:
    case = _case("B06")
    result = accumulate(_events(case["input"]["lines"]))
    canonical = []
    for block in result.message.content:
        if block.thinking is not None:
            canonical.append(
                {
                    "type": "thinking",
                    "text": block.thinking.text,
                    "signature": block.thinking.signature.decode(),
                }
            )
        elif block.text is not None:
            canonical.append({"type": "text", "text": block.text.text})
    assert canonical == case["expected"]["canonical_content"]
    assert _replay(result.message) == case["expected"]["anthropic_replay_content"]
    assert result.unreplayable_blocks == []
    assert result.stop is not None
    assert result.stop.vendor_reason == "end_turn"


def test_redacted_thinking_kept_verbatim() -> None:
    case = _case("B08")
    events = _events(case["input"]["lines"])
    result = accumulate(events)
    kinds = [_block_kind(b) for b in result.message.content]
    assert kinds == case["expected"]["canonical_content_types"]
    assert _replay(result.message) == case["expected"]["anthropic_replay_content"]
    redacted = result.message.content[1].redacted_thinking
    assert redacted is not None
    assert redacted.data.decode() == case["expected"]["redacted_thinking_event"]["data"]
    assert result.stop is not None
    assert result.stop.vendor_reason == case["expected"]["stop"]["reason"]


def _block_kind(block: Any) -> str:
    for name in ("text", "thinking", "redacted_thinking", "tool_use"):
        if getattr(block, name) is not None:
            return name
    raise AssertionError("empty block")


def test_truncated_thinking_is_not_replayable() -> None:
    case = _case("B09")
    events = _events(case["input"]["lines"])
    expected = case["expected"]
    # Raw transport EOF: the accumulator reports the stream incomplete, keeping what arrived.
    cut = accumulate(events)
    assert not cut.complete
    # The adapter's view: a retryable error after the deltas (the case's expected events).
    error = expected["events"][-1]["error"]
    failed = accumulate(
        [
            *events,
            StreamEvent(
                error=ModelError(
                    kind=ErrorKind.TRANSIENT, message=error["kind"], retryable=error["retryable"]
                )
            ),
        ]
    )
    for result in (cut, failed):
        assert result.stop is None  # no_stop_end_turn
        (block,) = result.message.content
        assert block.thinking is not None
        want = expected["canonical_thinking_block"]
        assert block.thinking.text == want["text"]
        assert block.thinking.signature.decode() == want["signature"]
        assert (0 not in result.unreplayable_blocks) is want["replayable"]
    assert failed.complete
    assert failed.error is not None
    assert failed.error.retryable is True
