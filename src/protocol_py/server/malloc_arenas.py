"""Fewer glibc malloc arenas for the ``protocol-py serve`` process.

The worker threads that decode and validate large requests allocate from per-thread malloc
arenas, and ``malloc_trim`` from another thread does not shrink those: the native heap they
keep stays with the process after large StreamCompletions (RSS above baseline while
tracemalloc is flat). With one arena every thread allocates from the main arena, which the
memory trim shrinks (``benchmarks/rss_creep.py`` compares the two). :func:`trim_heap` is that
trim (``malloc_trim(0)``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Final, cast

__all__ = ["MALLOC_ARENAS", "find_malloc_trim", "limit_malloc_arenas", "trim_heap"]

MALLOC_ARENAS: Final = 1
"""glibc malloc arenas of a ``protocol-py serve`` process (``mallopt(M_ARENA_MAX, 1)``): every
thread allocates from the main arena, which ``malloc_trim`` returns to the OS. The worker
threads are few (``protocol_py.server.offload.MAX_CPU_JOBS``), so the shared arena's lock costs
little."""

_M_ARENA_MAX: Final = -8
"""glibc's ``mallopt`` parameter number of ``M_ARENA_MAX`` (malloc.h)."""


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Set glibc's ``M_ARENA_MAX`` to ``arenas`` for this process; call it before threads
    start. True when set; False where the C library is not glibc (nothing changes)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))


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
