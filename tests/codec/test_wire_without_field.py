"""``wire.without_field``: a message's serialization with one top-level field removed."""

from __future__ import annotations

from protocol_py.codec import metadata, wire
from protocol_py.codec.wire_gen import varint_bytes
from protocol_py_gen.content.v1 import ContentBlock, Message, Role, TextBlock

ID = metadata.field_number(Message, "id")


def message(id_: str) -> Message:
    return Message(
        role=Role.USER,
        id=id_,
        content=[ContentBlock(text=TextBlock(text="hello \u00e9" * 40))],
        produced_by_model_id="m",
    )


def test_removing_the_id_gives_the_encoding_of_the_message_without_it() -> None:
    image = bytes(message("01JABC"))
    assert wire.without_field(image, ID) == bytes(message(""))
    assert wire.without_field(bytes(message("other")), ID) == wire.without_field(image, ID)


def test_every_occurrence_is_removed_wherever_it_sits() -> None:
    id_field = varint_bytes(ID << 3 | 2) + varint_bytes(3) + b"abc"
    body = bytes(message(""))
    data = id_field + body + id_field
    assert wire.without_field(data, ID) == body
    assert Message.parse(data).id == "abc"


def test_an_absent_field_returns_the_same_bytes_and_bad_bytes_none() -> None:
    body = bytes(message(""))
    assert wire.without_field(body, ID) is body
    assert wire.without_field(body[:-1], ID) is None  # truncated
    assert wire.without_field(b"\x0b", ID) is None  # a group start


def test_fields_of_every_length_encoding_are_skipped_exactly() -> None:
    for size in (0, 5, 127, 128, 16_383, 16_384, 70_000):
        with_id = Message(
            role=Role.USER,
            id="x" * size,
            content=[ContentBlock(text=TextBlock(text="y" * size))],
        )
        without = Message(role=Role.USER, content=[ContentBlock(text=TextBlock(text="y" * size))])
        assert wire.without_field(bytes(with_id), ID) == bytes(without)
        assert wire.content_key(bytes(with_id)) == bytes(without)
    assert wire.content_key(b"\x0b") == b"\x0b"  # does not scan: the bytes themselves


def test_the_rest_of_field_images_joins_to_the_body_without_the_field() -> None:
    """``field_images(..., rest=...)``: one scan gives the images and, joined, exactly
    ``without_field`` of the body, wherever and however the field occurs."""
    content = metadata.field_number(Message, "content")
    block = bytes(ContentBlock(text=TextBlock(text="z" * 300)))
    element = varint_bytes(content << 3 | 2) + varint_bytes(len(block)) + block
    role = b"\x08\x01"
    as_varint = varint_bytes(content << 3) + b"\x05"  # the same number, another wire type
    bodies = [
        role + element + element + b"\x1a\x02id",
        element + role + element,
        role + b"\x1a\x02id",  # the field absent
        element,
        element + as_varint + role,
        b"",
    ]
    for body in bodies:
        pieces: list[bytes] = []
        images = wire.field_images(body, content, None, pieces)
        assert images == wire.field_images(body, content)
        assert b"".join(pieces) == wire.without_field(body, content)
    assert wire.field_images(element[:-1], content, None, []) is None  # truncated
