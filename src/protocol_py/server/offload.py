"""CPU-heavy steps off the event loop (one request never stalls the others).

Decoding and validating a large request, translating it to a vendor body and counting its
tokens are pure-Python CPU work: run on the event loop, a 4 MB request would hold it for
seconds and every other stream, health check and Describe would wait. :func:`run_cpu` runs such a
step in a worker thread instead when its input is at least :data:`OFFLOAD_MIN_BYTES` (below that
the thread hand-off costs more than the work). The GIL still serialises Python code, but the
interpreter switches threads every ``sys.getswitchinterval()`` seconds (5 ms by default), so the
loop gets the interpreter back within about one interval: see :data:`SWITCH_INTERVAL_S`.

At most :data:`MAX_CPU_JOBS` (one) such steps run at once (process-wide); more wait their turn
on the event loop without holding it, so N huge requests cannot starve the loop of the
interpreter or hold N decoded copies in memory at once (docs/decisions.md#d38). The turns are
shared fairly between connections (:data:`CPU_OWNER`, docs/decisions.md#d49): one connection's
steps in arrival order, and among those waiting the connection that has held the slot least
goes next.
``protocol-py serve`` also lowers the switch interval to :data:`SERVE_SWITCH_INTERVAL_S`.

Cancellation reaches the worker: when the task awaiting :func:`run_cpu` is cancelled (the
client cancelled its stream, its deadline passed, its connection dropped), a step not yet
started never runs, and a running step stops at its next :func:`checkpoint`, which raises
:class:`JobCancelled` in the worker thread. Long CPU passes call :func:`checkpoint` between
their bounded slices (the reference tokenizer every ``TOKEN_COUNT_CHUNK_CHARS`` characters and
every message), so after a storm of cancels the workers are idle within one slice, not after
the whole request.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any, Final, ParamSpec, TypeVar

from protocol_py.server.malloc_arenas import trim_heap

__all__ = [
    "CPU_OWNER",
    "GC_QUIET_MIN_BYTES",
    "MAX_CPU_JOBS",
    "MAX_TRACKED_OWNERS",
    "OFFLOAD_MIN_BYTES",
    "POOL_START_TIMEOUT_S",
    "RECLAIM_DELAY_S",
    "RECLAIM_MAX_FROZEN",
    "RELEASE_STEP_ITEMS",
    "SERVE_SWITCH_INTERVAL_S",
    "SWITCH_INTERVAL_S",
    "JobCancelled",
    "JobNotStarted",
    "checkpoint",
    "release_dict_in_steps",
    "release_in_steps",
    "release_large",
    "run_cpu",
    "run_cpu_started_by",
    "run_released",
    "start_workers",
]

P = ParamSpec("P")
T = TypeVar("T")

MAX_CPU_JOBS: Final = 1
"""Most CPU-heavy steps (decode, validation, translation, token counting) running at once in
worker threads, process-wide (docs/decisions.md#d38). Later ones wait (asynchronously, in
arrival order) for the free slot. One: two workers in pure-Python decodes take the interpreter
from each other and from the loop thread, which waits up to a switch interval for it after each
syscall, so the loop's gaps grew with the number of workers, and each running decode holds its
objects."""

OFFLOAD_MIN_BYTES: Final = 64 * 1024
"""Inputs of at least this many bytes (64 KiB of request) are processed in a worker thread;
smaller ones inline, where the step takes well under a millisecond."""

SWITCH_INTERVAL_S: Final = 0.005
"""The interpreter's thread switch interval the loop-stall bound relies on, seconds (CPython's
default). :func:`run_cpu` lowers a larger ``sys.setswitchinterval`` to this value."""

SERVE_SWITCH_INTERVAL_S: Final = 0.001
"""The thread switch interval ``protocol-py serve`` (:func:`protocol_py.server.serve.serve`)
sets for its process, seconds (docs/decisions.md#d38). After each syscall the loop thread waits
for a worker in a pure-Python decode to give the interpreter back, up to one interval: at 5 ms
a Describe beside 32 concurrent near-limit requests waited up to 250 ms, at 1 ms 64-72 ms
(``benchmarks/heavy_calls.py``). Not set on import: it is process-wide, the embedding
application's to choose."""

GC_QUIET_MIN_BYTES: Final = 1024 * 1024
"""Inputs of at least this many bytes (1 MiB) run with the cyclic garbage collector paused,
and the objects alive at the end are frozen (``gc.freeze``) until :func:`release_large` frees
them: a collection over the hundreds of thousands of objects of a large request is one C call
that would hold the interpreter (and so the event loop) for hundreds of milliseconds. Once no
such job runs, the idle reclaim (:data:`RECLAIM_DELAY_S`) gives what stays frozen back to the
collector."""

RECLAIM_DELAY_S: Final = 1.0
"""Seconds after the last :data:`GC_QUIET_MIN_BYTES` job ended before the idle reclaim runs (and
between its later tries while CPU jobs run or too much is frozen): with no CPU job running and
at most :data:`RECLAIM_MAX_FROZEN` objects frozen, it unfreezes them, runs one full collection
and returns the C heap's free pages to the operating system
(:func:`protocol_py.server.malloc_arenas.trim_heap`). The objects a refused or failed large
call left in reference cycles (its exception, traceback and frames, its stream) are frozen
with everything else by the next large job and are otherwise never collected: scattered over
the pymalloc arenas of the flood, 31 such cycles kept 130 MiB of arenas mapped after 32
refused near-limit requests (``benchmarks/rss_creep.py --flood``); after 8 concurrent 18.6 MiB
texts, cycles not frozen but waiting for a full collection held five request bodies and three
decoded texts (190 MiB)."""

RECLAIM_MAX_FROZEN: Final = 100_000
"""Most frozen objects the idle reclaim (:data:`RECLAIM_DELAY_S`) collects over, on the event
loop, in one full collection (about 0.4 microseconds each on CPython 3.11: at most about 40 ms;
an idle server has about 55,000). More frozen means a large request is still held: the reclaim
tries again :data:`RECLAIM_DELAY_S` later, until it ends."""


class JobCancelled(Exception):  # noqa: N818 (a signal, like asyncio.CancelledError)
    """Raised by :func:`checkpoint` in a worker step whose awaiting task was cancelled; the
    step's result was already dropped, so nothing catches it but the worker."""


class JobNotStarted(Exception):  # noqa: N818 (a signal, like TimeoutError)
    """Raised by :func:`run_cpu_started_by` when no worker slot was free by its time; the step
    never ran."""


_job_state = threading.local()


def checkpoint() -> None:
    """Stop the current worker step if the task awaiting it was cancelled.

    Called between the bounded slices of a long CPU pass. In a step started by :func:`run_cpu`
    in a worker thread it raises :class:`JobCancelled` once that step's awaiting task was
    cancelled; anywhere else (inline on the event loop, outside any step) it does nothing.
    Costs one thread-local read.
    """
    stop: threading.Event | None = getattr(_job_state, "stop", None)
    if stop is not None and stop.is_set():
        raise JobCancelled


def _stoppable(stop: threading.Event, func: Callable[[], T]) -> T:
    """``func()`` in a worker thread, with ``stop`` as the flag :func:`checkpoint` reads."""
    _job_state.stop = stop
    try:
        return func()
    finally:
        _job_state.stop = None


_gc_lock = threading.Lock()
_gc_quiet = [0, True]  # [large jobs running, collector enabled before the first]

_slots: dict[asyncio.AbstractEventLoop, _FairSlot] = {}
_reclaims: dict[asyncio.AbstractEventLoop, asyncio.TimerHandle] = {}

POOL_START_TIMEOUT_S: Final = 5.0
"""Longest wait for a worker thread to start when the pool is made, seconds (a thread starts
in microseconds on an idle interpreter)."""


class _Workers:
    """:data:`MAX_CPU_JOBS` worker threads, all started up front, a job going to the first
    idle one.

    ``ThreadPoolExecutor`` starts a thread when a job finds none idle, and ``Thread.start``
    waits (on the event loop) until the new thread has run: while another worker held the
    interpreter in one long C call (upb parsing a 60 MiB body) that wait stalled the loop for
    the whole call (``benchmarks/loop_stall.py --trace-stalls``). Here every thread starts when
    the pool is made, while no job runs. Jobs go to the lowest-numbered idle thread (one
    single-thread executor each), not to whichever wakes first, so one-at-a-time jobs all run
    on the same thread and allocate from one C allocator arena: spreading them over two threads
    raised the peak RSS of a 4 MB request by about 20 MiB.
    """

    def __init__(self) -> None:
        self._threads = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"protocol-py-cpu-{i}")
            for i in range(MAX_CPU_JOBS)
        ]
        for thread in self._threads:  # start each thread now
            thread.submit(int).result(timeout=POOL_START_TIMEOUT_S)
        self._busy = [0] * MAX_CPU_JOBS
        self._lock = threading.Lock()

    def submit(self, func: Callable[[], T]) -> Future[T]:
        """Run ``func()`` on the first idle thread (the least busy when none is idle)."""
        with self._lock:
            index = self._busy.index(min(self._busy))
            self._busy[index] += 1
        job = self._threads[index].submit(func)
        job.add_done_callback(lambda _: self._done(index))
        return job

    def _done(self, index: int) -> None:
        with self._lock:
            self._busy[index] -= 1


