"""The translation cache's batch lookup (one lock for every lookup of a turn):
hits give the bytes a miss gives, the same id with other content misses, bounds hold, and a
translation error keeps what was translated before it."""

from __future__ import annotations

import pytest

from protocol_py.codec import wire
from protocol_py.providers.http.translation_cache import TranslationCache
from protocol_py_gen.content.v1 import (
    Message,
    TextBlock,
)

from .test_translation_cache import turn


def translate(i: int, message: Message) -> bytes:
    return f"{i}:{message.id}:".encode() + wire.encode(message)


@pytest.mark.parametrize("with_images", [False, True])
def test_hits_equal_misses_and_changed_content_misses(with_images: bool) -> None:
    cache = TranslationCache()
    messages = turn(3).messages
    images = [wire.encode(m) for m in messages] if with_images else None
    cold = cache.fragments("s", messages, translate, images)
    assert (cache.hits, cache.misses) == (0, len(messages))
    warm = cache.fragments("s", messages, translate, images)
    assert warm == cold == [translate(i, m) for i, m in enumerate(messages)]
    assert (cache.hits, cache.misses) == (len(messages), len(messages))
    # other settings, then the same id with other content: misses
    cache.fragments("other", messages[:1], translate, images[:1] if images else None)
    assert cache.misses == len(messages) + 1
    changed = turn(3).messages
    changed[0].content[0].text = TextBlock(text="edited")
    changed_images = [wire.encode(m) for m in changed] if with_images else None
    got = cache.fragments("s", changed, translate, changed_images)
    assert got[0] == translate(0, changed[0]) != cold[0]
    assert got[1:] == cold[1:]
    assert cache.misses == len(messages) + 2


def test_bounds_hold_after_a_batch_and_an_error_keeps_the_earlier_fragments() -> None:
    messages = turn(5).messages
    cache = TranslationCache(max_entries=3)
    cache.fragments("s", messages, translate)
    assert len(cache) == 3
    small = TranslationCache(max_bytes=2000)
    small.fragments("s", messages, translate)
    assert 0 < small.size_bytes <= 2000

    def fails_at_two(i: int, message: Message) -> bytes:
        if i == 2:
            raise ValueError("messages[2]: bad")
        return translate(i, message)

    fresh = TranslationCache()
    with pytest.raises(ValueError, match=r"messages\[2\]"):
        fresh.fragments("s", messages, fails_at_two)
    assert len(fresh) == 2


def test_a_conversations_unchanged_start_is_reused_whole_and_equals_a_fresh_lookup() -> None:
    cache = TranslationCache()
    first = turn(2).messages
    cache.fragments("s", first, translate, [wire.encode(m) for m in first])
    later = turn(4).messages  # the same start, then four more messages
    images = [wire.encode(m) for m in later]
    got = cache.fragments("s", later, translate, images)
    assert got == [translate(i, m) for i, m in enumerate(later)]
    assert (cache._lists.hits, cache.misses) == (1, len(first) + 4)
    # an edited message of the start: the list does not match, each message is looked up
    edited = turn(4).messages
    edited[1].content[0].text = TextBlock(text="edited")
    got = cache.fragments("s", edited, translate, [wire.encode(m) for m in edited])
    assert got == [translate(i, m) for i, m in enumerate(edited)]
    assert cache._lists.hits == 1 and cache.misses == len(first) + 5
    # without images (a request built in Python) no list is used
    assert cache.fragments("s", later, translate) == [translate(i, m) for i, m in enumerate(later)]
    assert cache._lists.hits == 1
