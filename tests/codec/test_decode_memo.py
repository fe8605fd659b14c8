"""protocol_py.codec.decode_memo: a request decoded with its messages taken from the memo equals
the whole-body decode field for field (and upb's parse), under the same or new message ids; a
hit is a message of its own with its own content list; only clean, exact messages are kept;
hits count against the decode budget; the memo stays within its bounds."""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_py.codec import decode_memo, metadata, wire, wire_gen
from protocol_py.codec.decode_memo import DecodeMemo, decode_messages_memo, split_message_id
from protocol_py_gen.content.v1 import ContentBlock, Message, TextBlock
from protocol_py_gen.model.v1 import StreamCompletionRequest

from ..conftest import UpbClasses
from .test_wire import conversation, same

MESSAGES = metadata.field_number(StreamCompletionRequest, "messages")


def renumbered(request: StreamCompletionRequest, prefix: str) -> StreamCompletionRequest:
    """``request`` with every message id new (same content), as after a kernel restart."""
    messages = [dataclasses.replace(m, id=f"{prefix}{i}") for i, m in enumerate(request.messages)]
    return dataclasses.replace(request, messages=messages)


def field(image: bytes) -> bytes:
    """``image`` as one element of a request's ``messages`` (shortest tag and length)."""
    return wire_gen.varint_bytes(MESSAGES << 3 | 2) + wire_gen.varint_bytes(len(image)) + image


def decode(data: bytes, memo: DecodeMemo) -> tuple[StreamCompletionRequest, bool, bool]:
    return decode_messages_memo(StreamCompletionRequest, data, "messages", memo)


def test_a_resent_conversation_decodes_from_the_memo_equal_to_the_whole_decode(
    upb: UpbClasses,
) -> None:
    memo = DecodeMemo()
    data = wire.encode(conversation(6))
    first = decode(data, memo)
    assert (memo.hits, memo.misses, len(memo)) == (0, 13, 13)
    again = decode(data, memo)
    assert (memo.hits, memo.misses) == (13, 13)
    whole = wire.decode_report(StreamCompletionRequest, data, fallback=False)
    for found in (first, again):
        same(found[0], whole[0])
        assert found[1:] == whole[1:] == (True, True)
        assert wire.encode(found[0]) == data
    upb_cls = upb.message("model.v1.StreamCompletionRequest")
    assert upb_cls.FromString(wire.encode(again[0])) == upb_cls.FromString(data)


def test_the_same_messages_under_new_ids_hit_and_carry_their_new_ids() -> None:
    memo = DecodeMemo()
    decode(wire.encode(conversation(4)), memo)
    data = wire.encode(renumbered(conversation(4), "new-"))
    found, clean, exact = decode(data, memo)
    assert memo.hits == 9
    assert [m.id for m in found.messages] == [f"new-{i}" for i in range(9)]
    same(found, wire.decode(StreamCompletionRequest, data))
    assert (clean, exact) == (True, True)
    # a message without an id (the empty string) hits too, and reads as ""
    bare = renumbered(conversation(1), "")
    bare.messages[0].id = ""
    data = wire.encode(bare)
    found = decode(data, memo)[0]
    assert found.messages[0].id == ""
    same(found, wire.decode(StreamCompletionRequest, data))


def test_a_hit_is_its_own_message_with_its_own_content_list() -> None:
    memo = DecodeMemo()
    data = wire.encode(conversation(2))
    first = decode(data, memo)[0]
    first.messages[1].content.append(ContentBlock(text=TextBlock(text="added")))
    first.messages[1].id = "changed"
    second = decode(data, memo)[0]
    assert second.messages[1] is not first.messages[1]
    assert second.messages[1].id == "a1"
    assert len(second.messages[1].content) == 2
    third = decode(data, memo)[0]
    assert third.messages[1].content is not second.messages[1].content
    same(third, wire.decode(StreamCompletionRequest, data))