_workers: list[_Workers] = []  # the process-wide pool, made on first use
_workers_lock = threading.Lock()


def _pool() -> _Workers:
    """The process-wide pool (:class:`_Workers`), made on first use."""
    with _workers_lock:
        if not _workers:
            _workers.append(_Workers())
            if sys.getswitchinterval() > SWITCH_INTERVAL_S:
                sys.setswitchinterval(SWITCH_INTERVAL_S)
        return _workers[0]


def start_workers() -> None:
    """Start the :data:`MAX_CPU_JOBS` worker threads now, if not yet started. The server calls
    this when it starts: made on a large request's first job instead, the pool's thread starts
    would wait on the event loop while that request is being served (a stall
    ``benchmarks/loop_stall.py --trace-python`` shows)."""
    _pool()


CPU_OWNER: ContextVar[Hashable | None] = ContextVar("protocol_py_cpu_owner", default=None)
"""Who a CPU step is for: the server sets it, per call, to its connection's ``id()`` (no
reference to the connection is kept), so the steps of one connection wait their turn among
themselves while the other connections' steps take theirs (:class:`_FairSlot`); unset (None),
every step is one owner's, in arrival order."""


MAX_TRACKED_OWNERS: Final = 4096
"""Most owners (connections) whose use of the CPU slot is remembered while they wait for
nothing, count; past it the least used are forgotten (they start again at the slot's clock)."""


