"""What was derived from a conversation's last message list, kept for the next turn.

An agent kernel resends the whole conversation every turn, so turn N+1's messages start with
exactly turn N's, byte for byte on the wire. :class:`ConversationPrefixes` keeps, per
conversation (a key such as the settings and the first message's id), the wire images of the
last message list and a value derived from it (a validation state, the vendor JSON of each
message); :meth:`ConversationPrefixes.match` hands the value back only when the new list starts
with exactly those images, compared byte for byte (no hash of the content stands in for them),
so what is reused is what a fresh computation over those messages would give.

Bounds: ``max_entries`` conversations and ``max_bytes`` bytes (the images and whatever size
the caller states for the value), the least recently used dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["BoundedLRU", "ConversationPrefixes"]

T = TypeVar("T")


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """The bookkeeping of a least-recently-used map bounded by ``max_entries`` entries and
    ``max_bytes`` bytes (each entry's size stated when stored), safe to use from several threads
    at once; subclasses add their lookup. ``hits`` and ``misses`` count lookups."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Bytes held (the sizes stated when storing)."""
        return self._bytes

    def _get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def _get_many(self, keys: Iterable[K]) -> list[V | None]:
        """The value under each of ``keys``, in order (None where there is none), each found
        one now the most recently used and each lookup counted as a hit or a miss, under one
        taking of the lock."""
        out: list[V | None] = []
        with self._lock:
            entries = self._entries
            for key in keys:
                found = entries.get(key)
                if found is None:
                    self.misses += 1
                    out.append(None)
                else:
                    entries.move_to_end(key)
                    self.hits += 1
                    out.append(found[0])
        return out

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def _put(self, key: K, value: V, size: int) -> None:
        """Store ``value`` (``size`` bytes) under ``key``, replacing what was there; then drop
        the least recently used entries until within the bounds. A value larger than
        ``max_bytes`` is not stored."""
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0


class ConversationPrefixes(BoundedLRU[Hashable, tuple[tuple[bytes, ...], T]]):
    """LRU map ``key -> (message images, value)`` within ``max_entries`` and ``max_bytes``."""

    def match(
        self, key: Hashable, images: Sequence[bytes | None]
    ) -> tuple[tuple[bytes, ...], T] | None:
        """``(kept images, value)`` when ``images`` starts with exactly the images kept under
        ``key`` (compared byte for byte; a None image, one too large to keep, never matches),
        else None."""
        found = self._get(key)
        # one tuple comparison: element by element in C (identical objects compare at once)
        fits = (
            found is not None
            and len(found[0]) <= len(images)
            and found[0] == tuple(images[: len(found[0])])
        )
        self._count(fits)
        return found if fits else None

    def put(self, key: Hashable, images: tuple[bytes, ...], value: T, value_bytes: int = 0) -> None:
        """Keep ``images`` and ``value`` (about ``value_bytes`` bytes) under ``key``, replacing
        what was kept there; nothing is kept when they alone exceed ``max_bytes``."""
        self._put(key, (images, value), sum(map(len, images)) + value_bytes)
