"""Vendor-shaped bug cases B02, B04-B06, B08-B11, B21, B22 and C09/C10 through the translators."""

from __future__ import annotations

import json
from typing import Any

import betterproto2
import pytest

from protocol_py.providers.anthropic.stream import map_anthropic_stop
from protocol_py.providers.openai.stream import map_openai_finish
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import ErrorKind, StopReason, StreamEvent

from ..providers.http.test_sse import c10_chunks
from ..support.adapters import case_chunks, kinds, lines_to_bytes, load_case, translate_body

OK = {"content-type": "text/event-stream"}


def fold_tool_calls(events: list[StreamEvent]) -> list[dict[str, Any]]:
    """Fold tool-call events into canonical calls (empty arguments mean {})."""
    calls: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for event in events:
        case, value = betterproto2.which_one_of(event, "event")
        if case == "tool_call_start":
            assert value.id not in calls
            calls[value.id] = {"id": value.id, "name": value.name, "frags": [], "done": False}
            order.append(value.id)
        elif case == "tool_call_delta":
            assert not calls[value.id]["done"]
            calls[value.id]["frags"].append(value.arguments_fragment)
        elif case == "tool_call_done":
            calls[value.id]["done"] = True
    out = []
    for call_id in order:
        call = calls[call_id]
        assert call["done"], call_id
        joined = "".join(call["frags"])
        arguments_json = joined if joined.strip() else "{}"
        out.append(
            {
                "id": call_id,
                "name": call["name"],
                "arguments_json": arguments_json,
                "arguments": json.loads(arguments_json),
            }
        )
    return out


def value_of(event: StreamEvent) -> Any:
    return betterproto2.which_one_of(event, "event")[1]


def run_openai(lines: list[str], **kw: Any) -> list[StreamEvent]:
    return translate_body("openai", 200, OK, lines_to_bytes(lines), **kw)


def run_anthropic(lines: list[str]) -> list[StreamEvent]:
    return translate_body("anthropic", 200, OK, lines_to_bytes(lines))


def assert_usage(event: StreamEvent, expected: dict[str, Any]) -> None:
    """Bug-case usage: an unreported optional count reads as 0 (field names are indicative)."""
    usage = value_of(event)
    for key, want in expected.items():
        got = getattr(usage, key)
        if isinstance(want, bool):
            assert got is want, key
        else:
            assert (got or 0) == want, key


def assert_stop(event: StreamEvent, expected: dict[str, Any]) -> None:
    stop = value_of(event)
    assert stop.reason.name.lower() == expected["reason"]
    assert stop.matched_stop_sequence == expected.get("matched_stop_sequence")
    for key in ("vendor_reason", "model_affirmed"):
        if key in expected:
            assert getattr(stop, key) == expected[key], key


def simple_events(events: list[StreamEvent]) -> list[dict[str, Any]]:
    """Content/stop events as {case: {field: value}} without stream_start/metadata."""
    out: list[dict[str, Any]] = []
    for event in events:
        case, value = betterproto2.which_one_of(event, "event")
        if case in ("text_delta", "thinking_delta"):
            out.append({case: {"text": value.text}})
        elif case == "thinking_signature":
            out.append({case: {"signature": value.signature.decode()}})
        elif case == "stop":
            out.append({case: {"reason": value.reason.name.lower()}})
        elif case not in ("stream_start", "metadata", "usage"):
            out.append({case: value.to_dict()})
    return out


def test_repeated_id_and_name_continue_one_call() -> None:
    case = load_case("B02")
    events = run_openai(case["input"]["lines"])
    assert kinds(events).count("tool_call_start") == case["expected"]["tool_call_start_count"]
    assert fold_tool_calls(events) == case["expected"]["canonical_tool_calls"]
    assert_stop(events[-1], case["expected"]["stop"])


