"""WHATWG event-stream parsing: terminators, BOM, comments, control-only blocks (C09, C10, B22)."""

from __future__ import annotations

import json

import pytest

from protocol_py.providers.http.sse import SSEEvent, SSEParser, aiter_sse

from ...support.adapters import case_chunks, lines_to_bytes, load_case


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    return out


def every_split(body: bytes) -> list[list[bytes]]:
    """Every one-cut and two-cut split of ``body`` (two-cut on a stride to stay fast)."""
    splits = [[body[:i], body[i:]] for i in range(len(body) + 1)]
    step = max(1, len(body) // 40)
    for i in range(0, len(body) + 1, step):
        for j in range(i, len(body) + 1, step):
            splits.append([body[:i], body[i:j], body[j:]])
    return splits


def c09_body() -> bytes:
    case = load_case("C09")
    return b"".join(case_chunks(c) for c in case["input"]["chunks"])


def c10_chunks() -> list[bytes]:
    """The C10 chunk list, built from the case's description (BOM split over two chunks)."""

    def chunk(content: str, finish: str | None = None) -> bytes:
        obj = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    return [
        b"\xef\xbb",
        b"\xbf" + chunk("first"),
        b"id: 42\n" + chunk("second"),
        b"\n\n",
        b": keep-alive\n\n",
        b"retry: 3000\n\n",
        b"retry: -1\n\n",
        b"event: ping\n\n",
        chunk("third", "stop"),
        b"data: [DONE]\n\n",
    ]


def test_line_terminators_keep_unicode_separators() -> None:
    case = load_case("C09")
    chunks = [case_chunks(c) for c in case["input"]["chunks"]]
    events = parse_all(chunks)
    assert len(events) == 4
    first = json.loads(events[0].data)
    assert (
        first["choices"][0]["delta"]["content"]
        == case["expected"]["events"][0]["text_delta"]["text"]
    )
    assert "\u2028" in events[0].data and "\u2029" in events[0].data and "\u0085" in events[0].data
    assert json.loads(events[1].data)["choices"][0]["delta"]["content"] == " two"
    assert json.loads(events[2].data)["choices"][0]["delta"]["content"] == " three"
    assert events[3].data == "[DONE]"


def test_every_split_point_of_unicode_separators_gives_same_events() -> None:
    body = c09_body()
    expected = parse_all([body])
    assert len(expected) == 4
    for split in every_split(body):
        assert parse_all(split) == expected, split


def test_bom_split_and_control_only_blocks() -> None:
    events = parse_all(c10_chunks())
    contents = [json.loads(e.data)["choices"][0]["delta"]["content"] for e in events[:-1]]
    assert contents == ["first", "second", "third"]
    assert events[-1].data == "[DONE]"
    assert all(e.event == "message" for e in events)
    # id sticks; retry only when all digits ("-1" ignored, 3000 kept)
    assert events[1].id == "42" and events[2].id == "42"
    assert events[2].retry == 3000


def test_every_split_point_of_a_bom_body_gives_same_events() -> None:
    body = b"".join(c10_chunks())
    expected = parse_all([body])
    assert len(expected) == 4
    for split in every_split(body):
        assert parse_all(split) == expected


def test_byte_by_byte_chunks() -> None:
    for body in (c09_body(), b"".join(c10_chunks())):
        assert parse_all([bytes([b]) for b in body]) == parse_all([body])


def test_bom_only_stripped_once_and_only_at_start() -> None:
    events = parse_all([b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", b"data: \xef\xbb\xbfy\n\n"])
    # the second BOM is part of the first field name ("\ufeffdata"), so that line is ignored
    assert [e.data for e in events] == ["\ufeffy"]


def test_partial_bom_prefix_that_is_not_a_bom() -> None:
    assert parse_all([b"\xef", b"data: z\n\n"]) == []
    assert [e.data for e in parse_all([b"da", b"ta: z\n\n"])] == ["z"]


def test_comments_and_no_space_after_colon() -> None:
    case = load_case("B22")
    for term in ("\n", "\r\n", "\r"):
        events = parse_all([lines_to_bytes(case["input"]["lines"], term)])
        texts = [json.loads(e.data)["choices"][0]["delta"]["content"] for e in events[:-1]]
        assert texts == ["Hel", "lo"]
        assert events[-1].data == "[DONE]"


def test_multiline_data_event_type_and_one_space_stripped() -> None:
    body = b"event: a\ndata:  two spaces\ndata\ndata:x\n\n"
    (event,) = parse_all([body])
    assert event.event == "a"
    assert event.data == " two spaces\n\nx"


def test_id_with_nul_ignored_and_unknown_fields_ignored() -> None:
    body = b"id: 1\ndata: a\n\nid: 2\x003\nfoo: bar\ndata: b\n\n"
    events = parse_all([body])
    assert [(e.id, e.data) for e in events] == [("1", "a"), ("1", "b")]


def test_unterminated_block_at_eof_is_discarded() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: b\n") == [SSEEvent("message", "a")]
    assert parser.has_partial
    assert parser.close() == []


def test_empty_data_field_dispatches_empty_string() -> None:
    assert parse_all([b"data:\n\n"]) == [SSEEvent("message", "")]


@pytest.mark.parametrize("chunking", [1, 3, 7, 1000])
async def test_aiter_sse_over_async_chunks(chunking: int) -> None:
    body = c09_body()

    async def gen():  # type: ignore[no-untyped-def]
        for i in range(0, len(body), chunking):
            yield body[i : i + chunking]

    events = [e async for e in aiter_sse(gen())]
    assert events == parse_all([body])
