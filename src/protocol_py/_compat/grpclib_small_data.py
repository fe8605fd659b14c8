"""Small DATA frames of a stream are held as one chunk, not as one object each (grpclib 0.4).

grpclib queues every DATA frame a stream receives as its own ``UnackedData`` tuple
(``Buffer.add``), and a read moves each into a ``memoryview`` of its own: about 430 bytes of
server memory per frame whatever its payload, none of it in the memory budget (which charges a
request twice its announced length). A peer sending a body one byte per frame, acknowledged
frame by frame, turned a 3.9 MB request into 1.7 GB of RSS. :func:`install` makes ``add``
append a small frame's payload to the chunk still waiting at the end of the stream's queue
when that chunk is small too (both under :data:`COALESCE_BYTES` together), summing the payload
and flow-control sizes: the reader sees the same bytes in the same order, acknowledged as
before (when it takes them), in a handful of objects per :data:`COALESCE_BYTES`. A chunk the
reader has already taken, the end-of-stream marker, and frames of :data:`COALESCE_BYTES` or more
are never merged. Merging copies at most :data:`COALESCE_BYTES` per frame
(docs/decisions.md#d44).

Installed by :func:`protocol_py._compat.install` (client and server start), once per process,
and only when grpclib still has the shape it was written for (a ``Buffer`` whose ``add`` and
``_unacked`` queue of ``UnackedData`` exist); otherwise nothing changes. Checked on grpclib
0.4.9 (the pinned range is ``>=0.4.9,<0.5``).
"""

from __future__ import annotations

import collections
from typing import Any, Final

from grpclib import protocol as _protocol

__all__ = ["COALESCE_BYTES", "install"]

COALESCE_BYTES: Final = 4096
"""Most bytes of payload a merged chunk holds (4 KiB): frames smaller than this join the chunk
queued before them while the two together stay under it."""


def install() -> bool:
    """Patch ``grpclib.protocol.Buffer.add`` (idempotent); True when installed."""
    buffer = getattr(_protocol, "Buffer", None)
    add = getattr(buffer, "add", None)
    unacked = getattr(_protocol, "UnackedData", None)
    if buffer is None or add is None or unacked is None:
        return False
    if getattr(add, "_protocol_py_small_data", False):
        return True

    def coalescing_add(self: Any, data: bytes, ack_size: int) -> None:
        size = len(data)
        queued = getattr(getattr(self, "_unacked", None), "_queue", None)
        if 0 < size < COALESCE_BYTES and isinstance(queued, collections.deque) and queued:
            last = queued[-1]
            if last.data_size > 0 and last.data_size + size <= COALESCE_BYTES:
                queued[-1] = unacked(
                    last.data + data, last.data_size + size, last.ack_size + ack_size
                )
                return
        add(self, data, ack_size)

    coalescing_add._protocol_py_small_data = True  # type: ignore[attr-defined]
    buffer.add = coalescing_add
    return True
