"""CPU-heavy steps off the event loop (issue 8 item 4: one request never stalls the others).

Decoding and validating a large request, translating it to a vendor body and counting its
tokens are pure-Python CPU work: run on the event loop, a 4 MB request held it for seconds and
every other stream, health check and Describe waited. :func:`run_cpu` runs such a step in a
worker thread instead when its input is at least :data:`OFFLOAD_MIN_BYTES` (below that the
thread hand-off costs more than the work). The GIL still serialises Python code, but the
interpreter switches threads every ``sys.getswitchinterval()`` seconds (5 ms by default), so
the loop gets the interpreter back within about one interval: see :data:`SWITCH_INTERVAL_S`.

At most :data:`MAX_CPU_JOBS` such steps run at once (process-wide); more wait their turn on the
event loop without holding it, so N huge requests cannot starve the loop of the interpreter or
hold N decoded copies in memory at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, ParamSpec, TypeVar

__all__ = [
    "GC_QUIET_MIN_BYTES",
    "MAX_CPU_JOBS",
    "OFFLOAD_MIN_BYTES",
    "SWITCH_INTERVAL_S",
    "release_large",
    "run_cpu",
]

P = ParamSpec("P")
T = TypeVar("T")

MAX_CPU_JOBS: Final = 2
"""Most CPU-heavy steps (decode, validation, translation, token counting) running at once in
worker threads, process-wide. Later ones wait (asynchronously) for a free slot."""

OFFLOAD_MIN_BYTES: Final = 64 * 1024
"""Inputs of at least this many bytes (64 KiB of request) are processed in a worker thread;
smaller ones inline, where the step takes well under a millisecond."""

SWITCH_INTERVAL_S: Final = 0.005
"""The interpreter's thread switch interval the loop-stall bound relies on, seconds (CPython's
default). :func:`run_cpu` lowers a larger ``sys.setswitchinterval`` to this value."""

GC_QUIET_MIN_BYTES: Final = 1024 * 1024
"""Inputs of at least this many bytes (1 MiB) run with the cyclic garbage collector paused,
and the objects alive at the end are frozen (``gc.freeze``) until :func:`release_large` frees
them: a collection over the hundreds of thousands of objects of a large request is one C call
that would hold the interpreter (and so the event loop) for hundreds of milliseconds."""

_gc_lock = threading.Lock()
_gc_quiet = [0, True]  # [large jobs running, collector enabled before the first]

_executor: list[ThreadPoolExecutor] = []  # the process-wide pool, made on first use
_executor_lock = threading.Lock()
_slots: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


def _pool() -> ThreadPoolExecutor:
    with _executor_lock:
        if not _executor:
            _executor.append(
                ThreadPoolExecutor(max_workers=MAX_CPU_JOBS, thread_name_prefix="protocol-py-cpu")
            )
            if sys.getswitchinterval() > SWITCH_INTERVAL_S:
                sys.setswitchinterval(SWITCH_INTERVAL_S)
        return _executor[0]


def _slot(loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
    slot = _slots.get(loop)
    if slot is None:
        for old in [lp for lp in _slots if lp.is_closed()]:
            del _slots[old]
        slot = _slots[loop] = asyncio.Semaphore(MAX_CPU_JOBS)
    return slot


def _quiet(func: Callable[[], T]) -> T:
    """``func()`` with the cyclic collector paused; what it built is frozen afterwards."""
    with _gc_lock:
        if _gc_quiet[0] == 0:
            _gc_quiet[1] = gc.isenabled()
            gc.disable()
        _gc_quiet[0] += 1
    try:
        return func()
    finally:
        with _gc_lock:
            _gc_quiet[0] -= 1
            if _gc_quiet[0] == 0:
                gc.freeze()
                if _gc_quiet[1]:
                    gc.enable()


async def release_large(size: int, held: list[Any]) -> None:
    """Free the objects in ``held`` (a large request) in a worker thread when ``size`` is at
    least :data:`OFFLOAD_MIN_BYTES`; after a :data:`GC_QUIET_MIN_BYTES` one, objects frozen by
    earlier large jobs go back to the collector when none is running."""
    await run_cpu(size, held.clear)
    if size >= GC_QUIET_MIN_BYTES:
        with _gc_lock:
            if _gc_quiet[0] == 0:
                gc.unfreeze()


async def run_cpu(size: int, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)``, in a worker thread when ``size`` (bytes of input) is at
    least :data:`OFFLOAD_MIN_BYTES`, inline otherwise.

    Cancelling the awaiting task stops waiting at once; a step already running in a thread
    finishes there (holding its slot until then) and its result is dropped.

    Raises:
        Whatever ``func`` raises.
    """
    if size < OFFLOAD_MIN_BYTES:
        return func(*args, **kwargs)
    loop = asyncio.get_running_loop()
    slot = _slot(loop)
    await slot.acquire()
    try:
        if size >= GC_QUIET_MIN_BYTES:
            job = _pool().submit(_quiet, lambda: func(*args, **kwargs))
        else:
            job = _pool().submit(lambda: func(*args, **kwargs))
    except BaseException:
        slot.release()
        raise

    def release(_: object) -> None:  # when the step really ends, even after a cancel
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
            loop.call_soon_threadsafe(slot.release)

    job.add_done_callback(release)
    return await asyncio.wrap_future(job)
