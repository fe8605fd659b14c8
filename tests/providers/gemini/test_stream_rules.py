"""The Gemini stream translator's rules, one body each (docs/adapters.md "Gemini")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from protocol_py.providers.gemini.parts import FUNCTION_CALL_ID, THOUGHT_SIGNATURE
from protocol_py.providers.gemini.stream import MAX_RAW_JSON_BYTES
from protocol_py.providers.gemini.usage import CacheCharge, map_gemini_usage
from protocol_py.rules.accumulate import accumulate
from protocol_py_gen.model.v1 import ErrorKind, StopReason, StreamEvent

from ._gemini import SYNTHETIC_ID, kinds, response_object, sse, translate

USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15}


def _event(parts: list[dict[str, Any]], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return response_object(parts, finish, usage=USAGE, modelVersion="gemini-2.5-flash", **extra)


def _text(events: list[StreamEvent]) -> str:
    return "".join(e.text_delta.text for e in events if e.text_delta is not None)


ANSWER = sse(_event([{"text": "Hel"}]), _event([{"text": "lo"}], "STOP"))


# --- framing and raw JSON after HTTP 200 -----------------------------------------------------


def test_crlf_framing_split_at_every_byte_gives_the_same_events() -> None:
    whole = translate(ANSWER)
    assert kinds(whole) == ["stream_start", "metadata", "text_delta", "text_delta", "usage", "stop"]
    for size in (1, 2, 3, 5, 7, 64):
        assert [bytes(e) for e in translate(ANSWER, chunk=size)] == [bytes(e) for e in whole]


RAW_ERROR = (
    b'{\r\n  "error": {\r\n    "code": 503,\r\n    "message": "The model is overloaded. '
    b'Please try again later.",\r\n    "status": "UNAVAILABLE"\r\n  }\r\n}\r\n'
)


@pytest.mark.parametrize("chunk", [None, 1, 9])
def test_raw_error_object_after_a_stop_event_is_a_terminal_error_not_a_success(
    chunk: int | None,
) -> None:
    events = translate(ANSWER + RAW_ERROR, chunk=chunk)
    assert kinds(events) == [
        "stream_start",
        "metadata",
        "text_delta",
        "text_delta",
        "usage",
        "error",
    ]
    error = events[-1].error
    assert error is not None
    assert (error.kind, error.retryable, error.http_status, error.vendor_code) == (
        ErrorKind.OVERLOADED,
        True,
        None,  # inside a 200 body: no HTTP status of its own; its code decided the kind
        "UNAVAILABLE",
    )
    assert error.message == "The model is overloaded. Please try again later."
    assert error.provider_request_id == "resp-1"
    assert (events[-2].usage.input_tokens, events[-2].usage.output_tokens) == (12, 3)


def test_raw_error_without_a_final_line_break_is_still_read() -> None:
    tail = b'{"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}'
    events = translate(ANSWER + tail)
    assert kinds(events)[-1] == "error"
    assert events[-1].error is not None and events[-1].error.kind == ErrorKind.TRANSIENT


def test_data_framed_error_object_is_a_terminal_error() -> None:
    error = {
        "error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    }
    events = translate(sse(_event([{"text": "Hel"}]), error, _event([{"text": "lo"}], "STOP")))
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "usage", "error"]
    assert events[-1].error is not None and events[-1].error.kind == ErrorKind.RATE_LIMITED


def test_error_object_wrapped_in_an_array_is_classified() -> None:
    body = (
        b'[{\r\n "error": {"code": 403, "message": "denied", "status": "PERMISSION_DENIED"}\r\n}]'
    )
    events = translate(body)
    assert kinds(events) == ["error"]
    assert events[0].error is not None
    assert events[0].error.kind == ErrorKind.PERMISSION_DENIED


def test_json_array_stream_without_alt_sse_is_translated_element_by_element() -> None:
    first, last = _event([{"text": "Hel"}]), _event([{"text": "lo"}], "STOP")
    body = b"[" + json.dumps(first).encode() + b"\n,\r\n" + json.dumps(last).encode() + b"]"
    events = translate(body, chunk=13)
    assert _text(events) == "Hello"
    assert kinds(events)[-2:] == ["usage", "stop"]


def test_text_that_is_not_json_outside_the_stream_is_an_error() -> None:
    events = translate(ANSWER + b"<html>upstream proxy error</html>\r\n")
    assert kinds(events)[-1] == "error"
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.TRANSIENT
    assert error.message == "upstream sent text that is not a JSON object outside the event stream"


def test_raw_json_value_is_bounded() -> None:
    huge = b'{"error": {"message": "' + b"x" * (MAX_RAW_JSON_BYTES + 10) + b'"}}\r\n'
    events = translate(ANSWER + huge)
    error = events[-1].error
    assert error is not None and error.kind == ErrorKind.TRANSIENT
    assert str(MAX_RAW_JSON_BYTES) in error.message


def test_malformed_data_line_is_a_transient_error() -> None:
    events = translate(sse(_event([{"text": "Hel"}])) + b'data: {"candid\r\n\r\n')
    assert kinds(events)[-2:] == ["usage", "error"]
    assert events[-1].error is not None
    assert events[-1].error.message == "malformed JSON in an SSE data line"


def test_body_ending_without_a_finish_reason_is_a_transient_error() -> None:
    events = translate(sse(_event([{"text": "Hel"}])))
    assert kinds(events)[-2:] == ["usage", "error"]
    error = events[-1].error
    assert error is not None and error.retryable
    assert error.message == "upstream stream ended before a finishReason"


def test_empty_candidates_and_usage_only_events_emit_nothing() -> None:
    body = sse(
        {"candidates": [], "responseId": "r", "modelVersion": "m"},
        {"usageMetadata": {"trafficType": "ON_DEMAND"}},
        _event([{"text": "ok"}], "STOP"),
    )
    events = translate(body)
    assert kinds(events) == ["stream_start", "metadata", "text_delta", "usage", "stop"]


# --- parts -------------------------------------------------------------------------------------


def test_thought_parts_then_signed_text_then_trailing_signed_empty_part() -> None:
    """Gemini 3's shape: thoughts, answer text, and the signature on a last empty part."""
    body = sse(
        _event([{"text": "plan ", "thought": True}, {"text": "more", "thought": True}]),
        _event([{"text": "Answer "}]),
        _event([{"text": "done."}]),
        _event([{"text": "", "thoughtSignature": "SIG3"}], "STOP"),
    )
    new = translate(body)
    folded = accumulate(new).message.content
    assert [b.thinking.text for b in folded if b.thinking] == ["plan more"]
    texts = [b.text for b in folded if b.text is not None]
    assert [(t.text, [(v.location, v.value) for v in t.vendor_data]) for t in texts] == [
        ("Answer done.", []),
        ("", [(THOUGHT_SIGNATURE, b"SIG3")]),
    ]
    old = accumulate(translate(body, text_vendor_data=False)).message.content
    assert [next(iter(b.to_dict())) for b in old] == ["thinking", "text", "thinking"]
    assert old[2].thinking is not None and old[2].thinking.signature == b"SIG3"


