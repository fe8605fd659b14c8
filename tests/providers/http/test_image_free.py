"""protocol_py.providers.http.image_free: whether a request's messages hold an image, taken
from the memo for messages seen before (by content, under any id) and always the answer of the
walk over every block; a message holding an image is never remembered; the memo keeps within
its bounds; a request without the decode's content keys is walked whole."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_py.codec import wire
from protocol_py.providers.http import image_free
from protocol_py.providers.http.image_free import (
    ENTRY_BYTES,
    ImageFreeMessages,
    has_image,
    messages_hold_image,
)
from protocol_py.providers.openai.provider import OpenAIProvider
from protocol_py.server.grpc_layer import limits
from protocol_py.server.reflection import build_descriptor_pool
from protocol_py_gen.content.v1 import (
    ContentBlock,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ToolResultBlock,
)
from protocol_py_gen.model.v1 import StreamCompletionRequest

MODEL = "gpt-6-sol"

IMAGE = ContentBlock(image=ImageBlock(media_type="image/png", data=b"\x89PNG"))


@pytest.fixture(scope="module")
def strict() -> Any:
    return limits.strict_request_classes(build_descriptor_pool())[StreamCompletionRequest]


def text(value: str) -> ContentBlock:
    return ContentBlock(text=TextBlock(text=value))


def result(*blocks: ContentBlock) -> ContentBlock:
    return ContentBlock(tool_result=ToolResultBlock(tool_use_id="c", content=list(blocks)))


def message(i: int, *blocks: ContentBlock, prefix: str = "m") -> Message:
    return Message(role=Role.USER, id=f"{prefix}{i}", content=list(blocks))


def request(messages: list[Message]) -> StreamCompletionRequest:
    return StreamCompletionRequest(model_id=MODEL, messages=messages)


def decoded(req: StreamCompletionRequest, strict: Any) -> StreamCompletionRequest:
    """``req`` as the server decodes it: its messages' content keys kept with it."""
    return limits.decode_request(wire.encode(req), StreamCompletionRequest, strict)


def test_has_image_finds_images_in_messages_and_tool_results_at_any_depth() -> None:
    assert not has_image([text("t")])
    assert has_image([text("t"), IMAGE])
    assert has_image([text("t"), result(text("t"), IMAGE)])
    assert has_image([result(result(IMAGE))])
    assert not has_image([result(text("t")), result(result(text("u")))])


def test_a_resent_conversation_is_answered_from_the_memo_and_a_new_image_is_found(
    strict: Any,
) -> None:
    memo = ImageFreeMessages()
    history = [message(i, text(f"turn {i}"), result(text("out"))) for i in range(6)]
    first = decoded(request(history), strict)
    assert messages_hold_image(first, memo) is False
    assert (memo.hits, memo.misses, len(memo)) == (0, 6, 6)
    # the same conversation under new ids: every message found by its content
    renamed = [dataclasses.replace(m, id=f"new{i}") for i, m in enumerate(history)]
    assert messages_hold_image(decoded(request(renamed), strict), memo) is False
    assert (memo.hits, memo.misses) == (6, 6)
    # a turn adding an image (inside a tool result): found, and never remembered
    grown = [*history, message(6, result(text("shot"), IMAGE))]
    assert messages_hold_image(decoded(request(grown), strict), memo) is True
    assert (memo.hits, memo.misses, len(memo)) == (12, 7, 6)
    assert messages_hold_image(decoded(request(grown), strict), memo) is True
    assert len(memo) == 6
    # the messages walked before an image are remembered, the image's and those after it not
    fresh = ImageFreeMessages()
    mixed = [message(0, text("a")), message(1, IMAGE), message(2, text("c"))]
    assert messages_hold_image(decoded(request(mixed), strict), fresh) is True
    assert (fresh.misses, len(fresh)) == (3, 1)
    assert messages_hold_image(decoded(request(mixed[:1]), strict), fresh) is False
    assert (fresh.hits, fresh.misses) == (1, 3)


