"""A bounded cache of per-message vendor translations, reused across turns.

An agent kernel resends the whole conversation every turn, so turn N's messages are a prefix
of turn N+1's. Translating each message to vendor JSON from scratch every turn costs time that
grows with the conversation; this cache keeps each message's serialized JSON fragment, keyed
by the message's whole content but its id (its protobuf encoding without the ``id`` field,
compared exactly: no hash of the content stands in for it), plus the translation settings that
shape the fragment. A fragment never depends on the message id, so a conversation resent under
new message ids (a kernel restarted, another kernel, a history rewritten by compaction) hits
as the same conversation under its old ids does. A hit therefore yields exactly the bytes a fresh
translation would: the bytes sent never depend on the cache (tests compare both).

For a request the server just decoded (message wire images known), the last message list of
each conversation is also kept: a turn whose messages start with exactly that list (compared
byte for byte) takes their fragments in one step. When the server's decode computed each
message's content key (:class:`protocol_py.codec.wire.MessageImages`), the list is keyed by
the settings and the first message's content key and holds content keys, so the same
conversation under new message ids takes that step too; otherwise it is keyed by the first
message's id and holds the images
(:class:`~protocol_py.codec.prefixes.ConversationPrefixes`, :data:`MAX_LISTS`,
:data:`MAX_LIST_BYTES`).

Bounds: :data:`MAX_ENTRIES` fragments and :data:`MAX_BYTES` bytes of fragments per cache, the
least recently used dropped first; a fragment larger than :data:`MAX_FRAGMENT_BYTES` is never
stored. The cache is safe to use from several worker threads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Final, cast

from protocol_py.codec import wire
from protocol_py.codec.prefixes import BoundedLRU, ConversationPrefixes
from protocol_py.server.offload import checkpoint
from protocol_py_gen.content.v1 import Message

MAX_ENTRIES: Final = 16_384
"""Most fragments one cache holds (messages)."""

MAX_BYTES: Final = 64 * 1024 * 1024
"""Most bytes one cache holds (64 MiB): each entry counts its fragment and its key's message
encoding (the protobuf bytes that identify the message)."""

MAX_LISTS: Final = 64
"""Most conversations whose last message list (wire images and fragments) one cache keeps, so
a turn reuses the unchanged start of its conversation without a lookup per message."""

MAX_LIST_BYTES: Final = 64 * 1024 * 1024
"""Most bytes those lists hold (64 MiB: images and fragments; a fragment is the same object as
in the per-message entries)."""

MAX_FRAGMENT_BYTES: Final = 1024 * 1024
"""Largest fragment stored, bytes (1 MiB): a bigger message is translated every turn."""

MAX_KEY_BYTES: Final = wire.MAX_KEPT_IMAGE_BYTES
"""Largest message encoding used as a key, bytes (1 MiB, the bound of the server's wire images,
:data:`protocol_py.codec.wire.MAX_KEPT_IMAGE_BYTES`): a bigger message is translated uncached, never
copied, hashed or kept as a key, and a message list holding one is not kept as a conversation's
list (one copy or hash of a message that large would hold the interpreter, and so the event
loop, for tens of milliseconds)."""


content_key = wire.content_key
"""The cache key of a message's serialization (:func:`protocol_py.codec.wire.content_key`)."""


def message_key(message: Message) -> bytes | None:
    """The cache key of ``message``: :func:`content_key` of its protobuf encoding
    (:func:`wire.encode`, byte for byte what betterproto2 writes), an exact image of every
    field value but the id; None when the message holds a value that cannot be encoded, or
    when its encoding is larger than :data:`MAX_KEY_BYTES` (measured first, without joining
    it: :func:`wire.encoded_size`): it is then translated uncached."""
    try:
        if wire.encoded_size(message) > MAX_KEY_BYTES:
            return None
        return content_key(wire.encode(message))
    except Exception:  # a value of the wrong Python type: betterproto2 refuses to encode it
        return None


def _image_bytes(full: Hashable) -> int:
    """Bytes of the message content in a cache key ``(settings, content key)``."""
    if isinstance(full, tuple) and isinstance(full[1], bytes):
        return len(full[1])
    return 0


def _content_keys(images: Sequence[bytes | None] | None, count: int) -> list[bytes] | None:
    """The content key of each message, when the server's decode computed them along with
    the images (:class:`protocol_py.codec.wire.MessageImages`), else None."""
    if isinstance(images, wire.MessageImages) and len(images) == count:
        keys = images.content_keys
        if keys is not None and len(keys) == count:
            return keys
    return None