def test_two_signed_text_parts_are_never_merged() -> None:
    body = sse(
        _event(
            [{"text": "one", "thoughtSignature": "A"}, {"text": "two", "thoughtSignature": "B"}]
        ),
        _event([{"text": " more"}], "STOP"),
    )
    texts = [b.text for b in accumulate(translate(body)).message.content if b.text]
    assert [(t.text, [v.value for v in t.vendor_data]) for t in texts] == [
        ("one", [b"A"]),
        ("two more", [b"B"]),
    ]
    old = translate(body, text_vendor_data=False)
    assert [e.thinking_signature.signature for e in old if e.thinking_signature] == [b"A", b"B"]
    folded = accumulate(old).message.content
    assert [next(iter(b.to_dict())) for b in folded] == ["text", "thinking", "text", "thinking"]


def test_signed_thought_part_signs_its_thinking_block() -> None:
    body = sse(
        _event([{"text": "why", "thought": True, "thoughtSignature": "T"}, {"text": "x"}], "STOP")
    )
    folded = accumulate(translate(body)).message.content
    assert folded[0].thinking is not None
    assert (folded[0].thinking.text, folded[0].thinking.signature) == ("why", b"T")


def test_parallel_calls_one_per_event_keep_vendor_ids_and_only_the_first_signature() -> None:
    body = sse(
        _event(
            [
                {
                    "functionCall": {"name": "add", "args": {"a": 2}, "id": "id1"},
                    "thoughtSignature": "S1",
                }
            ]
        ),
        _event([{"functionCall": {"name": "add", "args": {"a": 3}, "id": "id2"}}]),
        _event([{"text": ""}], "STOP"),
    )
    events = translate(body)
    starts = [e.tool_call_start for e in events if e.tool_call_start is not None]
    assert [(s.id, s.name, [(v.location, v.value) for v in s.vendor_data]) for s in starts] == [
        ("id1", "add", [(THOUGHT_SIGNATURE, b"S1"), (FUNCTION_CALL_ID, b"id1")]),
        ("id2", "add", [(FUNCTION_CALL_ID, b"id2")]),
    ]
    assert events[-1].stop is not None
    assert (events[-1].stop.reason, events[-1].stop.model_affirmed) == (StopReason.TOOL_USE, False)


