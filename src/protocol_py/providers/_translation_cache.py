"""A bounded cache of per-message vendor translations, reused across turns (issue 12).

An agent kernel resends the whole conversation every turn, so turn N's messages are a prefix
of turn N+1's. Translating each message to vendor JSON from scratch every turn costs time that
grows with the conversation; this cache keeps each message's serialized JSON fragment, keyed
by the message's id *and its whole content* (a structural key holding every field value of the
message and its blocks, compared exactly: no hash of the content stands in for it), plus the
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
from typing import Any, Final

import betterproto2

from protocol_py_gen.content.v1 import Message

MAX_ENTRIES: Final = 16_384
"""Most fragments one cache holds (messages)."""

MAX_BYTES: Final = 64 * 1024 * 1024
"""Most bytes of fragments one cache holds (64 MiB); keys hold the message's own strings
besides, about the same size again."""

MAX_FRAGMENT_BYTES: Final = 1024 * 1024
"""Largest fragment stored, bytes (1 MiB): a bigger message is translated every turn."""

_fields_by_class: dict[type[Any], tuple[str, ...]] = {}


def _fields(cls: type[Any]) -> tuple[str, ...]:
    names = _fields_by_class.get(cls)
    if names is None:
        names = tuple(getattr(cls, "_betterproto").sorted_field_names)  # noqa: B009
        _fields_by_class[cls] = names
    return names


def _key(value: Any) -> Hashable:
    """An exact, hashable image of a field value (messages, lists, maps included)."""
    kind = type(value)
    if kind is str or kind is bytes or kind is int or kind is bool or value is None:
        plain: Hashable = value
        return plain
    if kind is float:
        return ("f", value.hex())  # -0.0 and 0.0 differ; NaN equals itself
    if kind is list:
        return tuple([_key(item) for item in value])
    if kind is dict:
        return ("m", tuple([(k, _key(v)) for k, v in value.items()]))
    if isinstance(value, betterproto2.Message):
        d = value.__dict__
        return (kind, tuple([_key(d[name]) for name in _fields(kind)]))
    if isinstance(value, int):  # enums
        return int(value)
    raise TypeError(type(value).__name__)


def message_key(message: Message) -> Hashable | None:
    """The cache key of ``message``: its id and an exact image of every field; None when the
    message holds a value the key cannot represent (it is then translated uncached)."""
    try:
        return (message.id, _key(message))
    except (TypeError, KeyError, AttributeError):
        return None


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
        """Bytes of fragments held."""
        return self._bytes

    def fragment(
        self, settings: Hashable, message: Message, translate: Callable[[Message], bytes]
    ) -> bytes:
        """The fragment of ``message``: cached, or ``translate(message)`` (then stored).

        Raises:
            Whatever ``translate`` raises (nothing is stored then).
        """
        key = message_key(message)
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
        if len(fragment) <= MAX_FRAGMENT_BYTES:
            with self._lock:
                if full not in self._entries:
                    self._entries[full] = fragment
                    self._bytes += len(fragment)
                    while self._entries and (
                        len(self._entries) > self.max_entries or self._bytes > self.max_bytes
                    ):
                        _, dropped = self._entries.popitem(last=False)
                        self._bytes -= len(dropped)
        return fragment

    def clear(self) -> None:
        """Drop every fragment (e.g. after the translation settings changed)."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0
