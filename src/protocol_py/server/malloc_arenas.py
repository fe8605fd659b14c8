"""The glibc malloc settings of the ``protocol-py serve`` process: fewer arenas, freed heap
kept for the next turn.

The worker threads that decode and validate large requests allocate from per-thread malloc
arenas, and ``malloc_trim`` from another thread does not shrink those: the native heap they
keep stays with the process after large StreamCompletions (RSS above baseline while
tracemalloc is flat). With one arena every thread allocates from the main arena, which the
memory trim shrinks (``benchmarks/rss_creep.py`` compares the two). :func:`trim_heap` is that
trim (``malloc_trim(0)``).

A kernel resends its whole conversation every turn, so each turn of a long one allocates and
frees the same few megabyte-sized buffers (the request body, the vendor body, their HTTP/2
frames). With glibc's defaults the top of the heap is returned to the OS whenever more than
twice the largest recently freed block is free there, and every turn's buffers then land on
new pages: about 700 page faults per 601-message turn (1.1 MB) on the project's machine, 1.75
us each. :func:`keep_freed_heap` raises the two thresholds, so those pages stay mapped between
turns; the memory trim (at most once a second, after large or aborted calls and whenever a
connection is left without an open call) and the idle reclaim still return them
(docs/decisions.md#d45).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Final, cast

__all__ = [
    "MALLOC_ARENAS",
    "MMAP_THRESHOLD_BYTES",
    "TRIM_THRESHOLD_BYTES",
    "find_malloc_trim",
    "keep_freed_heap",
    "limit_malloc_arenas",
    "trim_heap",
]

MALLOC_ARENAS: Final = 1
"""glibc malloc arenas of a ``protocol-py serve`` process (``mallopt(M_ARENA_MAX, 1)``): every
thread allocates from the main arena, which ``malloc_trim`` returns to the OS. The worker
threads are few (``protocol_py.server.offload.MAX_CPU_JOBS``), so the shared arena's lock costs
little."""

_M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` parameter number of ``M_ARENA_MAX`` (malloc.h)."""

_M_TRIM_THRESHOLD: Final = -1
"""glibc's ``mallopt`` parameter number of ``M_TRIM_THRESHOLD`` (malloc.h)."""

_M_MMAP_THRESHOLD: Final = -3
"""glibc's ``mallopt`` parameter number of ``M_MMAP_THRESHOLD`` (malloc.h)."""

MMAP_THRESHOLD_BYTES: Final = 4 * 1024 * 1024
"""Smallest block a ``protocol-py serve`` process allocates with its own ``mmap``, bytes (4
MiB): smaller blocks (the body, vendor body and HTTP/2 frames of a conversation of up to about
3.5 MB) come from the heap and their pages are reused once freed; a block of its own mapping
is new pages every time, but goes back to the OS the moment it is freed, so a call of tens of
megabytes leaves nothing behind (at 32 MiB, RSS stayed 58 MiB over the baseline after four
clients' 60 MiB Render replies, ``tests/reliability/test_reply_budget.py``)."""

TRIM_THRESHOLD_BYTES: Final = 16 * 1024 * 1024
"""Free bytes at the top of the heap past which ``free`` returns them to the OS (16 MiB): a
turn's buffers stay mapped for the next turn, and the explicit memory trim
(``grpc_layer.connections.MEMORY_TRIM_INTERVAL``; see ``LARGE_CALL_BYTES`` there for when it
runs) and the idle reclaim return what stays."""


def _mallopt() -> Callable[[int, int], int] | None:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return cast("Callable[[int, int], int]", mallopt)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Set glibc's ``M_ARENA_MAX`` to ``arenas`` for this process; call it before threads
    start. True when set; False where the C library is not glibc (nothing changes)."""
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, arenas))


def keep_freed_heap(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (bytes) for this process, so
    the megabyte buffers of one turn reuse the pages of the last (module docstring). True when
    both were set; False where the C library is not glibc (nothing changes)."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    mapped = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold))
    return bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and mapped


def find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, typed for ctypes, or None where the C library is not glibc."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return cast("Callable[[int], int]", trim)


_malloc_trim: list[Callable[[int], int] | None] = []


def trim_heap() -> bool:
    """Return the C heap's free pages to the operating system (glibc's ``malloc_trim(0)``; it
    releases the interpreter while it runs). True when memory was released; False when none
    was, or where the C library is not glibc."""
    if not _malloc_trim:
        _malloc_trim.append(find_malloc_trim())
    trim = _malloc_trim[0]
    return trim is not None and bool(trim(0))