def test_call_ids_are_unique_in_the_conversation_never_a_per_stream_counter() -> None:
    """Two calls to one tool without ids, and a vendor id the conversation already used."""
    body = sse(
        _event(
            [
                {"functionCall": {"name": "f", "args": {}}},
                {"functionCall": {"name": "f", "args": {}}},
                {"functionCall": {"name": "f", "args": {}, "id": "taken"}},
            ],
            "STOP",
        )
    )
    ids = [e.tool_call_start.id for e in translate(body, used_ids=("taken",)) if e.tool_call_start]
    assert len(set(ids)) == 3
    assert all(SYNTHETIC_ID.fullmatch(i) for i in ids)
    again = [
        e.tool_call_start.id for e in translate(body, used_ids=("taken",)) if e.tool_call_start
    ]
    assert set(again).isdisjoint(ids)  # another stream of the same conversation: new ids
    vendor = [e.tool_call_start for e in translate(body, used_ids=("taken",)) if e.tool_call_start][
        -1
    ]
    assert vendor is not None  # the colliding vendor id is kept as vendor data to send back
    assert [(v.location, v.value) for v in vendor.vendor_data] == [(FUNCTION_CALL_ID, b"taken")]


def test_one_vendor_id_on_two_calls_of_a_response_is_sent_back_for_the_first_only() -> None:
    body = sse(
        _event(
            [
                {"functionCall": {"name": "f", "args": {}, "id": "dup"}},
                {"functionCall": {"name": "f", "args": {}, "id": "dup"}},
            ],
            "STOP",
        )
    )
    first, second = [e.tool_call_start for e in translate(body) if e.tool_call_start]
    assert first is not None and second is not None
    assert (first.id, [(v.location, v.value) for v in first.vendor_data]) == (
        "dup",
        [(FUNCTION_CALL_ID, b"dup")],
    )
    assert SYNTHETIC_ID.fullmatch(second.id)
    assert list(second.vendor_data) == []  # an ambiguous vendor id is never replayed


def test_call_without_arguments_has_no_delta() -> None:
    events = translate(sse(_event([{"functionCall": {"name": "now"}}], "STOP")))
    assert kinds(events)[2:5] == ["tool_call_start", "tool_call_done", "usage"]


def test_vertex_streamed_function_call_arguments_are_assembled() -> None:
    body = sse(
        _event(
            [{"functionCall": {"name": "weather", "willContinue": True}, "thoughtSignature": "VS"}]
        ),
        _event(
            [
                {
                    "functionCall": {
                        "partialArgs": [
                            {"jsonPath": "$.location", "stringValue": "San", "willContinue": True}
                        ],
                        "willContinue": True,
                    }
                }
            ]
        ),
        _event(
            [
                {
                    "functionCall": {
                        "partialArgs": [
                            {"jsonPath": "$.location", "stringValue": " Francisco"},
                            {"jsonPath": "$.days", "numberValue": 3},
                            {"jsonPath": "$.units[0]", "stringValue": "C"},
                            {"jsonPath": "$.detail.hourly", "boolValue": True},
                        ],
                        "willContinue": True,
                    }
                }
            ]
        ),
        _event([{"functionCall": {}}]),
        _event([{"text": ""}], "STOP"),
    )
    events = translate(body, chunk=11)
    assert kinds(events)[2:5] == ["tool_call_start", "tool_call_delta", "tool_call_done"]
    delta = events[3].tool_call_delta
    assert delta is not None
    assert json.loads(delta.arguments_fragment) == {
        "location": "San Francisco",
        "days": 3,
        "units": ["C"],
        "detail": {"hourly": True},
    }
    start = events[2].tool_call_start
    assert start is not None and [v.value for v in start.vendor_data] == [b"VS"]


