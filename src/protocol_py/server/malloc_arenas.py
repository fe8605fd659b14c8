"""Fewer glibc malloc arenas for the ``protocol-py serve`` process.

The worker threads that decode and validate large requests allocate from per-thread malloc
arenas, and ``malloc_trim`` from another thread does not shrink those: the native heap they
keep stays with the process after large StreamCompletions (RSS above baseline while
tracemalloc is flat). With one arena every thread allocates from the main arena, which the
memory trim shrinks (``benchmarks/rss_creep.py`` compares the two).
"""

from __future__ import annotations

import ctypes
from typing import Final

__all__ = ["MALLOC_ARENAS", "limit_malloc_arenas"]

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