def test_new_id_on_same_index_opens_new_call() -> None:
    """Complement of B02 (B01's rule): same index, different id = a new call."""
    chunk = (
        'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"tool_calls":'
        '[{"index":0,"id":"%s","function":{"name":"%s","arguments":"%s"}}]},"finish_reason":null}]}'
    )
    lines = [
        chunk % ("call_1", "a", "{}"),
        "",
        chunk % ("call_2", "b", '{\\"x\\":1}'),
        "",
        'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}',
        "",
        "data: [DONE]",
        "",
    ]
    events = run_openai(lines)
    calls = fold_tool_calls(events)
    assert [(c["id"], c["name"], c["arguments"]) for c in calls] == [
        ("call_1", "a", {}),
        ("call_2", "b", {"x": 1}),
    ]
    # call_1 is closed when call_2 opens, before call_2's start
    order = [
        (k, value_of(e).id)
        for k, e in zip(kinds(events), events, strict=True)
        if k in ("tool_call_start", "tool_call_done")
    ]
    assert order[:3] == [
        ("tool_call_start", "call_1"),
        ("tool_call_done", "call_1"),
        ("tool_call_start", "call_2"),
    ]


@pytest.mark.parametrize("variant", ["empty_arguments", "no_arguments_key"])
def test_parameterless_tool_call(variant: str) -> None:
    case = load_case("B04")
    lines = list(case["input"]["lines"])
    if variant == "no_arguments_key":
        lines[0] = lines[0].replace(',"arguments":""', "")
        assert "arguments" not in lines[0]
    events = run_openai(lines)
    assert fold_tool_calls(events) == case["expected"]["canonical_tool_calls"]
    folded = accumulate(events)
    (block,) = folded.message.content
    assert block.tool_use is not None
    assert (block.tool_use.id, block.tool_use.name) == ("call_1", "get_time")
    assert block.tool_use.input is not None and block.tool_use.input.fields == {}
    assert folded.tool_call_errors == {}
    assert "tool_call_delta" not in kinds(events)
    assert "error" not in kinds(events)
    assert_stop(events[-1], case["expected"]["stop"])


def test_malformed_arguments_give_error_naming_call() -> None:
    case = load_case("B04")
    lines = list(case["input"]["lines"])
    lines[0] = lines[0].replace('"arguments":""', '"arguments":"{"')
    assert '"arguments":"{"' in lines[0]
    events = run_openai(lines)
    assert kinds(events)[-1] == "error"
    err = value_of(events[-1])
    assert "call_1" in err.message
    assert err.kind == ErrorKind.TRANSIENT


def test_anthropic_tool_fragments_per_block() -> None:
    case = load_case("B05")
    events = run_anthropic(case["input"]["lines"])
    calls = fold_tool_calls(events)
    assert [{k: c[k] for k in ("id", "name", "arguments")} for c in calls] == case["expected"][
        "canonical_tool_calls"
    ]
    frags = [
        value_of(e).arguments_fragment
        for e in events
        if kinds([e]) == ["tool_call_delta"] and value_of(e).id == "toolu_B"
    ]
    # the empty first fragment is not forwarded (empty strings are never emitted)
    assert frags == [f for f in case["expected"]["tool_call_delta_fragments_for_toolu_B"] if f]
    assert "".join(frags) == "".join(case["expected"]["tool_call_delta_fragments_for_toolu_B"])
    assert_usage(events[-2], case["expected"]["usage"])
    assert_stop(events[-1], case["expected"]["stop"])


def test_one_signed_thinking_block() -> None:
    case = load_case("B06")
    events = run_anthropic(case["input"]["lines"])
    expected = case["expected"]["events"]
    assert simple_events(events) == [e for e in expected if "usage" not in e]
    usage_events = [e for e in events if kinds([e]) == ["usage"]]
    assert len(usage_events) == 1
    assert_usage(usage_events[0], next(e["usage"] for e in expected if "usage" in e))
    assert kinds(events).count("thinking_signature") == 1
    content = accumulate(events).message.content
    want = case["expected"]["canonical_content"]
    assert len(content) == len(want) == 2
    assert content[0].thinking is not None and content[1].text is not None
    assert (content[0].thinking.text, content[0].thinking.signature) == (
        want[0]["text"],
        want[0]["signature"].encode(),
    )
    assert content[1].text.text == want[1]["text"]


