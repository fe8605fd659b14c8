"""Invalid UTF-8 in an event stream is marked on its event, never silently replaced
(docs/decisions.md#d34); a character split across network chunks is not invalid."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_py.providers.http.sse import OTHER_LINE, SSEEvent, SSEParser


def _feed(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    return out


def test_invalid_data_line_marks_its_event_alone() -> None:
    events = _feed(SSEParser(), [b"data: ok\n\ndata: caf\xe9!\n\ndata: after\n\n"])
    assert [(e.data, e.invalid_utf8) for e in events] == [
        ("ok", False),
        ("caf\ufffd!", True),
        ("after", False),
    ]


def test_invalid_line_in_a_multi_line_event_marks_the_event() -> None:
    events = _feed(SSEParser(), [b"data: a\ndata: \xff\xfe\ndata: c\n\n"])
    assert len(events) == 1
    assert events[0].invalid_utf8 and events[0].data == "a\n\ufffd\ufffd\nc"


def test_invalid_event_type_marks_the_event() -> None:
    events = _feed(SSEParser(), [b"event: d\xc3\ndata: {}\r\n\r\n"])
    assert [(e.event, e.invalid_utf8) for e in events] == [("d\ufffd", True)]


def test_invalid_other_line_is_marked() -> None:
    events = _feed(SSEParser(other_lines=True), [b'{"error": "\xed\xa0\x80"}\n'])
    assert [(e.event, e.invalid_utf8) for e in events] == [(OTHER_LINE, True)]


def test_invalid_bytes_in_a_comment_are_ignored_like_the_comment() -> None:
    events = _feed(SSEParser(), [b": keep-alive \xff\ndata: x\n\n"])
    assert [(e.data, e.invalid_utf8) for e in events] == [("x", False)]


def test_a_block_without_data_does_not_carry_its_mark_to_the_next_event() -> None:
    events = _feed(SSEParser(), [b"event: \xff\n\ndata: clean\n\n"])
    assert [(e.event, e.data, e.invalid_utf8) for e in events] == [("message", "clean", False)]


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=6), st.data())
def test_valid_utf8_rechunked_at_any_byte_is_never_reported(
    texts: list[str], data: st.DataObject
) -> None:
    body = b"".join(b"data: " + t.encode("utf-8") + b"\n\n" for t in texts)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=12)))
    chunks = [body[i:j] for i, j in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    events = _feed(SSEParser(), chunks)
    assert [e.data for e in events] == texts
    assert not any(e.invalid_utf8 for e in events)
