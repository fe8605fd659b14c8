"""``SSEParser(other_lines=True)``: lines outside the event-stream grammar are dispatched in body
order as OTHER_LINE events; without the option nothing changes (WHATWG rules)."""

from __future__ import annotations

from protocol_py.providers.http.sse import OTHER_LINE, SSEEvent, SSEParser

BODY = (
    b": keep-alive\r\n"
    b'data: {"a":1}\r\n\r\n'
    b"{\r\n"
    b'  "error": {"code": 503}\r\n'
    b"}\r\n"
    b"event: x\r\nid: 7\r\nretry: 10\r\ndata: two\r\n\r\n"
    b"trailing without newline"
)


def _all(parser: SSEParser, body: bytes, step: int) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    for i in range(0, len(body), step):
        out += parser.feed(body[i : i + step])
    return out + parser.close()


def test_other_lines_are_dispatched_in_order_and_the_last_one_at_close() -> None:
    events = _all(SSEParser(other_lines=True), BODY, len(BODY))
    assert [(e.event, e.data) for e in events] == [
        ("message", '{"a":1}'),
        (OTHER_LINE, "{"),
        (OTHER_LINE, '  "error": {"code": 503}'),
        (OTHER_LINE, "}"),
        ("x", "two"),
        (OTHER_LINE, "trailing without newline"),
    ]
    assert events[4].id == "7" and events[4].retry == 10


def test_every_split_point_gives_the_same_events() -> None:
    whole = _all(SSEParser(other_lines=True), BODY, len(BODY))
    for step in range(1, 12):
        assert _all(SSEParser(other_lines=True), BODY, step) == whole


def test_an_unterminated_data_line_is_still_discarded_at_close() -> None:
    parser = SSEParser(other_lines=True)
    assert parser.feed(b'data: {"cut') == []
    assert parser.close() == []


def test_without_the_option_other_lines_are_ignored() -> None:
    events = _all(SSEParser(), BODY, 5)
    assert [(e.event, e.data) for e in events] == [("message", '{"a":1}'), ("x", "two")]
