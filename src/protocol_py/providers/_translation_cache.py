"""A bounded cache of per-message vendor translations, reused across turns (issue 12).

An agent kernel resends the whole conversation every turn, so turn N's messages are a prefix
of turn N+1's. Translating each message to vendor JSON from scratch every turn costs time that
grows with the conversation; this cache keeps each message's serialized JSON fragment, keyed
by the message's id *and its whole content* (its protobuf encoding, compared exactly: no hash
of the content stands in for it), plus the
translation settings that shape the fragment. A hit therefore yields exactly the bytes a fresh
translation would: the bytes sent never depend on the cache (tests compare both).

Bounds: :data:`MAX_ENTRIES` fragments and :data:`MAX_BYTES` bytes of fragments per cache, the
least recently used dropped first; a fragment larger than :data:`MAX_FRAGMENT_BYTES` is never
stored. The cache is safe to use from several worker threads at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final

from protocol_py import wire
from protocol_py_gen.content.v1 import Message

MAX_ENTRIES: Final = 16_384
"""Most fragments one cache holds (messages)."""

MAX_BYTES: Final = 64 * 1024 * 1024
"""Most bytes one cache holds (64 MiB): each entry counts its fragment and its key's message
encoding (the protobuf bytes that identify the message)."""

MAX_FRAGMENT_BYTES: Final = 1024 * 1024
"""Largest fragment stored, bytes (1 MiB): a bigger message is translated every turn."""


def message_key(message: Message) -> Hashable | None:
    """The cache key of ``message``: its id and its protobuf encoding (:func:`wire.encode`,
    byte for byte what betterproto2 writes), an exact image of every field value (two messages
    with the same encoding decode to equal messages); None when the message holds a value that
    cannot be encoded (it is then translated uncached)."""
    try:
        return (message.id, wire.encode(message))
    except Exception:  # a value of the wrong Python type: betterproto2 refuses to encode it
        return None


def _image_bytes(full: Hashable) -> int:
    """Bytes of the message encoding in a cache key ``(settings, (id, encoding))``."""
    if isinstance(full, tuple) and isinstance(full[1], tuple):
        image = full[1][1]
        if isinstance(image, bytes | bytearray | memoryview):
            return len(image)
    return 0


class TranslationCache:
    """LRU map ``(settings, message key) -> serialized fragment`` within the bounds above."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Bytes held: fragments and the message encodings of their keys."""
        return self._bytes

    def fragment(
        self,
        settings: Hashable,
        message: Message,
        translate: Callable[[Message], bytes],
        image: bytes | None = None,
    ) -> bytes:
        """The fragment of ``message``: cached, or ``translate(message)`` (then stored).

        ``image``: the wire bytes ``message`` was just decoded from, unchanged since
        (:func:`protocol_py.wire.take_images`); it stands in for the encoding in the key.

        Raises:
            Whatever ``translate`` raises (nothing is stored then).
        """
        key = message_key(message) if image is None else (message.id, image)
        if key is None:
            return translate(message)
        full = (settings, key)
        with self._lock:
            cached = self._entries.get(full)
            if cached is not None:
                self._entries.move_to_end(full)
                self.hits += 1
                return cached
            self.misses += 1
        fragment = translate(message)
        size = len(fragment) + _image_bytes(full)
        if len(fragment) <= MAX_FRAGMENT_BYTES:
            with self._lock:
                if full not in self._entries:
                    self._entries[full] = fragment
                    self._bytes += size
                    while self._entries and (
                        len(self._entries) > self.max_entries or self._bytes > self.max_bytes
                    ):
                        gone, dropped = self._entries.popitem(last=False)
                        self._bytes -= len(dropped) + _image_bytes(gone)
        return fragment

    def clear(self) -> None:
        """Drop every fragment (e.g. after the translation settings changed)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