def test_streamed_call_left_open_is_closed_by_the_finish() -> None:
    body = sse(
        _event([{"functionCall": {"name": "f", "willContinue": True}}]),
        _event(
            [
                {
                    "functionCall": {
                        "partialArgs": [{"jsonPath": "$.q", "stringValue": "x"}],
                        "willContinue": True,
                    }
                }
            ],
            "STOP",
        ),
    )
    events = translate(body)
    assert kinds(events)[2:] == [
        "tool_call_start",
        "tool_call_delta",
        "tool_call_done",
        "usage",
        "stop",
    ]


def test_inline_data_and_code_parts_emit_nothing() -> None:
    body = sse(
        _event(
            [
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                {"executableCode": {"language": "PYTHON", "code": "1"}},
                {"text": "ok"},
            ],
            "STOP",
        )
    )
    assert kinds(translate(body)) == ["stream_start", "metadata", "text_delta", "usage", "stop"]


# --- finish reasons ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "stop", "affirmed"),
    [
        ("STOP", StopReason.END_TURN, True),
        ("MAX_TOKENS", StopReason.MAX_TOKENS, True),
        ("RECITATION", StopReason.CONTENT_FILTERED, True),
        ("LANGUAGE", StopReason.END_TURN, False),
        ("TOO_MANY_TOOL_CALLS", StopReason.END_TURN, False),
        ("SOMETHING_NEW", StopReason.END_TURN, False),
    ],
)
def test_finish_reasons(reason: str, stop: StopReason, affirmed: bool) -> None:
    events = translate(sse(_event([{"text": "x"}], reason)))
    last = events[-1].stop
    assert last is not None
    assert (last.reason, last.model_affirmed, last.vendor_reason) == (stop, affirmed, reason)


def test_max_tokens_after_a_call_stays_max_tokens() -> None:
    events = translate(sse(_event([{"functionCall": {"name": "f", "args": {}}}], "MAX_TOKENS")))
    assert events[-1].stop is not None and events[-1].stop.reason == StopReason.MAX_TOKENS


@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_malformed_or_unexpected_tool_call_is_an_error_never_an_empty_success(reason: str) -> None:
    obj = _event([], reason)
    obj["candidates"][0]["finishMessage"] = "Malformed function call: print(x"
    events = translate(sse(obj))
    assert kinds(events) == ["stream_start", "metadata", "usage", "error"]
    error = events[-1].error
    assert error is not None
    assert (error.kind, error.retryable, error.vendor_code, error.message) == (
        ErrorKind.TRANSIENT,
        True,
        reason,
        "Malformed function call: print(x",
    )


def test_safety_finish_with_blocked_categories_is_a_moderation_notice() -> None:
    obj = _event([], "PROHIBITED_CONTENT")
    obj["candidates"][0]["safetyRatings"] = [
        {"category": "HARM_CATEGORY_A", "blocked": True},
        {"category": "HARM_CATEGORY_B", "probability": "LOW"},
        {"category": "HARM_CATEGORY_C", "blocked": True},
    ]
    events = translate(sse(obj))
    notice = events[-3].safety_notice
    assert notice is not None
    assert dict(notice.attrs) == {
        "gemini.scope": "response",
        "gemini.finish_reason": "PROHIBITED_CONTENT",
        "gemini.blocked_categories": "HARM_CATEGORY_A,HARM_CATEGORY_C",
    }
    assert events[-1].stop is not None
    assert events[-1].stop.reason == StopReason.CONTENT_FILTERED


# --- stop sequences ---------------------------------------------------------------------------


def test_stop_sequence_split_across_deltas_cuts_the_text_and_is_reported() -> None:
    body = sse(
        _event([{"text": "alpha EN"}]),
        _event([{"text": "D beta"}]),
        _event([{"text": " never"}], "STOP"),
    )
    events = translate(body, stop_sequences=("END", "zzz"), chunk=4)
    assert _text(events) == "alpha "
    assert kinds(events)[-2:] == ["usage", "stop"]
    stop = events[-1].stop
    assert stop is not None
    assert (stop.reason, stop.matched_stop_sequence, stop.model_affirmed, stop.vendor_reason) == (
        StopReason.STOP_SEQUENCE,
        "END",
        False,
        None,
    )