def test_redacted_thinking_position_and_bytes() -> None:
    case = load_case("B08")
    events = run_anthropic(case["input"]["lines"])
    content = [k for k in kinds(events) if k not in ("stream_start", "metadata")]
    assert content == case["expected"]["event_kinds_in_order"]
    red = next(value_of(e) for e in events if kinds([e]) == ["redacted_thinking"])
    assert red.data == case["expected"]["redacted_thinking_event"]["data"].encode()
    tool = case["expected"]["anthropic_replay_content"][2]
    assert fold_tool_calls(events)[0]["arguments"] == tool["input"]
    assert_stop(events[-1], case["expected"]["stop"])
    content = accumulate(events).message.content
    types = [betterproto2.which_one_of(b, "block")[0] for b in content]
    assert types == case["expected"]["canonical_content_types"]


def test_truncated_thinking_stream() -> None:
    case = load_case("B09")
    events = run_anthropic(case["input"]["lines"])
    expected = case["expected"]["events"]
    assert simple_events(events[:-1]) == expected[:-1]
    err = value_of(events[-1])
    assert kinds(events)[-1] == "error"
    assert err.kind == ErrorKind.TRANSIENT
    assert err.retryable is expected[-1]["error"]["retryable"]
    assert err.message == expected[-1]["error"]["kind"]
    assert "stop" not in kinds(events)
    assert "thinking_signature" not in kinds(events)
    folded = accumulate(events)
    block = case["expected"]["canonical_thinking_block"]
    (thinking,) = folded.message.content
    assert thinking.thinking is not None
    assert (thinking.thinking.text, thinking.thinking.signature) == (block["text"], b"")
    assert (0 in folded.unreplayable_blocks) is (not block["replayable"])


def test_deepseek_tool_turn_stream() -> None:
    case = load_case("B10")
    events = run_openai(case["input"]["lines"])
    content = [k for k in kinds(events) if k not in ("stream_start", "metadata")]
    # B10 lists the kinds without the arguments fragment; "{}" is forwarded as received
    assert [k for k in content if k != "tool_call_delta"] == case["expected"]["events_kinds"]
    assert_usage(next(e for e in events if kinds([e]) == ["usage"]), case["expected"]["usage"])
    assert_stop(events[-1], case["expected"]["stop"])
    thinking = "".join(value_of(e).text for e in events if kinds([e]) == ["thinking_delta"])
    assert thinking == case["expected"]["replayed_assistant_message_subset"]["reasoning_content"]
    expected_call = case["expected"]["replayed_assistant_message_subset"]["tool_calls"][0]
    call = fold_tool_calls(events)[0]
    assert (call["id"], call["name"], call["arguments_json"]) == (
        expected_call["id"],
        expected_call["function"]["name"],
        expected_call["function"]["arguments"],
    )


def test_usage_only_final_chunk() -> None:
    case = load_case("B11")
    events = run_openai(case["input"]["lines"])
    expected = case["expected"]
    ks = kinds(events)
    assert ks.count("usage") == expected["usage_event_count"]
    assert ks.count("stop") == expected["stop_event_count"]
    body = [e for e in events if kinds([e])[0] not in ("stream_start", "metadata")]
    assert [next(iter(e)) for e in expected["events"]] == kinds(body)
    assert value_of(body[0]).text == "Hi"
    assert_usage(body[1], expected["events"][1]["usage"])
    assert_stop(body[2], expected["events"][2]["stop"])


