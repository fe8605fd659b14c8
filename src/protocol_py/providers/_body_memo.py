"""The vendor body built for the context-window count, kept for the stream of the same request.

The server counts a request's input tokens (:meth:`HTTPProvider.count_input_tokens`, the
serialized vendor body's length) right before it streams it, and both need the same serialized
vendor body: building it once instead of twice removes a cost that grows with the conversation
from every turn (issue 12). Only requests the server decoded from the wire are kept (it never
changes them between the count and the stream); an entry is used once, goes with its request
(weakly held), and is dropped when the provider is reconfigured.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Final

from protocol_py_gen.model.v1 import ModelSpec, StreamCompletionRequest

__all__ = ["MAX_KEPT_BODIES", "BodyMemo"]

MAX_KEPT_BODIES: Final = 16
"""Most serialized bodies kept at once (requests counted but not yet streamed), entries; the
oldest is dropped first."""

_Entry = tuple["weakref.ref[StreamCompletionRequest]", ModelSpec, bytes]


class BodyMemo:
    """``request -> serialized vendor body`` for requests counted and not yet streamed."""

    def __init__(self) -> None:
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._lock = threading.RLock()  # re-entered by a weakref callback run by GC

    def keep(self, request: StreamCompletionRequest, spec: ModelSpec, body: bytes) -> None:
        """Keep ``body``, built for ``request`` and ``spec``, for one :meth:`take`."""
        key = id(request)
        ref = weakref.ref(request, lambda _ref: self._drop(key, _ref))
        with self._lock:
            self._entries[key] = (ref, spec, body)
            self._entries.move_to_end(key)
            while len(self._entries) > MAX_KEPT_BODIES:
                self._entries.popitem(last=False)

    def take(self, request: StreamCompletionRequest, spec: ModelSpec) -> bytes | None:
        """The body kept for this very ``request`` and ``spec`` (then forgotten), or None."""
        with self._lock:
            entry = self._entries.get(id(request))
            if entry is None or entry[0]() is not request:
                return None
            if entry[1] is not spec and entry[1] != spec:
                return None
            del self._entries[id(request)]
        return entry[2]

    def clear(self) -> None:
        """Forget every body."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key: int, ref: weakref.ref[StreamCompletionRequest]) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is ref:
                del self._entries[key]