def test_the_translation_still_gets_the_decodes_images(strict: Any) -> None:
    """The check peeks at the images the decode kept; the translation takes them after it."""
    req = decoded(request([message(0, text("a")), message(1, text("b"))]), strict)
    messages_hold_image(req, ImageFreeMessages())
    images = wire.take_images(req, "messages")
    assert isinstance(images, wire.MessageImages) and images.content_keys is not None
    assert len(images) == 2
    assert wire.peek_images(req, "messages") is None  # taken


def test_a_request_built_in_process_is_walked_whole() -> None:
    memo = ImageFreeMessages()
    assert messages_hold_image(request([message(0, text("a"))]), memo) is False
    assert messages_hold_image(request([message(0, text("a")), message(1, IMAGE)]), memo)
    assert (memo.hits, memo.misses, len(memo)) == (0, 0, 0)


def test_the_memo_keeps_within_its_entry_and_byte_bounds(strict: Any) -> None:
    history = [message(i, text(f"message {i:03d}")) for i in range(12)]
    req = decoded(request(history), strict)
    keys = wire.peek_images(req, "messages")
    assert isinstance(keys, wire.MessageImages) and keys.content_keys is not None
    per_entry = len(keys.content_keys[0]) + ENTRY_BYTES  # every key of the same length
    few = ImageFreeMessages(max_entries=5)
    assert few.any_image(req.messages, keys.content_keys) is False
    assert len(few) == 5 and few.size_bytes == 5 * per_entry
    small = ImageFreeMessages(max_bytes=3 * per_entry)
    assert small.any_image(req.messages, keys.content_keys) is False
    assert len(small) == 3 and small.size_bytes == 3 * per_entry
    # the most recently seen are kept: the last three
    assert small.any_image(req.messages[9:], keys.content_keys[9:]) is False
    assert (small.hits, len(small)) == (3, 3)
    with pytest.raises(ValueError, match="11 content keys for 12 messages"):
        small.any_image(req.messages, keys.content_keys[1:])


def test_the_estimate_is_withheld_for_a_decoded_request_holding_an_image(
    strict: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = ImageFreeMessages()
    monkeypatch.setattr(image_free, "IMAGE_FREE", memo)
    provider = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
    plain = [message(0, text("look")), message(1, text("again"))]
    assert provider.count_input_tokens(decoded(request(plain), strict)) is not None
    assert provider.count_input_tokens(decoded(request(plain), strict)) is not None
    assert (memo.hits, memo.misses) == (2, 2)  # the second turn from the memo
    shot = [*plain, message(2, text("this"), IMAGE)]
    assert provider.count_input_tokens(decoded(request(shot), strict)) is None


_BLOCKS = st.sampled_from(["text", "image", "result-text", "result-image", "nested-image"])


def _block(kind: str, i: int) -> ContentBlock:
    return {
        "text": lambda: text(f"t{i}"),
        "image": lambda: IMAGE,
        "result-text": lambda: result(text(f"r{i}")),
        "result-image": lambda: result(text("r"), IMAGE),
        "nested-image": lambda: result(result(IMAGE)),
    }[kind]()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(_BLOCKS, min_size=1, max_size=3), min_size=1, max_size=8),
    st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=5),
)
def test_every_turn_is_answered_as_the_walk_answers(
    strict: Any, shapes: list[list[str]], turns: list[tuple[int, bool]]
) -> None:
    """Turns of a conversation cut at random lengths, under the same or new ids, through one
    memo: each answer equals the walk over every block of every message."""
    memo = ImageFreeMessages()
    history = [message(i, *(_block(k, i) for k in kinds)) for i, kinds in enumerate(shapes)]
    for n, (cut, new_ids) in enumerate(turns):
        turn = history[: cut + 1]
        if new_ids:
            turn = [dataclasses.replace(m, id=f"t{n}-{i}") for i, m in enumerate(turn)]
        expected = any(has_image(m.content) for m in turn)
        assert messages_hold_image(decoded(request(turn), strict), memo) is expected
    holding = {wire.content_key(wire.encode(m)) for m in history if has_image(m.content)}
    assert not holding & set(memo._entries)  # a message holding an image is never kept
