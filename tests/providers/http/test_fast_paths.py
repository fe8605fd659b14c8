"""The adapter full path's fast paths give exactly what the general code gives.

* :class:`~protocol_py.providers.http.sse.SSEParser` splits a chunk without CR at once and
  handles blank and ``data:`` lines inline; the CR path (line by line) is the reference.
* :func:`protocol_py.providers.http.events.text` / ``thinking`` build the event from a copied
  template instead of the dataclass constructor.
* :func:`protocol_py.rules.stream_order.event_member` reads a text delta with two C-level reads.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from protocol_py.codec import wire
from protocol_py.errors import StreamOrderError
from protocol_py.providers.http import events as ev
from protocol_py.providers.http.sse import MAX_SSE_EVENT_BYTES, SSEEvent, SSELimitError, SSEParser
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.rules.stream_order import StreamOrderChecker, event_member
from protocol_py_gen.content.v1 import VendorData
from protocol_py_gen.model.v1 import (
    ErrorKind,
    StreamEvent,
    StreamMetadata,
    TextDelta,
    ThinkingDelta,
    ToolCallStart,
    Usage,
)

# Every kind of line a block can hold: data with and without the space, a field without a colon,
# comments, event/id/retry (valid and not), multi-line data, an empty data line, invalid UTF-8,
# U+2028 inside data, a data-less block, and blank lines in a row.
_BLOCKS = [
    b"data: one",
    b"data:two\ndata:  three",
    b'event: delta\nid: 7\nretry: 150\ndata: {"x": 1}',
    b": keep-alive\ndata",
    b"data:",
    b"id: bad\x00id\nretry: 1x\ndata: \xff\xfe broken \xe2\x80\xa8 sep",
    b"event: only-type",
    b"datax: not data\ndata: after\n",
    b"DATA: upper case is another field\ndata: \xc3\xa9t\xc3\xa9",
]


def _parse(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


def test_lf_fast_path_gives_the_events_of_the_crlf_line_by_line_path() -> None:
    lf = b"\n\n".join(_BLOCKS) + b"\n\n"
    crlf = lf.replace(b"\n", b"\r\n")  # a CR in every chunk: the general path only
    expected = _parse([crlf])
    assert len(expected) == 8
    assert expected[0] == SSEEvent(event="message", data="one")
    assert expected[1].data == "two\n three"
    assert expected[2] == SSEEvent(event="delta", data='{"x": 1}', id="7", retry=150)
    assert expected[5].data == "\ufffd\ufffd broken \u2028 sep"
    assert expected[5].id == "7"  # an id with NUL is ignored
    assert expected[7].data == "\u00e9t\u00e9"
    for size in (1, 2, 3, 7, 64, len(lf)):
        chunks = [lf[i : i + size] for i in range(0, len(lf), size)]
        assert _parse(chunks) == expected, size


def test_lf_fast_path_keeps_a_partial_line_and_the_pending_block() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\ndata: b") == []
    assert parser.has_partial
    assert parser.feed(b"c\n") == []
    assert parser.feed(b"\ndata: next") == [SSEEvent(event="message", data="a\nbc")]
    assert parser.feed(b"\r\n\r\n") == [SSEEvent(event="message", data="next")]


def test_lf_fast_path_event_limit_names_the_bound_after_earlier_events() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: before\n\n") == [SSEEvent(event="message", data="before")]
    line = b"data: " + b"x" * (1024 * 1024) + b"\n"
    lines = MAX_SSE_EVENT_BYTES // len(line) + 1
    with pytest.raises(SSELimitError, match=f"exceed {MAX_SSE_EVENT_BYTES} bytes") as raised:
        parser.feed(line * lines)
    assert "xxx" not in str(raised.value)  # the content is never echoed


@pytest.mark.parametrize(
    ("build", "cls", "field", "delta_cls"),
    [
        (ev.text, StreamEvent, "text_delta", TextDelta),
        (ev.thinking, StreamEvent, "thinking_delta", ThinkingDelta),
    ],
)
def test_delta_events_equal_constructor_built_ones(
    build: object, cls: type[StreamEvent], field: str, delta_cls: type[TextDelta]
) -> None:
    assert callable(build)
    built = build("h\u00e9llo \U0001f600")
    delta: Any = delta_cls(text="h\u00e9llo \U0001f600")
    reference = cls(**{field: delta})
    assert built == reference
    assert vars(built).keys() == vars(reference).keys()
    assert vars(getattr(built, field)) == vars(getattr(reference, field))
    assert wire.encode(built) == bytes(reference)
    other = build("x")
    getattr(other, field).text = "changed"  # separate instances: nothing shared
    assert getattr(built, field).text == "h\u00e9llo \U0001f600"


def test_template_refuses_a_message_with_a_map_field() -> None:
    with pytest.raises(TypeError, match=r"StreamMetadata: mutable defaults \['attrs'\]"):
        ev._blank(StreamMetadata)


def test_template_gives_each_message_its_own_empty_repeated_fields() -> None:
    blank = ev._blank(ToolCallStart)
    assert blank == ({"id": "", "name": "", "_unknown_fields": b""}, ("vendor_data",))
    first = ev._new(ToolCallStart, blank, "id", "c1")
    second = ev._new(ToolCallStart, blank, "id", "c2")
    assert first == ToolCallStart(id="c1") and second == ToolCallStart(id="c2")
    first.vendor_data.append(VendorData(location="x.y", value=b"v"))
    assert second.vendor_data == []
    # TextDelta (protocol 1.2: vendor_data) is built the same way on the hot path.
    a, b = ev.text("a"), ev.text("b")
    assert a.text_delta is not None and b.text_delta is not None
    assert (
        a.text_delta.vendor_data == [] and a.text_delta.vendor_data is not b.text_delta.vendor_data
    )


def test_event_member_text_delta_fast_path_still_rejects_a_second_member() -> None:
    assert event_member(ev.text("a")) == ("text_delta", TextDelta(text="a"))
    assert event_member(StreamEvent(usage=Usage(output_tokens=3))) == (
        "usage",
        Usage(output_tokens=3),
    )
    assert event_member(StreamEvent()) == ("", None)
    both = StreamEvent(text_delta=TextDelta(text="a"), usage=Usage())
    with pytest.raises(RuntimeError, match="more than one field set in oneof"):
        event_member(both)
    checker = StreamOrderChecker()
    with pytest.raises(StreamOrderError) as raised:
        checker.check(both)
    assert raised.value.rule == "stream.event.multiple"


def test_order_checker_text_delta_fast_path_keeps_every_rule() -> None:
    checker = StreamOrderChecker()
    checker.check(ev.start("req_1"))
    checker.check(ev.text("fine"))
    assert checker.index == 2
    cases: list[tuple[StreamEvent, str]] = [
        (StreamEvent(text_delta=TextDelta(text="")), "stream.text_delta.empty"),
        (StreamEvent(text_delta=TextDelta(text=b"bytes")), "stream.event.invalid"),  # type: ignore[arg-type]
        (StreamEvent(text_delta=TextDelta(text="a"), usage=Usage()), "stream.event.multiple"),
    ]
    for event, rule in cases:
        with pytest.raises(StreamOrderError) as raised:
            StreamOrderChecker().check(event)
        assert raised.value.rule == rule
    checker.check(StreamEvent(usage=Usage(output_tokens=1)))
    with pytest.raises(StreamOrderError) as raised:
        checker.check(ev.text("late"))
    assert raised.value.rule == "stream.order.content_after_usage"


@pytest.mark.parametrize(
    "data", ['{"id": "c1", "choices": []} x', '{"id": "c1"}{}', "{\"id\": 'c1'}", "\ufeff{}"]
)
def test_translator_json_fast_path_rejects_what_json_loads_rejects(data: str) -> None:
    translator = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9").make_translator({})
    events = translator.on_event(SSEEvent(event="message", data=data))
    assert events[-1].error is not None
    assert events[-1].error.kind == ErrorKind.TRANSIENT
    assert events[-1].error.message == "malformed JSON in an SSE data line"
    assert translator.finished


def test_translator_json_fast_path_reads_a_chunk_with_surrounding_whitespace() -> None:
    translator = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9").make_translator({})
    data = ' \t{"id": "c1", "choices": [{"index": 0, "delta": {"content": "hi"}}]}\r\n '
    events = translator.on_event(SSEEvent(event="message", data=data))
    assert events == [ev.start("c1"), ev.text("hi")]


def test_sse_events_of_the_fast_path_are_ordinary_frozen_sse_events() -> None:
    (event,) = SSEParser().feed(b"event: e\nid: 4\nretry: 9\ndata: x\n\n")
    reference = SSEEvent(event="e", data="x", id="4", retry=9)
    assert type(event) is SSEEvent
    assert event == reference
    assert hash(event) == hash(reference)
    assert repr(event) == repr(reference)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.data = "changed"  # type: ignore[misc]