class TranslationCache(BoundedLRU[Hashable, bytes]):
    """LRU map ``(settings, message key) -> serialized fragment`` within the bounds above."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        super().__init__(max_entries, max_bytes)
        self._lists: ConversationPrefixes[tuple[bytes, ...]] = ConversationPrefixes(
            MAX_LISTS, MAX_LIST_BYTES
        )

    def fragment(
        self,
        settings: Hashable,
        message: Message,
        translate: Callable[[Message], bytes],
        image: bytes | None = None,
        *,
        large: bool = False,
    ) -> bytes:
        """The fragment of ``message``: cached, or ``translate(message)`` (then stored).

        ``image``: the wire bytes ``message`` was just decoded from, unchanged since
        (:func:`protocol_py.codec.wire.take_images`); it stands in for the encoding in the key.
        ``large``: True when the message's image was too large to keep (None in
        :func:`~protocol_py.codec.wire.take_images`): translated uncached, without encoding it.

        Raises:
            Whatever ``translate`` raises (nothing is stored then).
        """
        if large:
            return translate(message)
        key = message_key(message) if image is None else content_key(image)
        if key is None:
            return translate(message)
        full = (settings, key)
        cached = self._get(full)
        self._count(cached is not None)
        if cached is not None:
            return cached
        fragment = translate(message)
        self._store([(full, fragment)])
        return fragment

    def fragments(
        self,
        settings: Hashable,
        messages: Sequence[Message],
        translate: Callable[[int, Message], bytes],
        images: Sequence[bytes | None] | None = None,
    ) -> list[bytes]:
        """:meth:`fragment` of each of ``messages``, in order (``translate(i, message)`` for a
        miss), taking the lock once for every lookup and once for every store: a long
        conversation costs one dictionary lookup per message on a warm turn.

        ``images``: the wire bytes of each message (see :meth:`fragment`); a None image (a
        message too large to keep one) is translated uncached, and then the list is not kept
        as the conversation's list.

        Raises:
            Whatever ``translate`` raises (the fragments translated before it are stored).
        """
        start = 0
        kept: tuple[bytes, ...] = ()
        head: tuple[bytes, ...] = ()
        keys = _content_keys(images, len(messages))
        # with the content keys the server's decode computed, a conversation's list is
        # keyed and compared by content (the same conversation under new ids matches);
        # else by the first message's id and the images themselves
        listed = keys if keys is not None else images
        if listed is not None and messages:
            list_key = (settings, "content", keys[0]) if keys else (settings, messages[0].id)
            found_list = self._lists.match(list_key, listed)
            if found_list is not None:  # this conversation's last list, unchanged: reused
                kept, head = found_list
                start = len(kept)
                with self._lock:
                    self.hits += start
        out = self._lookup(settings, messages, translate, images, start, known=keys)
        keep = listed is not None and all(image is not None for image in listed[start:])
        if listed is not None and messages and start < len(messages) and keep:
            out[:0] = head
            self._lists.put(
                list_key,
                # the images kept already are reused; none is None here (keep)
                cast("tuple[bytes, ...]", (*kept, *listed[start:])),
                tuple(out),
                sum(len(fragment) for fragment in out),
            )
            return out
        return [*head, *out]

    def _lookup(
        self,
        settings: Hashable,
        messages: Sequence[Message],
        translate: Callable[[int, Message], bytes],
        images: Sequence[bytes | None] | None,
        start: int,
        *,
        known: list[bytes] | None = None,
    ) -> list[bytes]:
        """:meth:`fragments` of ``messages[start:]``, one by one (a None image: no key;
        ``known``: every message's content key, computed already)."""
        keys: list[bytes | None] = (
            list(known[start:])
            if known is not None
            else [
                content_key(image) if (image := images[i]) is not None else None
                for i in range(start, len(messages))
            ]
            if images is not None
            else [message_key(messages[i]) for i in range(start, len(messages))]
        )
        found: list[bytes | None] = []
        with self._lock:
            entries = self._entries
            for key in keys:
                entry = entries.get((settings, key)) if key is not None else None
                if entry is not None:
                    entries.move_to_end((settings, key))
                    self.hits += 1
                elif key is not None:
                    self.misses += 1
                found.append(entry[0] if entry is not None else None)
        new: list[tuple[Hashable, bytes]] = []
        out: list[bytes] = []
        try:
            for n, cached in enumerate(found):
                if cached is not None:
                    out.append(cached)
                    continue
                checkpoint()  # a cancelled worker step stops between messages
                fragment = translate(start + n, messages[start + n])
                key = keys[n]
                if key is not None:
                    new.append(((settings, key), fragment))
                out.append(fragment)
        finally:
            if new:
                self._store(new)
        return out

    def _store(self, new: list[tuple[Hashable, bytes]]) -> None:
        """Store each ``(full key, fragment)`` no larger than :data:`MAX_FRAGMENT_BYTES`."""
        for full, fragment in new:
            if len(fragment) <= MAX_FRAGMENT_BYTES:
                self._put(full, fragment, len(fragment) + _image_bytes(full))

    def clear(self) -> None:
        """Drop every fragment (e.g. after the translation settings changed)."""
        self._lists.clear()
        super().clear()