def test_earliest_stop_sequence_wins_and_text_before_it_is_complete() -> None:
    events = translate(sse(_event([{"text": "a--b##c"}], "STOP")), stop_sequences=("##", "--"))
    assert (_text(events), events[-1].stop.matched_stop_sequence) == ("a", "--")  # type: ignore[union-attr]


def test_held_back_text_is_flushed_when_no_sequence_matches() -> None:
    body = sse(
        _event([{"text": "ab"}]),
        _event([{"functionCall": {"name": "f"}}]),
        _event([{"text": "cEN"}], "STOP"),
    )
    events = translate(body, stop_sequences=("END",))
    names = kinds(events)
    call = names.index("tool_call_start")
    assert _text(events[:call]) == "ab"  # held text is flushed before the call
    assert _text(events[call:]) == "cEN"
    assert events[-1].stop is not None and events[-1].stop.reason == StopReason.TOOL_USE


def test_stop_sequence_inside_a_signed_part_keeps_the_signature() -> None:
    body = sse(_event([{"text": "keep STOP me", "thoughtSignature": "SG"}], "STOP"))
    folded = accumulate(translate(body, stop_sequences=("STOP",))).message.content
    assert folded[0].text is not None
    assert (folded[0].text.text, [v.value for v in folded[0].text.vendor_data]) == (
        "keep ",
        [b"SG"],
    )
    old = accumulate(translate(body, stop_sequences=("STOP",), text_vendor_data=False))
    assert old.message.content[-1].thinking is not None
    assert old.message.content[-1].thinking.signature == b"SG"


# --- usage ----------------------------------------------------------------------------------------


def test_only_the_last_counts_are_used() -> None:
    first = _event([{"text": "a"}])
    first["usageMetadata"] = {"promptTokenCount": 211, "totalTokenCount": 211}
    last = _event([{"text": "b"}], "STOP")
    last["usageMetadata"] = {
        "promptTokenCount": 646,
        "candidatesTokenCount": 2,
        "totalTokenCount": 648,
    }
    usage = translate(sse(first, last))[-2].usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (646, 2)


def test_usage_older_convention_thoughts_inside_candidates() -> None:
    usage = map_gemini_usage(
        {
            "promptTokenCount": 10,
            "candidatesTokenCount": 50,
            "thoughtsTokenCount": 30,
            "totalTokenCount": 60,
        }
    )
    assert (usage.output_tokens, usage.reasoning_tokens, usage.reasoning_already_counted) == (
        50,
        30,
        True,
    )
    assert usage.vendor_total_tokens is None


def test_usage_total_matching_neither_form_is_kept() -> None:
    usage = map_gemini_usage(
        {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 99}
    )
    assert (usage.vendor_total_tokens, usage.reasoning_already_counted) == (99, None)


def test_usage_tool_use_prompt_counts_as_input_and_component() -> None:
    usage = map_gemini_usage(
        {
            "promptTokenCount": 100,
            "cachedContentTokenCount": 40,
            "toolUsePromptTokenCount": 7,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 2,
            "totalTokenCount": 114,
            "toolUsePromptTokensDetails": [{"modality": "IMAGE", "tokenCount": 7}],
            "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": 5}],
        }
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (67, 40, 5)
    assert [(c.name, c.value) for c in usage.components] == [
        ("tool_use_prompt_image_tokens", 7),
        ("tool_use_prompt_tokens", 7),
    ]
    assert usage.vendor_total_tokens is None


def test_usage_of_a_completion_that_created_an_explicit_cache() -> None:
    usage = map_gemini_usage(
        {
            "promptTokenCount": 5000,
            "cachedContentTokenCount": 4096,
            "candidatesTokenCount": 10,
            "totalTokenCount": 5010,
        },
        CacheCharge(tokens=4096, ttl_seconds=3600),
    )
    assert (
        usage.input_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
        usage.cache_storage_token_seconds,
    ) == (904, 0, 4096, 4096 * 3600)


def test_a_bad_count_is_dropped_not_fatal() -> None:
    usage = map_gemini_usage({"promptTokenCount": -3, "candidatesTokenCount": "7"})
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