def test_vendor_stop_reasons_map_as_the_table_says() -> None:
    case = load_case("B21")
    for row, want in zip(case["input"]["rows"], case["expected"]["rows"], strict=True):
        if row["vendor"] == "openai":
            stop = map_openai_finish(
                row["finish_reason"],
                choice_stop_reason=row.get("choice_stop_reason"),
                tool_calls_seen=bool(row.get("accumulated_tool_calls")),
            )
            raw = row["finish_reason"]
        else:
            stop = map_anthropic_stop(row["stop_reason"], row.get("stop_sequence"))
            raw = row["stop_reason"]
        assert_stop(StreamEvent(stop=stop), want["stop"])
        assert stop.vendor_reason == raw  # always the raw value, verbatim (docs/decisions.md#d11)
        known = stop.reason != StopReason.END_TURN or raw in ("stop", "end_turn")
        assert stop.model_affirmed is known or row.get("accumulated_tool_calls")


def test_vendor_stop_reasons_map_end_to_end_through_a_stream() -> None:
    """The vLLM stop_reason and Anthropic pause_turn rows, end to end through a stream."""
    lines = [
        'data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a"},'
        '"finish_reason":"stop","stop_reason":"###"}]}',
        "",
        "data: [DONE]",
        "",
    ]
    stop = value_of(run_openai(lines)[-1])
    assert (stop.reason, stop.matched_stop_sequence) == (StopReason.STOP_SEQUENCE, "###")
    b06 = load_case("B06")["input"]["lines"]
    lines = [line.replace('"stop_reason":"end_turn"', '"stop_reason":"pause_turn"') for line in b06]
    stop = value_of(run_anthropic(lines)[-1])
    # Protocol 1.1: a paused turn is its own reason, reported by the vendor (not END_TURN).
    assert (stop.reason, stop.vendor_reason, stop.model_affirmed) == (
        StopReason.PAUSE_TURN,
        "pause_turn",
        True,
    )


@pytest.mark.parametrize("terminator", ["\n", "\r\n", "\r"])
def test_comments_keepalives(terminator: str) -> None:
    case = load_case("B22")
    events = translate_body("openai", 200, OK, lines_to_bytes(case["input"]["lines"], terminator))
    assert simple_events(events) == case["expected"]["events"]


def test_anthropic_ping_variant() -> None:
    lines = list(load_case("B06")["input"]["lines"])
    lines[3:3] = ["event: ping", 'data: {"type":"ping"}', "", ": comment", ""]
    events = run_anthropic(lines)
    assert simple_events(events) == simple_events(run_anthropic(load_case("B06")["input"]["lines"]))
    assert "error" not in kinds(events)


def test_unicode_line_separators_survive_the_openai_translator() -> None:
    case = load_case("C09")
    body = b"".join(case_chunks(c) for c in case["input"]["chunks"])
    events = translate_body("openai", 200, OK, body)
    assert simple_events(events) == case["expected"]["events"]


def test_anthropic_variant_u2028() -> None:
    lines = list(load_case("B06")["input"]["lines"])
    text_line = next(i for i, line in enumerate(lines) if '"text":"Done."' in line)
    lines[text_line] = lines[text_line].replace("Done.", "Do\u2028ne\u2029\u0085.")
    events = run_anthropic(lines)
    texts = [value_of(e).text for e in events if kinds([e]) == ["text_delta"]]
    assert texts == ["Do\u2028ne\u2029\u0085."]


def test_bom_split_across_chunks_survives_the_openai_translator() -> None:
    case = load_case("C10")
    events = translate_body("openai", 200, OK, b"".join(c10_chunks()))
    assert simple_events(events) == case["expected"]["events"]


def test_anthropic_bom_variant() -> None:
    lines = [
        line.replace('"input_tokens":20', '"input_tokens":50')
        for line in load_case("B06")["input"]["lines"]
    ]
    events = translate_body("anthropic", 200, OK, b"\xef\xbb\xbf" + lines_to_bytes(lines))
    usage = next(value_of(e) for e in events if kinds([e]) == ["usage"])
    assert usage.input_tokens == 50