def test_messages_with_unknown_fields_or_enum_numbers_are_decoded_every_time() -> None:
    memo = DecodeMemo()
    unknown = wire.encode(Message(id="x", content=[])) + b"\xb8\x3e\x01"  # field 999, varint
    odd_role = b"\x08\x63" + wire.encode(Message(id="y"))  # role 99: not a Role member
    plain = wire.encode(Message(id="z", content=[ContentBlock(text=TextBlock(text="t"))]))
    data = b"".join(
        wire_gen.varint_bytes(MESSAGES << 3 | 2) + wire_gen.varint_bytes(len(m)) + m
        for m in (unknown, odd_role, plain)
    )
    for _ in range(2):
        found = decode(data, memo)
        whole = wire.decode_report(StreamCompletionRequest, data, fallback=False)
        same(found[0], whole[0])
        assert found[1:] == whole[1:] == (False, False)
    assert len(memo) == 1  # the plain message only
    assert (memo.hits, memo.misses) == (1, 5)


def test_hits_count_against_the_decode_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = DecodeMemo()
    data = wire.encode(conversation(3))
    decode(data, memo)

    class Small(wire_gen.State):
        def __init__(self, limit: int = 20) -> None:
            super().__init__(min(limit, 20))

    monkeypatch.setattr(decode_memo, "State", Small)
    monkeypatch.setattr(wire, "State", Small)
    with pytest.raises(wire.DecodeBudgetError):
        decode(data, memo)
    assert memo.hits >= 1  # the budget ran out on messages taken from the memo


def test_a_body_the_memo_path_does_not_cover_is_decoded_whole_with_its_errors() -> None:
    memo = DecodeMemo()
    data = wire.encode(conversation(2))
    decode(data, memo)
    with pytest.raises(wire.FallbackError):
        decode(data[:-3], memo)  # truncated
    with pytest.raises(UnicodeDecodeError):  # an id of invalid UTF-8, content seen before
        first = wire.encode(conversation(2).messages[1])
        bad = first.replace(b"\x1a\x02a1", b"\x1a\x02\xff\xfe")
        assert bad != first
        decode(wire_gen.varint_bytes(MESSAGES << 3 | 2) + bytes([len(bad)]) + bad, memo)


def test_split_message_id_strips_every_id_and_reads_the_last() -> None:
    image = wire.encode(Message(id="first", content=[ContentBlock(text=TextBlock(text="t"))]))
    twice = image + b"\x1a\x04last"
    key, start, stop = split_message_id(twice) or (b"", 0, 0)
    assert key == wire.content_key(twice) == wire.content_key(image)
    assert twice[start:stop] == b"last"
    assert split_message_id(wire.encode(Message())) == (b"", -1, -1)
    assert split_message_id(b"\x1a\x09short") is None  # truncated
    assert split_message_id(b"\x18\x01") is None  # the id as a varint


def test_the_memo_keeps_within_its_entry_and_byte_bounds() -> None:
    data = wire.encode(conversation(10))
    few = DecodeMemo(max_entries=3)
    decode(data, few)
    assert len(few) == 3
    assert few.size_bytes <= few.max_bytes
    small = DecodeMemo(max_bytes=4096)
    found = decode(data, small)[0]
    assert small.size_bytes <= 4096
    assert 0 < len(small) < 21
    same(found, wire.decode(StreamCompletionRequest, data))
    # an entry's accounted size: twice its key, ENTRY_BYTES, OBJECT_BYTES per content block
    one = DecodeMemo()
    image = wire.encode(Message(id="q", content=[ContentBlock(text=TextBlock(text="t"))]))
    decode(wire_gen.varint_bytes(MESSAGES << 3 | 2) + bytes([len(image)]) + image, one)
    key = wire.content_key(image)
    assert one.size_bytes == 2 * len(key) + decode_memo.ENTRY_BYTES + decode_memo.OBJECT_BYTES


