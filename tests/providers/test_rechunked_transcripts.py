"""Property: every vendor transcript (testdata/vendor/, the shared third-party recordings and the
agent-loop cases' streams), re-chunked at random byte boundaries and with its text deltas split
at random UTF-16 code-unit boundaries (a gateway that slices text by code unit, halves of a
surrogate pair in different events), translates to the same accumulated message, and every
event it yields encodes (a lone surrogate would fail the encoding: a bare gRPC UNKNOWN)."""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol_py.providers.anthropic.stream import AnthropicStreamTranslator
from protocol_py.providers.http.sse import SSEEvent, SSEParser
from protocol_py.providers.openai.stream import OpenAIStreamTranslator
from protocol_py.rules.accumulate import AccumulatedResponse, accumulate
from protocol_py_gen.content.v1 import Message
from protocol_py_gen.model.v1 import StreamEvent
from tests.support.adapters import (
    RECORDED_ABSENT,
    SHARED_RECORDED,
    VENDOR,
    fixture_vendor,
    lines_to_bytes,
    load_case,
    load_fixture,
    transcript_params,
)

STREAMS = transcript_params(VENDOR, streams_only=True) + transcript_params(
    SHARED_RECORDED, streams_only=True, absent_reason=RECORDED_ABSENT
)

CASE_STREAMS = [
    ("D06", "anthropic", ("lines",)),
    ("D08", "anthropic", ("lines",)),
    ("D09", "openai", ("lines", "A_one_call_per_chunk")),
    ("D09", "openai", ("lines", "B_both_calls_in_one_chunk")),
    ("D11", "openai", ("lines",)),
    ("D11", "openai", ("lines_variant_B",)),
    ("D12", "openai", ("lines",)),
    ("D13", "openai", ("lines",)),
]


def translate(vendor: str, headers: dict[str, str], chunks: list[bytes]) -> list[StreamEvent]:
    translator: AnthropicStreamTranslator | OpenAIStreamTranslator
    if vendor == "anthropic":
        translator = AnthropicStreamTranslator(headers)
    else:
        translator = OpenAIStreamTranslator(headers)
    parser = SSEParser()
    out: list[StreamEvent] = []
    for chunk in chunks:
        for sse in parser.feed(chunk):
            out.extend(translator.on_event(sse))
    out.extend(translator.on_eof())
    for event in out:
        bytes(event)  # every event encodes: no lone surrogate, never UNKNOWN on the wire
    return out


def events_of(body: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    events = parser.feed(body)
    parser.close()
    return events


def utf16_split(text: str, at: int) -> tuple[str, str]:
    """``text`` cut after ``at`` UTF-16 code units (possibly between a surrogate pair)."""
    units = text.encode("utf-16-le", "surrogatepass")
    return (
        units[: 2 * at].decode("utf-16-le", "surrogatepass"),
        units[2 * at :].decode("utf-16-le", "surrogatepass"),
    )


def _text_slots(vendor: str, obj: Any) -> list[tuple[dict[str, Any], str]]:
    """(container, key) of each text fragment of one parsed SSE data object."""
    slots: list[tuple[dict[str, Any], str]] = []
    if not isinstance(obj, dict):
        return slots
    if vendor == "anthropic":
        delta = obj.get("delta")
        if obj.get("type") == "content_block_delta" and isinstance(delta, dict):
            for key in ("text", "thinking"):
                if isinstance(delta.get(key), str) and delta[key]:
                    slots.append((delta, key))
        return slots
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict):
            for key in ("content", "reasoning_content", "reasoning", "refusal"):
                if isinstance(delta.get(key), str) and delta[key]:
                    slots.append((delta, key))
    return slots


def _only(vendor: str, obj: dict[str, Any], container: dict[str, Any], key: str, part: str) -> Any:
    """A copy of the event that carries nothing but the fragment ``part`` in ``key``."""
    if vendor == "anthropic":
        return {"type": obj["type"], "index": obj.get("index"), "delta": {**container, key: part}}
    keep = {k: v for k, v in obj.items() if k in ("id", "model", "object", "created")}
    return {**keep, "choices": [{"index": 0, "delta": {key: part}}]}


def frame(event: str, data: str) -> str:
    head = f"event: {event}\n" if event not in ("", "message") else ""
    return f"{head}data: {data}\n\n"