class _FairSlot:
    """:data:`MAX_CPU_JOBS` permits for CPU steps, shared fairly by their owners (connections,
    :data:`CPU_OWNER`; docs/decisions.md#d49). Each owner's steps run in arrival order; among
    the owners waiting, the next permit goes to the one that has used the slot least, in
    seconds held (start-time fair queuing). An owner that was not waiting starts at the slot's
    clock, which is the use of the owner served last and also advances by each step's time
    divided among the owners waiting: neither a new connection nor one that paused gets ahead
    of those waiting, and a stream of new connections holds back an owner that used more only
    until the clock reaches its use. A connection whose steps take seconds each then delays
    another connection's millisecond steps by at most the one step running, however many it
    queued.
    As ``asyncio.Semaphore``: :meth:`acquire`, :meth:`release`, :meth:`locked`; a waiter
    cancelled after being granted passes its permit on."""

    __slots__ = ("_clock", "_held", "_owners", "_used", "free")

    def __init__(self, permits: int) -> None:
        self.free = permits  # permits not held
        self._owners: OrderedDict[Hashable | None, deque[asyncio.Future[None]]] = OrderedDict()
        self._used: dict[Hashable | None, float] = {}  # seconds each owner held the slot
        self._clock = 0.0  # the use of the owner granted last
        self._held: deque[tuple[Hashable | None, float]] = deque()  # (owner, since)

    def locked(self) -> bool:
        """True when a new step would wait (no permit free, or steps already waiting)."""
        return self.free == 0 or bool(self._owners)

    async def acquire(self) -> None:
        """Wait for a permit, in :data:`CPU_OWNER`'s turn."""
        owner = CPU_OWNER.get()
        if not self.locked():
            self.free -= 1
            self._grant(owner)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owners.setdefault(owner, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted as it was cancelled: the next waiter's turn
            else:
                self._forget(owner, waiter)
            raise

    def release(self) -> None:
        """Give a permit back, charging its holder the time it held it: to the first waiting
        step of the waiting owner that has used the slot least, else to the pool."""
        if len(self._used) > MAX_TRACKED_OWNERS:
            self._prune()
        if self._held:
            owner, since = self._held.popleft()
            held = time.monotonic() - since
            self._used[owner] = self._use_of(owner) + held
            # the clock runs as a fair share of the slot would: divided among those waiting
            self._clock += held / max(1, len(self._owners))
        while self._owners:
            owner = min(self._owners, key=self._use_of)
            waiters = self._owners[owner]
            waiter = waiters.popleft()
            if not waiters:
                del self._owners[owner]
            if not waiter.done():
                waiter.set_result(None)
                self._grant(owner)
                return
        self.free += 1
        self._prune()

    def _use_of(self, owner: Hashable | None) -> float:
        return max(self._used.get(owner, self._clock), self._clock)

    def _grant(self, owner: Hashable | None) -> None:
        self._clock = self._use_of(owner)
        self._held.append((owner, time.monotonic()))

    def _forget(self, owner: Hashable | None, waiter: asyncio.Future[None]) -> None:
        waiters = self._owners.get(owner)
        if waiters is not None:
            with contextlib.suppress(ValueError):
                waiters.remove(waiter)
            if not waiters:
                del self._owners[owner]

    def _prune(self) -> None:
        """Forget the owners not waiting whose use is not ahead of the clock (they would start
        there anyway), then, past :data:`MAX_TRACKED_OWNERS`, the least used."""
        clock, waiting = self._clock, self._owners
        for owner in [o for o, used in self._used.items() if used <= clock and o not in waiting]:
            del self._used[owner]
        if len(self._used) > MAX_TRACKED_OWNERS:
            for owner in sorted(self._used, key=self._used.__getitem__)[
                : len(self._used) - MAX_TRACKED_OWNERS
            ]:
                if owner not in waiting:
                    del self._used[owner]


def _slot(loop: asyncio.AbstractEventLoop) -> _FairSlot:
    slot = _slots.get(loop)
    if slot is None:
        for old in [lp for lp in _slots if lp.is_closed()]:
            del _slots[old]
        slot = _slots[loop] = _FairSlot(MAX_CPU_JOBS)
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


RELEASE_STEP_ITEMS: Final = 1000
"""Most items of one list (with the objects only they hold) freed by one C call when a large
request is released (:func:`release_in_steps`): 1,000 small messages take about a millisecond."""


def _sole(obj: object, others: int) -> bool:
    """True when nothing but the ``others`` references known to the caller holds ``obj``."""
    return sys.getrefcount(obj) - 2 <= others  # minus this parameter and getrefcount's argument


def _own_containers(obj: object) -> list[list[Any] | dict[Any, Any]]:
    """The non-empty list and dict attributes of ``obj`` that ``obj`` alone holds, and those
    of its message attributes that hold a long one (:func:`_may_hold_long_list`): each such
    message is detached from ``obj`` (its attribute set to ``None``) and its own containers
    listed (a request's 1,000,000-entry ``provider_options`` Struct)."""
    fields = getattr(obj, "__dict__", None)
    if not isinstance(fields, dict):
        return []
    out: list[list[Any] | dict[Any, Any]] = []
    for name, v in list(fields.items()):
        kind = type(v)
        if kind is list or kind is dict:
            # references to each container: ``fields``, the list of items, the variable
            if v and _sole(v, 3):
                out.append(v)
        elif hasattr(v, "__dict__") and _may_hold_long_list(v) and _sole(v, 3):
            fields[name] = None
            out.extend(_own_containers(v))
        del v
    return out


_LIST_FIELDS: dict[type, tuple[str, ...]] = {}


def _may_hold_long_list(item: object) -> bool:
    """Whether ``item`` has a list or dict attribute of more than :data:`RELEASE_STEP_ITEMS`
    items, looking only at the attributes that held lists or dicts in the first object of
    its type (a message's repeated and map fields), so an item costs a few attribute reads."""
    kind = type(item)
    names = _LIST_FIELDS.get(kind)
    if names is None:
        fields = getattr(item, "__dict__", None)
        if not isinstance(fields, dict):
            return False
        names = _LIST_FIELDS[kind] = tuple(
            k for k, v in fields.items() if type(v) is list or type(v) is dict
        )
    return any(len(getattr(item, name, ())) > RELEASE_STEP_ITEMS for name in names)


def _empty_dict(items: dict[Any, Any], pending: list[Any]) -> None:
    """Empty ``items`` :data:`RELEASE_STEP_ITEMS` entries at a time (a map field of a million
    entries was one cascade of a million frees); values that hold a long list or dict go to
    ``pending``."""
    while items:
        step = [items.popitem() for _ in range(min(RELEASE_STEP_ITEMS, len(items)))]
        # references to a value: its entry tuple, the generator's variable
        pending.extend(v for _, v in step if _may_hold_long_list(v) and _sole(v, 2))
        del step


def release_in_steps(held: list[Any]) -> None:
    """Free the objects in ``held`` (``held`` ends empty) a bounded step at a time.

    Freeing a request of 100,000 messages was one C call (the last reference dropped, every
    object deallocated in one cascade) that held the interpreter, and so the event loop, for
    about 100 ms (``benchmarks/loop_stall.py --trace-stalls``). Here each list or dict
    attribute of more than :data:`RELEASE_STEP_ITEMS` items (a repeated or map field, a
    Struct's ``fields``) is emptied, :data:`RELEASE_STEP_ITEMS` at a time, between which the
    interpreter can switch threads; items of any such container that themselves hold one are
    taken apart the same way (a request of one message of 100,000 content blocks), and so are
    message attributes holding one (``provider_options``, Configure's ``config``).
    Only objects and containers nothing else refers to are emptied: one still shared (a
    cache, the caller) is just let go of, unchanged.
    """
    pending = list(held)
    held.clear()
    while pending:
        obj = pending.pop()
        # references to ``obj``: the variable; any other means it is shared: not emptied
        containers = _own_containers(obj) if _sole(obj, 1) else []
        for items in containers:
            if type(items) is dict:
                if len(items) > RELEASE_STEP_ITEMS:
                    _empty_dict(items, pending)
                else:
                    nested_values = [v for v in items.values() if _may_hold_long_list(v)]
                    if nested_values:
                        items.clear()
                        pending.extend(nested_values)
                        del nested_values
            elif len(items) > RELEASE_STEP_ITEMS:
                while items:
                    step = items[-RELEASE_STEP_ITEMS:]
                    del items[-RELEASE_STEP_ITEMS:]
                    # references to ``item``: ``step``, the generator's variable
                    pending.extend(i for i in step if _may_hold_long_list(i) and _sole(i, 2))
                    del step
            else:  # a short list (a request's few messages): look inside its items
                nested = [i for i in items if _may_hold_long_list(i)]
                if nested:
                    items.clear()  # the others, at most RELEASE_STEP_ITEMS small ones
                    pending.extend(nested)  # each checked for other owners when popped
                    del nested
        del containers, obj


def release_dict_in_steps(items: dict[Any, Any]) -> None:
    """Empty the JSON object ``items`` (a decoded config of a million keys) a bounded step at
    a time, :data:`RELEASE_STEP_ITEMS` entries per step, and any long dict or list inside it
    the same way, so no single free cascades over a million objects (see
    :func:`release_in_steps`). The caller owns ``items``: it is emptied even if shared."""
    pending: list[Any] = [items]
    while pending:
        container = pending.pop()
        while container:
            if type(container) is dict:
                count = min(RELEASE_STEP_ITEMS, len(container))
                step = [container.popitem()[1] for _ in range(count)]
            else:
                step = container[-RELEASE_STEP_ITEMS:]
                del container[-RELEASE_STEP_ITEMS:]
            # references to a value: ``step``, the generator's variable
            pending.extend(
                v
                for v in step
                if type(v) in (dict, list) and len(v) > RELEASE_STEP_ITEMS and _sole(v, 2)
            )
            del step
        del container


def run_released(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> Future[T]:
    """Start ``func(*args, **kwargs)`` on one of the already started worker threads, without
    taking a CPU-job slot: for a C call that releases the interpreter (glibc's
    ``malloc_trim``). asyncio's default executor would start a thread for it, and the event
    loop waits in ``Thread.start`` until that thread gets the interpreter, which a worker in
    a long C call held for tens of milliseconds (``benchmarks/loop_stall.py --trace-python``).
    """
    return _pool().submit(lambda: func(*args, **kwargs))


def _schedule_reclaim(loop: asyncio.AbstractEventLoop, *, restart: bool = False) -> None:
    """Run :func:`_reclaim` on ``loop`` :data:`RECLAIM_DELAY_S` from now: one already
    scheduled stands, or with ``restart`` is put off to then. Call on ``loop``'s thread."""
    if loop.is_closed():
        return
    scheduled = _reclaims.get(loop)
    if scheduled is not None:
        if not restart:
            return
        scheduled.cancel()
    for old in [lp for lp in _reclaims if lp.is_closed()]:
        del _reclaims[old]
    _reclaims[loop] = loop.call_later(RECLAIM_DELAY_S, _reclaim, loop)


def _reclaim(loop: asyncio.AbstractEventLoop) -> None:
    """The idle reclaim (:data:`RECLAIM_DELAY_S`): unfreeze, collect and trim when no CPU job
    runs on ``loop`` and at most :data:`RECLAIM_MAX_FROZEN` objects are frozen; otherwise
    scheduled again. The collection runs even with nothing frozen: cycles holding large
    requests survived the young generations while their jobs ran, and an idle server allocates
    too little to reach the next full collection."""
    _reclaims.pop(loop, None)
    with _gc_lock:
        if _gc_quiet[0] or _slot(loop).locked() or gc.get_freeze_count() > RECLAIM_MAX_FROZEN:
            retry = True
        else:
            retry = False
            gc.unfreeze()
            gc.collect()
    if retry:
        _schedule_reclaim(loop)
    else:
        run_released(trim_heap)  # releases the interpreter while it runs


async def release_large(size: int, held: list[Any]) -> None:
    """Free the objects in ``held`` (a request of ``size`` bytes) in a worker thread when
    ``size`` is at least :data:`OFFLOAD_MIN_BYTES`, a step at a time
    (:func:`release_in_steps`); a smaller one is simply dropped, on the loop. After a
    :data:`GC_QUIET_MIN_BYTES` one, objects frozen by earlier large jobs go back to the
    collector when none is running."""
    if size < OFFLOAD_MIN_BYTES:
        held.clear()
        return
    await run_cpu(size, release_in_steps, held)
    if size >= GC_QUIET_MIN_BYTES:
        with _gc_lock:
            if _gc_quiet[0] == 0:
                gc.unfreeze()


async def run_cpu(size: int, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``func(*args, **kwargs)``, in a worker thread when ``size`` (bytes of input) is at
    least :data:`OFFLOAD_MIN_BYTES`, inline otherwise.

    Cancelling the awaiting task stops waiting at once; a step not yet started never runs; a
    step already running in a thread stops at its next :func:`checkpoint` (or finishes, when it
    has none left), holding its slot until then, and its result is dropped.

    Raises:
        Whatever ``func`` raises.
    """
    return await _run(None, size, func, *args, **kwargs)


async def run_cpu_started_by(
    until: float, size: int, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """:func:`run_cpu`, but a step that has not got a worker slot by the monotonic time
    ``until`` never runs: :class:`JobNotStarted` is raised instead (for a call whose wait is
    bounded, docs/decisions.md#d32).

    Raises:
        JobNotStarted: no slot free by ``until``.
        Whatever ``func`` raises.
    """
    return await _run(until, size, func, *args, **kwargs)


async def _run(
    until: float | None, size: int, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    if size < OFFLOAD_MIN_BYTES:
        return func(*args, **kwargs)
    loop = asyncio.get_running_loop()
    slot = _slot(loop)
    if until is None or not slot.locked():
        await slot.acquire()
    else:
        try:
            # not asyncio.wait_for: on Python 3.11 it returns normally when cancelled just as
            # the slot is granted, so a cancelled call would run its step
            # (https://github.com/python/cpython/issues/86296)
            async with asyncio.timeout(max(0.0, until - time.monotonic())):
                await slot.acquire()
        except TimeoutError:
            raise JobNotStarted from None
    stop = threading.Event()
    quiet = size >= GC_QUIET_MIN_BYTES
    try:
        if quiet:
            job = _pool().submit(
                lambda: _stoppable(stop, lambda: _quiet(lambda: func(*args, **kwargs)))
            )
        else:
            job = _pool().submit(lambda: _stoppable(stop, lambda: func(*args, **kwargs)))
    except BaseException:
        slot.release()
        raise

    def ended() -> None:
        slot.release()
        if quiet:  # the reclaim comes RECLAIM_DELAY_S after the last large job
            _schedule_reclaim(loop, restart=True)

    def release(_: object) -> None:  # when the step really ends, even after a cancel
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
            loop.call_soon_threadsafe(ended)

    job.add_done_callback(release)
    try:
        return await asyncio.wrap_future(job)
    except asyncio.CancelledError:
        stop.set()  # a running step stops at its next checkpoint
        job.cancel()  # one not yet started never runs
        raise