def test_over_long_tags_and_other_wire_types_are_judged_by_the_whole_decode() -> None:
    memo = DecodeMemo()
    image = wire.encode(conversation(1).messages[0])
    decode(wire_gen.varint_bytes(MESSAGES << 3 | 2) + bytes([len(image)]) + image, memo)
    assert len(memo) == 1
    bodies = [
        # the messages field under an over-long tag (0x8a 0x00 for 0x0a)
        b"\x8a\x00" + bytes([len(image)]) + image,
        # the messages field also sent as a varint
        wire_gen.varint_bytes(MESSAGES << 3 | 2) + bytes([len(image)]) + image + b"\x08\x01",
        # the message's id under an over-long tag, its content seen before
        field(image.replace(b"\x1a\x02m0", b"\x9a\x00\x02m0")),
    ]
    for body in bodies:
        whole = wire.decode_report(StreamCompletionRequest, body)
        try:
            found = decode(body, memo)
        except wire.FallbackError:
            assert whole[1:] == (False, False)  # betterproto2's: the fast path did not cover it
        else:
            same(found[0], whole[0])
            assert found[1:] == whole[1:]
    assert memo.hits == 0


def _counting_scans(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The images :func:`split_message_id` scans from now on, in order."""
    scans: list[bytes] = []
    split = decode_memo.split_message_id

    def counting(image: bytes) -> tuple[bytes, int, int] | None:
        scans.append(image)
        return split(image)

    monkeypatch.setattr(decode_memo, "split_message_id", counting)
    return scans


def test_a_resent_conversation_is_matched_to_its_last_list_without_a_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation resent as it was is taken from the list index by position: no image is
    scanned again, only the first is looked up in the split index (twice a turn: for the
    body's leading bytes, then for the position match), and the content keys are the same
    objects every turn; the decode equals the whole-body decode."""
    scans = _counting_scans(monkeypatch)
    memo = DecodeMemo()
    data = wire.encode(conversation(3))
    first_keys: list[bytes] = []
    decode_messages_memo(StreamCompletionRequest, data, "messages", memo, keys=first_keys)
    assert len(scans) == 7 and (memo.splits.hits, memo.splits.misses) == (2, 7)
    assert (memo.lists.hits, memo.lists.misses, len(memo.lists)) == (0, 1, 1)
    again_keys: list[bytes] = []
    found = decode_messages_memo(StreamCompletionRequest, data, "messages", memo, keys=again_keys)
    assert len(scans) == 7 and (memo.splits.hits, memo.splits.misses) == (4, 7)
    assert (memo.hits, memo.lists.hits) == (7, 1)
    assert all(a is b for a, b in zip(first_keys, again_keys, strict=True))
    same(found[0], wire.decode(StreamCompletionRequest, data))


def test_the_kept_images_themselves_match_as_equal_copies_of_them_do() -> None:
    """The list index matches the kept image objects (a body that starts with the kept
    messages) in one step, with the same result as equal copies matched one by one, for the
    list as kept and for a longer one; a copy that differs ends the match there."""
    memo = DecodeMemo()
    data = wire.encode(conversation(3))
    decode(data, memo)
    kept_images = memo.lists.leading(data, split_message_id(request_images(data)[0])[0])
    assert kept_images is not None
    kept = list(kept_images[0])
    first = split_message_id(kept[0])
    copies = [bytes(bytearray(image)) for image in kept]
    assert not any(a is b for a, b in zip(kept, copies, strict=True))
    whole = memo.lists.match(kept, first)
    assert len(whole) == 7 and whole == memo.lists.match(copies, first)
    longer = request_images(wire.encode(conversation(4)))
    assert memo.lists.match([*kept, *longer[7:]], first) == whole
    assert memo.lists.match([*copies, *longer[7:]], first) == whole
    edited = wire.encode(_flip_first_character(wire.decode(Message, kept[4])))
    assert len(edited) == len(kept[4]) and edited != kept[4]
    assert memo.lists.match([*kept[:4], edited, *kept[5:]], first) == whole[:4]


def _counting_field_scans(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ``start`` of every :func:`protocol_py.codec.wire.field_images` scan from now on."""
    starts: list[int] = []
    scan = wire.field_images

    def counting(
        data: bytes,
        number: int,
        max_bytes: int | None = None,
        rest: list[bytes] | None = None,
        start: int = 0,
    ) -> list[bytes | None] | None:
        starts.append(start)
        return scan(data, number, max_bytes, rest, start)

    monkeypatch.setattr(wire, "field_images", counting)
    return starts


def test_a_body_that_starts_with_its_kept_messages_is_scanned_only_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept list keeps the body its messages led; a body starting with the same bytes
    takes the kept images without a scan: resent as it was, or grown by new messages (only
    those are scanned); each decode equals the whole-body decode, and the kept images are the
    very objects the next turn is given."""
    starts = _counting_field_scans(monkeypatch)
    memo = DecodeMemo()
    data = wire.encode(conversation(3))
    head = len(data) - len(wire.without_field(data, 1) or b"")  # the messages' fields
    decode(data, memo)
    assert starts == [0]
    found = decode(data, memo)
    assert starts == [0, head]  # only the fields after the messages
    same(found[0], wire.decode(StreamCompletionRequest, data))
    grown = wire.encode(conversation(4))
    assert grown.startswith(data[:head])
    found = decode(grown, memo)
    assert starts == [0, head, head]  # the two new messages and the rest
    same(found[0], wire.decode(StreamCompletionRequest, grown))
    images = memo.leading_images(grown, 1, wire.MAX_KEPT_IMAGE_BYTES)
    assert images == wire.field_images(grown, 1, wire.MAX_KEPT_IMAGE_BYTES)


def test_a_body_whose_messages_are_not_its_first_fields_keeps_no_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body whose model_id comes before its messages (another encoder's field order) is
    decoded as before, every turn scanned whole, and equal to the whole-body decode."""
    starts = _counting_field_scans(monkeypatch)
    memo = DecodeMemo()
    request = conversation(3)
    plain = wire.encode(request)
    data = b"\x12\x03abc" + (wire.without_field(plain, 2) or b"")  # model_id "abc" first
    for _ in range(3):
        found = decode(data, memo)
        same(found[0], wire.decode(StreamCompletionRequest, data))
    assert starts == [0, 0, 0]
    assert memo.leading_images(data, 1, wire.MAX_KEPT_IMAGE_BYTES) is None


def test_a_body_differing_after_the_kept_messages_start_is_scanned_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One byte changed inside the kept messages (a text of the same length): the leading
    bytes differ, the body is scanned whole and decodes equal to the whole-body decode."""
    starts = _counting_field_scans(monkeypatch)
    memo = DecodeMemo()
    request = conversation(3)
    decode(wire.encode(request), memo)
    edited = dataclasses.replace(request, messages=list(request.messages))
    edited.messages[2] = _flip_first_character(edited.messages[2])
    data = wire.encode(edited)
    found = decode(data, memo)
    assert starts == [0, 0]
    same(found[0], wire.decode(StreamCompletionRequest, data))


def test_new_ids_of_the_same_length_are_matched_by_position_and_carry_their_new_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same messages under new ids of the same length (a kernel restarted): only the
    first image is scanned (for the conversation's key); every message is taken from the
    last list with its new id."""
    scans = _counting_scans(monkeypatch)
    memo = DecodeMemo()
    decode(wire.encode(conversation(3)), memo)
    renamed = wire.encode(renumbered(conversation(3), "z"))  # "z0".."z6": two bytes, as before
    found, clean, exact = decode(renamed, memo)
    assert len(scans) == 8 and memo.hits == 7
    assert [m.id for m in found.messages] == [f"z{i}" for i in range(7)]
    same(found, wire.decode(StreamCompletionRequest, renamed))
    assert (clean, exact) == (True, True)


def test_new_ids_of_another_length_are_scanned_and_taken_from_the_memo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans = _counting_scans(monkeypatch)
    memo = DecodeMemo()
    decode(wire.encode(conversation(3)), memo)
    renamed = wire.encode(renumbered(conversation(3), "r-"))
    found = decode(renamed, memo)
    assert len(scans) == 14 and memo.hits == 7  # scanned, then decoded from the memo
    same(found[0], wire.decode(StreamCompletionRequest, renamed))
    assert [m.id for m in found[0].messages] == [f"r-{i}" for i in range(7)]


def test_the_match_ends_at_the_first_changed_message_and_the_rest_goes_through_the_memo() -> None:
    memo = DecodeMemo()
    request = conversation(4)
    decode(wire.encode(request), memo)
    edited = dataclasses.replace(request, messages=list(request.messages))
    edited.messages[3] = dataclasses.replace(
        edited.messages[3], content=[ContentBlock(text=TextBlock(text="changed"))]
    )
    data = wire.encode(edited)
    found = decode(data, memo)
    assert memo.hits == 8  # 3 by position, 5 from the memo after the changed message
    same(found[0], wire.decode(StreamCompletionRequest, data))
    kept = memo.lists.match(request_images(data), split_message_id(request_images(data)[0]))
    assert len(kept) == 9  # the list kept is the edited one, whole


def test_the_list_index_keeps_within_its_bounds() -> None:
    data = wire.encode(conversation(3))
    images = request_images(data)
    few = DecodeMemo()
    few.lists = decode_memo.ListIndex(max_entries=1)
    decode(data, few)
    decode(wire.encode(renumbered(conversation(2), "other")), few)  # another first message
    assert len(few.lists) == 1
    small = DecodeMemo()
    small.lists = decode_memo.ListIndex(max_bytes=1000)
    decode(data, small)
    assert len(small.lists) == 0 and small.lists.size_bytes == 0  # larger than the bound
    one = DecodeMemo()
    decode(data, one)
    # each message as its memo and split entries count, and the body the messages led
    assert one.lists.size_bytes == _list_bytes(images, one) + len(data)


def _keys(images: list[bytes]) -> list[bytes]:
    return [wire.content_key(image) for image in images]


def _list_bytes(images: list[bytes], memo: DecodeMemo) -> int:
    """What a kept list of ``images`` counts for its messages (without a kept body)."""
    return sum(
        2 * len(image)
        + decode_memo.LIST_ENTRY_BYTES
        + decode_memo.ENTRY_BYTES
        + decode_memo.OBJECT_BYTES * objects
        for image, (_, objects) in zip(images, memo.lookup_many(_keys(images)), strict=True)
    )


def request_images(data: bytes) -> list[bytes]:
    images = wire.field_images(data, MESSAGES, wire.MAX_KEPT_IMAGE_BYTES)
    assert images is not None and None not in images
    return cast("list[bytes]", images)


def _flip_first_character(message: Message) -> Message:
    """A copy of ``message`` whose first text (a text block's, or the first one inside a tool
    result) has its first character changed to another of the same UTF-8 length: an image of
    the same length that differs before the id."""
    copy = wire.decode(Message, wire.encode(message))
    block = copy.content[0]
    if block.tool_result is not None:
        block = block.tool_result.content[0]
    if block.text is not None and block.text.text:
        text = block.text.text
        block.text.text = ("y" if text[0] != "y" else "x") + text[1:] if text[0] < "\x80" else text
    return copy


_EDITS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                *("id", "id_same_length", "text", "text_same_length", "model_same_length"),
                *("drop", "append", "none"),
            ]
        ),
        st.integers(min_value=0, max_value=12),
        st.text(alphabet="ab\u00e9\U0001f600", max_size=4),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(_EDITS)
def test_every_turn_of_an_edited_conversation_decodes_equal_to_the_whole_decode(
    edits: list[tuple[str, int, str]],
) -> None:
    """Turn after turn through one memo, each turn one edit of the last (an id changed to
    any length, a message's text changed, a message dropped or appended, nothing): each
    decode equals the whole-body decode, ids included, whatever the lists matched."""
    memo = DecodeMemo()
    # produced_by_model_id: a field after the id, so an edit on either side of it is seen
    messages = [dataclasses.replace(m, produced_by_model_id="pp") for m in conversation(4).messages]
    base = conversation(0)
    for kind, where, text in edits:
        at = where % len(messages)
        if kind == "id":
            messages[at] = dataclasses.replace(messages[at], id=text)
        elif kind == "id_same_length":
            old = messages[at].id
            messages[at] = dataclasses.replace(messages[at], id=(text * 9)[: len(old)] or old)
        elif kind == "text":
            messages[at] = dataclasses.replace(
                messages[at], content=[ContentBlock(text=TextBlock(text=text or "t"))]
            )
        elif kind == "text_same_length":
            messages[at] = _flip_first_character(messages[at])
        elif kind == "model_same_length":
            model = messages[at].produced_by_model_id
            messages[at] = dataclasses.replace(
                messages[at], produced_by_model_id="qq" if model != "qq" else "rr"
            )
        elif kind == "drop" and len(messages) > 1:
            del messages[at]
        elif kind == "append":
            messages.append(Message(id=text, content=[ContentBlock(text=TextBlock(text="n"))]))
        data = wire.encode(dataclasses.replace(base, messages=list(messages)))
        found = decode(data, memo)
        whole = wire.decode_report(StreamCompletionRequest, data, fallback=False)
        same(found[0], whole[0])
        assert found[1:] == whole[1:]
        assert [m.id for m in found[0].messages] == [m.id for m in messages]


def test_the_split_index_keeps_within_its_bounds() -> None:
    index = decode_memo.SplitIndex(max_entries=2, max_bytes=10_000)
    images = [wire.encode(m) for m in conversation(3).messages]
    assert index.splits(images) == [split_message_id(i) for i in images]
    assert len(index) == 2
    small = decode_memo.SplitIndex(max_bytes=1000)
    small.splits(images)
    assert small.size_bytes <= 1000
    one = decode_memo.SplitIndex()
    one.splits(images[:1])
    assert one.size_bytes == 2 * len(images[0]) + decode_memo.SPLIT_ENTRY_BYTES
    assert one.splits([b"\x18\x01"]) == [None] and len(one) == 1  # no split: not kept


def test_a_list_matched_whole_stands_and_a_longer_one_replaces_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A turn whose messages all match the kept list (and no more) keeps that list as it is,
    stored once; a turn with more messages keeps its longer list."""
    memo = DecodeMemo()
    stored: list[int] = []
    put = memo.lists._put

    def counting(key: bytes, value: decode_memo._List, size: int) -> None:
        stored.append(len(value[0]))
        put(key, value, size)

    monkeypatch.setattr(memo.lists, "_put", counting)
    decode(wire.encode(conversation(3)), memo)
    decode(wire.encode(conversation(3)), memo)
    decode(wire.encode(renumbered(conversation(3), "z")), memo)
    assert stored == [7] and memo.hits == 14
    found = decode(wire.encode(conversation(4)), memo)[0]
    assert stored == [7, 9]
    same(found, wire.decode(StreamCompletionRequest, wire.encode(conversation(4))))


def test_a_kept_body_is_bounded_by_its_messages_and_by_the_index() -> None:
    """A body mostly of other fields keeps a copy of its leading bytes, not itself; a list
    that would pass the index's byte bound with its body is kept without it (and still
    matched by position)."""
    request = conversation(3)
    plain = wire.encode(request)
    head = len(plain) - len(wire.without_field(plain, 1) or b"")
    big = dataclasses.replace(request, model_id="m" * (3 * head))
    data = wire.encode(big)
    images = request_images(data)
    memo = DecodeMemo()
    decode(data, memo)
    counted = _list_bytes(images, memo)
    assert memo.lists.size_bytes == counted + head  # the leading bytes alone
    assert memo.leading_images(data, 1, wire.MAX_KEPT_IMAGE_BYTES) == images
    tight = DecodeMemo()
    tight.lists = decode_memo.ListIndex(max_bytes=counted + head - 1)
    decode(data, tight)
    assert tight.lists.size_bytes == counted and len(tight.lists) == 1
    assert tight.leading_images(data, 1, wire.MAX_KEPT_IMAGE_BYTES) is None
    found = decode(data, tight)
    assert tight.lists.hits == 1
    same(found[0], wire.decode(StreamCompletionRequest, data))
