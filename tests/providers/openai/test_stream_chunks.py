"""OpenAI chat-completion chunks: tool calls keyed by index and id (a late id adopted, a reused id
refused, id-less calls given distinct ids), metadata from the first chunk that names the model,
and ``[DONE]`` without a finish reason."""

from __future__ import annotations

import json
import re
from typing import Any

from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import (
    ErrorKind,
    StopReason,
    StreamEvent,
)

from ...support.adapters import kinds, translate_body
from .._vendor_calls import sse_body, value


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
    accumulate(events)  # a valid event order (docs/decisions.md#d12)


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


def test_id_less_calls_get_distinct_synthesized_ids_at_finish() -> None:
    events = oa(
        oa_chunk({"tool_calls": [tc(0, None, "f", "{}"), tc(1, None, "g", '{"b":2}')]}),
        oa_chunk({}, "tool_calls"),
        "data: [DONE]",
    )
    calls = calls_of(events)
    assert [c[1] for c in calls] == ["f", "g"] and calls[0][0] != calls[1][0]
    assert all(c[0] for c in calls)


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
