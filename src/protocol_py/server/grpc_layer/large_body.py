"""A large request body assembled as it arrives, without one long copy on the event loop
(one request never stalls the others).

grpclib's ``Stream.recv_data(size)`` waits until all ``size`` bytes have arrived and then joins
its HTTP/2 DATA frames (16 KiB each) into one ``bytes`` on the event loop: for a 60 MiB request
that single ``b"".join`` held the interpreter, and so every other stream, for about 40 ms
(measured with ``benchmarks/loop_stall.py --trace-stalls``), with the frames and the joined
copy alive at once. :func:`receive_body` instead reads a body of at least
:data:`ASSEMBLE_MIN_BYTES` in pieces of :data:`RECEIVE_PIECE_BYTES` and copies each piece into
one ``bytes`` object allocated up front, uninitialised (CPython's
``PyBytes_FromStringAndSize(NULL, n)``, the way C code builds a ``bytes`` it fills itself),
with ``ctypes.memmove``, which releases the interpreter while it copies. The object is handed
out only once full. Every piece's frames are acknowledged (and freed) as the piece is read,
so the peer's flow-control window still moves and at most one piece is held twice.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = ["ASSEMBLE_MIN_BYTES", "RECEIVE_PIECE_BYTES", "BytesBuilder", "receive_body"]

ASSEMBLE_MIN_BYTES: Final = 4 * 1024 * 1024
"""Request bodies of at least this many bytes (4 MiB) are read in pieces and assembled by
:class:`BytesBuilder`; smaller ones are read in one ``recv_data`` (one join of at most 4 MiB
takes about a millisecond)."""

RECEIVE_PIECE_BYTES: Final = 1024 * 1024
"""Bytes read from the stream (and copied into the body) per step, 1 MiB: the longest single
copy on the event loop while a large body arrives."""

_ALLOCATE: Final = ctypes.pythonapi.PyBytes_FromStringAndSize
_ALLOCATE.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_ALLOCATE.restype = ctypes.py_object
_ADDRESS: Final = ctypes.pythonapi.PyBytes_AsString
_ADDRESS.argtypes = [ctypes.py_object]
_ADDRESS.restype = ctypes.c_void_p

_CPYTHON: Final = platform.python_implementation() == "CPython"
"""Uninitialised ``bytes`` exist only in CPython's C API; elsewhere pieces are joined."""


class BytesBuilder:
    """One ``bytes`` of ``size`` bytes written piece by piece, in order, then :meth:`take`-n.

    Args:
        size: Total length in bytes (at least 1).

    The object is not reachable from anywhere else until :meth:`take` returns it (full), so
    writing into it keeps ``bytes`` immutable for everyone who can see it.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size: must be at least 1 byte, got {size}")
        self.size = size
        self.filled = 0
        self._pieces: list[bytes] = []
        self._data: bytes | None = _ALLOCATE(None, size) if _CPYTHON else None
        self._address = _ADDRESS(self._data) if self._data is not None else 0

    def write(self, piece: bytes) -> None:
        """Append ``piece`` (copied with the interpreter released).

        Raises:
            ValueError: ``piece`` would go past ``size``.
        """
        if self.filled + len(piece) > self.size:
            raise ValueError(
                f"piece of {len(piece)} bytes at offset {self.filled} exceeds the body's "
                f"{self.size} bytes"
            )
        if self._data is not None:
            ctypes.memmove(self._address + self.filled, piece, len(piece))
        else:
            self._pieces.append(piece)
        self.filled += len(piece)

    def take(self) -> bytes:
        """The assembled body; the builder forgets it.

        Raises:
            ValueError: fewer than ``size`` bytes were written.
        """
        if self.filled != self.size:
            raise ValueError(f"body incomplete: {self.filled} of {self.size} bytes written")
        data = self._data if self._data is not None else b"".join(self._pieces)
        self._data, self._pieces, self._address = None, [], 0
        return data


async def receive_body(recv: Callable[[int], Awaitable[bytes]], size: int) -> bytes:
    """``size`` bytes from ``recv`` (grpclib's ``recv_data``), in :data:`RECEIVE_PIECE_BYTES`
    pieces assembled by :class:`BytesBuilder` when ``size`` is at least
    :data:`ASSEMBLE_MIN_BYTES`, in one call otherwise.

    Returns ``b""`` when the stream ends before ``size`` bytes (as ``recv`` does at its end);
    ``recv``'s own exceptions (grpclib's AssertionError for a body cut short) propagate.
    """
    if size < ASSEMBLE_MIN_BYTES:
        return await recv(size)
    builder = BytesBuilder(size)
    while builder.filled < size:
        piece = await recv(min(RECEIVE_PIECE_BYTES, size - builder.filled))
        if not piece:
            return b""  # the stream ended: the caller refuses the truncated body
        builder.write(piece)
        del piece
    return builder.take()
