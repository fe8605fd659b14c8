"""The vendor body built for the context-window count, kept for the stream of the same request.

The server counts a request's input tokens (:meth:`HTTPProvider.count_input_tokens`, the
serialized vendor body's length) right before it streams it, and both need the same serialized
vendor body: building it once instead of twice removes a cost that grows with the conversation
from every turn. Only requests the server decoded from the wire are kept (it never
changes them between the count and the stream); an entry is used once, goes with its request
(weakly held), and is dropped when the provider is reconfigured.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Final

from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest

__all__ = ["MAX_KEPT_BODIES", "MAX_KEPT_BODY_BYTES", "BodyMemo"]

MAX_KEPT_BODIES: Final = 16
"""Most serialized bodies kept at once (requests counted but not yet streamed), entries; the
oldest is dropped first."""

MAX_KEPT_BODY_BYTES: Final = 64 * 1024 * 1024
"""Most bytes of serialized bodies kept at once (64 MiB); the oldest are dropped first, and a
body larger than this alone is not kept (its stream builds it again)."""

_Entry = tuple["weakref.ref[StreamCompletionRequest]", ModelSpec, bytes]


class BodyMemo:
    """``request -> serialized vendor body`` for requests counted and not yet streamed."""

    def __init__(self) -> None:
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self.size_bytes = 0
        """Bytes of bodies kept now."""
        self._lock = threading.RLock()  # re-entered by a weakref callback run by GC

    def keep(self, request: StreamCompletionRequest, spec: ModelSpec, body: bytes) -> None:
        """Keep ``body``, built for ``request`` and ``spec``, for one :meth:`take`."""
        if len(body) > MAX_KEPT_BODY_BYTES:
            return
        key = id(request)
        ref = weakref.ref(request, lambda _ref: self._drop(key, _ref))
        with self._lock:
            self._remove(key)
            self._entries[key] = (ref, spec, body)
            self.size_bytes += len(body)
            while len(self._entries) > MAX_KEPT_BODIES or self.size_bytes > MAX_KEPT_BODY_BYTES:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self.size_bytes -= len(dropped)

    def _remove(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.size_bytes -= len(entry[2])

    def take(self, request: StreamCompletionRequest, spec: ModelSpec) -> bytes | None:
        """The body kept for this very ``request`` and ``spec`` (then forgotten), or None."""
        with self._lock:
            entry = self._entries.get(id(request))
            if entry is None or entry[0]() is not request:
                return None
            if entry[1] is not spec and entry[1] != spec:
                return None
            self._remove(id(request))
        return entry[2]

    def clear(self) -> None:
        """Forget every body."""
        with self._lock:
            self._entries.clear()
            self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key: int, ref: weakref.ref[StreamCompletionRequest]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                self._remove(key)