def split_texts(vendor: str, body: bytes, data: st.DataObject) -> bytes:
    """The body with each text fragment of at least two code units split in two events."""
    out: list[str] = []
    for sse in events_of(body):
        try:
            obj = json.loads(sse.data)
        except ValueError:
            out.append(frame(sse.event, sse.data))
            continue
        pieces: list[Any] = [obj]
        for container, key in _text_slots(vendor, obj):
            units = len(container[key].encode("utf-16-le", "surrogatepass")) // 2
            if units < 2:
                continue
            at = data.draw(st.integers(1, units - 1), label="utf-16 cut")
            head, tail = utf16_split(container[key], at)
            before = copy.deepcopy(obj)
            for c, k in _text_slots(vendor, before):
                if c[k] == container[key]:
                    c[k] = head
                    break
            pieces = [before, _only(vendor, obj, container, key, tail)]
            break  # one split per event
        out.extend(frame(sse.event, json.dumps(p)) for p in pieces)  # \\ud83d escapes
    return "".join(out).encode("utf-8")


def rechunk(body: bytes, data: st.DataObject) -> list[bytes]:
    cuts = sorted(
        set(data.draw(st.lists(st.integers(0, len(body)), max_size=24), label="byte cuts"))
    )
    bounds = [0, *cuts, len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def folded(events: list[StreamEvent]) -> AccumulatedResponse:
    return accumulate(events, message_id="m")


_FRESH = re.compile(r"(call|toolu)_[0-9A-HJKMNP-TV-Z]{26}")
"""A fresh tool-call id (call_ids): random, so compared by position."""


def _positional(result: AccumulatedResponse) -> tuple[Message, dict[str, str]]:
    message = copy.deepcopy(result.message)
    names: dict[str, str] = {}
    for block in message.content:
        use = block.tool_use
        if use is not None and _FRESH.fullmatch(use.id):
            use.id = names.setdefault(use.id, f"fresh-{len(names)}")
    arguments = {names.get(k, k): v for k, v in result.tool_arguments.items()}
    return message, arguments


def same(a: AccumulatedResponse, b: AccumulatedResponse) -> None:
    assert _positional(a) == _positional(b)
    assert (a.usage, a.stop, a.error, a.complete) == (b.usage, b.stop, b.error, b.complete)


SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _check(vendor: str, headers: dict[str, str], body: bytes, data: st.DataObject) -> None:
    want = folded(translate(vendor, headers, [body]))
    mutated = split_texts(vendor, body, data)
    same(folded(translate(vendor, headers, rechunk(mutated, data))), want)
    same(folded(translate(vendor, headers, rechunk(body, data))), want)


@pytest.mark.parametrize("path", STREAMS)
@SETTINGS
@given(data=st.data())
def test_a_transcript_rechunked_and_split_gives_the_same_message(
    path: Path, data: st.DataObject
) -> None:
    meta, body = load_fixture(path)
    _check(fixture_vendor(meta), meta["http"]["headers"], body, data)


@pytest.mark.parametrize(
    ("case_id", "vendor", "keys"), CASE_STREAMS, ids=[f"{c}-{k[-1]}" for c, _, k in CASE_STREAMS]
)
@SETTINGS
@given(data=st.data())
def test_a_case_stream_rechunked_and_split_gives_the_same_message(
    case_id: str, vendor: str, keys: tuple[str, ...], data: st.DataObject
) -> None:
    lines: Any = load_case(case_id)["input"]
    for key in keys:
        lines = lines[key]
    headers = {"content-type": "text/event-stream", "request-id": "req_1"}
    _check(vendor, headers, lines_to_bytes(lines), data)


def test_a_character_split_between_two_deltas_is_joined() -> None:
    """The halves of U+1F600 in two OpenAI chunks: one character, never U+FFFD."""
    head, tail = utf16_split("a\U0001f600b", 2)
    assert (head, tail) == ("a\ud83d", "\ude00b")
    body = (
        "".join(
            frame(
                "", json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": part}}]})
            )
            for part in (head, tail)
        )
        + frame(
            "",
            json.dumps(
                {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            ),
        )
        + frame("", "[DONE]")
    )
    result = folded(translate("openai", {}, [body.encode()]))
    assert [b.text.text for b in result.message.content if b.text] == ["a\U0001f600b"]


def test_a_half_character_that_never_pairs_becomes_a_replacement_character() -> None:
    body = "".join(
        frame("", json.dumps(chunk))
        for chunk in (
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "x\ud83d"}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "\ude00"}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "\ud83dy"}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "z\ud83d"}}]},
            {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        )
    ) + frame("", "[DONE]")
    result = folded(translate("openai", {}, [body.encode()]))
    assert [b.text.text for b in result.message.content if b.text] == ["x\U0001f600\ufffdyz\ufffd"]
