"""The repr of a received HTTP/2 DATA frame without copying its payload (hyperframe 6).

h2 (4.x) formats every frame it receives for its trace log whether or not anything logs it
(``H2Connection._receive_frame`` calls ``repr(frame)`` eagerly), and hyperframe's (6.x)
``DataFrame`` repr serializes the whole frame body and hex-encodes all of it, to keep the first
20 hex digits. For a 1.1 MB StreamCompletionRequest that is about 1.5 ms of the server's event
loop on every turn, spent on text nobody reads (and the same per event frame on the client).

:func:`install` replaces ``DataFrame._body_repr`` with one that hex-encodes only the first
:data:`REPR_HEAD_BYTES` bytes of the serialized body: the repr text is exactly hyperframe's
(tests compare both). It is installed by :func:`protocol_py._compat.install` (client and
server start), once per process, and only when hyperframe still has the shape it was written
for (a ``DataFrame`` without its own ``_body_repr``, and ``hyperframe.frame._raw_data_repr``);
otherwise nothing changes. Checked on hyperframe 6.1.0 with h2 4.4.1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from hyperframe import frame as _frame

__all__ = ["REPR_HEAD_BYTES", "install"]

REPR_HEAD_BYTES: Final = 11
"""Bytes of a DATA frame's serialized body that hyperframe's repr can show: it keeps 20 hex
digits (10 bytes) and adds "..." when there were more, which one more byte decides."""

_raw_data_repr: Callable[[bytes | None], str] | None = getattr(_frame, "_raw_data_repr", None)


def data_frame_body_repr(self: Any) -> str:
    """hyperframe's ``DataFrame`` body repr, from the first :data:`REPR_HEAD_BYTES` bytes of
    the serialized body (padding length, data, padding) instead of all of them."""
    assert _raw_data_repr is not None
    head = self.serialize_padding_data() + bytes(self.data[:REPR_HEAD_BYTES])
    head += b"\0" * min(self.pad_length, REPR_HEAD_BYTES)
    return _raw_data_repr(head[:REPR_HEAD_BYTES])


def install() -> bool:
    """Use :func:`data_frame_body_repr` for every hyperframe ``DataFrame`` (idempotent).

    Returns:
        True when installed (now or before); False when hyperframe's shape differs (a release
        with its own DataFrame repr): then nothing is changed.
    """
    data_frame: Any = _frame.DataFrame
    current = data_frame.__dict__.get("_body_repr")
    if current is data_frame_body_repr:
        return True
    if current is not None or _raw_data_repr is None:
        return False
    data_frame._body_repr = data_frame_body_repr
    return True
