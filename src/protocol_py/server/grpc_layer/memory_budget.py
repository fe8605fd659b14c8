"""One budget of bytes for the whole server: requests being received and decoded, decoded
requests alive, and large replies held (docs/decisions.md#d32).

No single request over a limit is needed to exhaust memory: K concurrent requests, each just
under the per-request bounds, add up. :class:`MemoryBudget` counts, for every call, an estimate
of the bytes it holds, and a call that would take the total past the budget waits (at most
:data:`ADMISSION_WAIT` seconds, or until its deadline) and is then refused with
RESOURCE_EXHAUSTED, in-band (an OVERLOADED ``error`` event) for StreamCompletion. Calls already
admitted keep their bytes and finish. The wait runs from the moment the call first finds no
room; a call whose room does not cover all the elements its request may hold waits for the CPU
worker (``protocol_py.server.offload.run_cpu_started_by``) within the same wait, so a long queue
of heavy calls cannot stretch it (docs/decisions.md#d38).

What a call is charged, and when (:class:`CallMemory`):

1. **At the request's length prefix**, before its body is read: ``BODY_COPIES`` x its length
   (the body assembled as it arrives, plus one piece of HTTP/2 frames; see
   :mod:`~protocol_py.server.grpc_layer.large_body`).
2. **Before decoding**: room for the decoded objects, at most ``OBJECT_BYTES`` for each
   repeated element and map entry the fast decoder may create. The decoder is given exactly
   that many elements as its budget (``protocol_py.codec.wire_gen.State``), so what the
   decode allocates never exceeds what was reserved: a request of a million tiny messages
   needs its room before it is decoded, a text of the same size needs almost none.
3. **After decoding**: the request's in-flight estimate, ``IN_FLIGHT_COPIES`` x (its wire
   size + ``OBJECT_BYTES`` x the elements it really holds), kept until the call ends (the
   decoded request, its validation, and the provider's translation of it).
4. **Large unary replies** (:class:`~protocol_py.server.grpc_layer.reply_budget.ReplyBudget`)
   are charged to the same budget while they are held, never waiting (waiting would hold
   their bytes too).

Measured (``benchmarks/memory_budget.py``, one request decoded, validated and run through
the reference provider in one process, RSS): a body of a million empty messages (1.9 MiB on
the wire) held 198 MiB decoded (about 200 bytes per element) and peaked at 436 MiB while the
provider ran; half a million one-text-block messages (5.3 MiB, a million elements) held
296 MiB (about 300 bytes per element, ``Message``, ``ContentBlock`` and ``TextBlock`` objects)
and peaked at 449 MiB; one 18.6 MiB text block held 20 MiB. Hence ``OBJECT_BYTES`` 300 and
``IN_FLIGHT_COPIES`` 2: the cost of a request is its object count far more than its size.

A call whose charge alone exceeds the whole budget is refused at once (it could never fit;
StreamCompletion too ends with the RESOURCE_EXHAUSTED status, not a retryable event);
set the budget above twice the maximum message size to keep every legal text request
admissible. Requests under :data:`SMALL_REQUEST_BYTES` are counted but never wait or are refused (a
Describe or a health check is answered even when the budget is spent); the budget's overrun is
then bounded by their number times that size.

Release: every charge is returned when the call's handler ends, however it ends (success,
error, cancel, reset, deadline, lost connection: each cancels the handler task, whose
``finally`` releases it). A decode already running in a worker thread when its call is
cancelled finishes there (at most ``protocol_py.server.offload.MAX_CPU_JOBS`` of them): its
objects outlive the charge by that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import betterproto2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from protocol_py.codec import wire
from protocol_py.codec.wire_gen import State
from protocol_py.server.grpc_layer.limits import decode_request, parse_size
from protocol_py.server.offload import JobNotStarted, run_cpu, run_cpu_started_by

__all__ = [
    "ADMISSION_WAIT",
    "BODY_COPIES",
    "DEFAULT_BUDGET_FRACTION",
    "IN_FLIGHT_COPIES",
    "MAX_DEFAULT_BUDGET",
    "MIN_DEFAULT_BUDGET",
    "OBJECT_BYTES",
    "SMALL_REQUEST_BYTES",
    "CallMemory",
    "MemoryBudget",
    "MemoryBudgetError",
    "default_memory_budget",
    "in_flight_estimate",
    "machine_memory",
    "parse_memory_budget",
]

_Req = TypeVar("_Req", bound=betterproto2.Message)
_R = TypeVar("_R")

DEFAULT_BUDGET_FRACTION: Final = 0.25
"""Share of the machine's memory (the smaller of ``MemTotal`` and the cgroup's memory limit)
the default budget takes."""

MIN_DEFAULT_BUDGET: Final = 256 * 1024 * 1024
"""Smallest default budget, in bytes (256 MiB), whatever the machine."""

MAX_DEFAULT_BUDGET: Final = 8 * 1024 * 1024 * 1024
"""Largest default budget, in bytes (8 GiB), whatever the machine."""

FALLBACK_BUDGET: Final = 2 * 1024 * 1024 * 1024
"""Default budget, in bytes (2 GiB), where the machine's memory cannot be read."""

ADMISSION_WAIT: Final = 2.0
"""Longest time, in seconds, a call waits for room in the budget (less when its deadline comes
first) before it is refused with RESOURCE_EXHAUSTED."""

BODY_COPIES: Final = 2
"""Bytes charged per byte of a request body while it is received: the assembled body and the
HTTP/2 frames of the piece being copied into it."""

OBJECT_BYTES: Final = 300
"""Bytes charged per repeated element or map entry of a decoded request (measured: about 200
for an empty message, about 300 for a message with one text block; see the module)."""

IN_FLIGHT_COPIES: Final = 2
"""Multiplier of a decoded request's size while its call runs: validation and the provider's
translation hold about one more copy (measured peaks 1.4-2.2 x the decoded size)."""

SMALL_REQUEST_BYTES: Final = 64 * 1024
"""Requests of fewer bytes (64 KiB) on the wire are charged but never wait or are refused."""

_CGROUP_LIMITS: Final = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


class MemoryBudgetError(GRPCError):
    """RESOURCE_EXHAUSTED: the server's memory budget has no room for this call (its message
    names the budget, the bytes held and by how many calls). StreamCompletion sends it
    in-band as an OVERLOADED, retryable ``error`` event, except when ``never_fits``: the
    call needs more than the whole budget, so no retry can succeed on this server, and it
    ends with the RESOURCE_EXHAUSTED status, as a request over the message size does."""

    def __init__(self, message: str, *, never_fits: bool = False) -> None:
        super().__init__(Status.RESOURCE_EXHAUSTED, message)
        self.never_fits = never_fits


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the smaller of ``MemTotal`` (``/proc/meminfo``)
    and the cgroup's limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None when
    neither can be read (not Linux)."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                found.append(int(line.split()[1]) * 1024)
                break
    for path in _CGROUP_LIMITS:
        with contextlib.suppress(OSError, ValueError):
            text = path.read_text().strip()
            if text != "max" and int(text) < 2**60:  # v1 writes a huge number for "none"
                found.append(int(text))
    return min(found) if found else None


def default_memory_budget(memory: int | None = None) -> int:
    """:data:`DEFAULT_BUDGET_FRACTION` of ``memory`` (default :func:`machine_memory`), kept
    within :data:`MIN_DEFAULT_BUDGET`..:data:`MAX_DEFAULT_BUDGET`, in bytes;
    :data:`FALLBACK_BUDGET` when the memory is unknown."""
    memory = machine_memory() if memory is None else memory
    if memory is None:
        return FALLBACK_BUDGET
    return max(MIN_DEFAULT_BUDGET, min(MAX_DEFAULT_BUDGET, int(memory * DEFAULT_BUDGET_FRACTION)))


def parse_memory_budget(text: str) -> int:
    """``--memory-budget``: bytes (``1073741824``) or with a unit (``512MiB``, ``2GiB``,
    ``1GB``); ``off`` or ``0`` is 0, the budget off (calls are counted, never refused).

    Raises:
        ValueError: anything else (the message names the accepted forms).
    """
    if text.strip().lower() in ("off", "0"):
        return 0
    try:
        return parse_size(text, maximum=2**63 - 1)
    except ValueError:
        raise ValueError(
            f"invalid memory budget {text[:40]!r}: expected bytes such as 536870912, 512MiB or "
            "2GiB, or off"
        ) from None


def in_flight_estimate(wire_bytes: int, elements: int) -> int:
    """Bytes charged for a decoded request of ``wire_bytes`` on the wire holding ``elements``
    repeated elements and map entries: :data:`IN_FLIGHT_COPIES` x (``wire_bytes`` +
    :data:`OBJECT_BYTES` x ``elements``)."""
    return IN_FLIGHT_COPIES * (wire_bytes + OBJECT_BYTES * elements)


class MemoryBudget:
    """The server's budget; see the module docstring.

    Args:
        limit: Bytes; None counts without refusing anything (``--memory-budget off``).
        wait: Seconds a call waits for room (:data:`ADMISSION_WAIT`).

    Attributes:
        held: Bytes charged now, by all calls.
        calls: Calls holding a charge now.
        peak: Most bytes held at once since start.
        refused: Calls refused so far.
    """

    def __init__(self, limit: int | None, *, wait: float = ADMISSION_WAIT) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"memory_budget: must be a positive number of bytes, got {limit}")
        self.limit = limit
        self.wait = wait
        self.held = 0
        self.calls = 0
        self.peak = 0
        self.refused = 0
        self._room: asyncio.Event | None = None

    def fits(self, size: int) -> bool:
        """True when ``size`` more bytes fit (always when the budget is off)."""
        return self.limit is None or self.held + size <= self.limit

    def refusal(self, what: str) -> MemoryBudgetError:
        """The error of a call that found no room (counted in :attr:`refused`)."""
        self.refused += 1
        return MemoryBudgetError(
            f"{what}: server memory budget of {self.limit} bytes in use ({self.held} held by "
            f"{self.calls} calls; bound --memory-budget); retry later"
        )

    def never_fits(self, what: str, size: int) -> MemoryBudgetError | None:
        """The error of a charge of ``size`` bytes larger than the whole budget (counted in
        :attr:`refused`; ``never_fits`` set: no retry can succeed), or None when it could fit
        once others release theirs (always when the budget is off)."""
        if self.limit is None or size <= self.limit:
            return None
        self.refused += 1
        return MemoryBudgetError(
            f"{what} needs about {size} bytes, more than the whole server memory budget "
            f"of {self.limit} bytes (bound --memory-budget)",
            never_fits=True,
        )

    def take(self, size: int) -> None:
        """Charge ``size`` bytes without checking (see :meth:`fits`)."""
        self.held += size
        self.peak = max(self.peak, self.held)

    def give(self, size: int) -> None:
        """Return ``size`` bytes and wake the calls waiting for room."""
        self.held -= size
        if self._room is not None:
            self._room.set()
            self._room = None

    async def wait_for(self, size: int, until: float) -> bool:
        """Wait until ``size`` bytes fit (:meth:`fits`) or the monotonic time ``until``; True
        when they fit (they are not charged: call :meth:`take` at once)."""
        while not self.fits(size):
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            if self._room is None:
                self._room = asyncio.Event()
            # asyncio.timeout, not asyncio.wait_for: on Python 3.11, wait_for returns normally
            # when it is cancelled just as the wait ends, and the cancel is lost
            # (https://github.com/python/cpython/issues/86296)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._room.wait()
        return True

    def available(self) -> int:
        """Bytes still free (a large number when the budget is off)."""
        return 2**62 if self.limit is None else max(0, self.limit - self.held)

    @contextlib.contextmanager
    def call(self, deadline: Any | None = None) -> Iterator[CallMemory]:
        """A :class:`CallMemory` for one call, released when the block exits however it
        exits; ``deadline`` is grpclib's ``Deadline`` of the call (or None)."""
        memory = CallMemory(self, deadline)
        try:
            yield memory
        finally:
            memory.release()


class CallMemory:
    """The charge of one call against a :class:`MemoryBudget` (see the module docstring)."""

    def __init__(self, budget: MemoryBudget, deadline: Any | None = None) -> None:
        self.budget = budget
        self.held = 0
        self._deadline = deadline
        self._until: float | None = None
        self.small = False

    def _wait_until(self) -> float:
        if self._until is None:
            until = time.monotonic() + self.budget.wait
            if self._deadline is not None:
                until = min(until, time.monotonic() + self._deadline.time_remaining())
            self._until = until
        return self._until

    def resize(self, size: int) -> None:
        """Charge exactly ``size`` bytes for this call from now on (no check)."""
        if size == self.held:
            return
        if not self.held and size:
            self.budget.calls += 1
        elif self.held and not size:
            self.budget.calls -= 1
        if size > self.held:
            self.budget.take(size - self.held)
        else:
            self.budget.give(self.held - size)
        self.held = size

    async def grow_to(self, size: int, what: str) -> None:
        """Charge ``size`` bytes in all, waiting (bounded) for room when they do not fit now.

        Raises:
            MemoryBudgetError: no room within :data:`ADMISSION_WAIT` (or the deadline); at
                once when ``size`` exceeds the whole budget.
        """
        extra = size - self.held
        if extra <= 0 or self.small:
            self.resize(max(size, self.held))
            return
        too_large = self.budget.never_fits(what, size)
        if too_large is not None:
            raise too_large
        fits = self.budget.fits(extra)
        if not fits and not await self.budget.wait_for(extra, self._wait_until()):
            raise self.budget.refusal(f"{what} (needs {extra} bytes more)")
        self.resize(size)

    async def reserve_body(self, length: int) -> None:
        """The length prefix announced ``length`` bytes: charge :data:`BODY_COPIES` x
        ``length`` (a request under :data:`SMALL_REQUEST_BYTES` is charged, never refused).

        Raises:
            MemoryBudgetError: no room for the body.
        """
        if length < SMALL_REQUEST_BYTES:
            self.small = True
            self.resize(BODY_COPIES * length)
            return
        await self.grow_to(BODY_COPIES * length, f"request message of {length} bytes")

    async def decode(
        self,
        data: bytes,
        kind: type[_Req],
        strict: Any | None,
        elements: int | None = None,
        *,
        precheck: Callable[[Any], None] | None = None,
    ) -> _Req:
        """``decode_request(data, kind, strict, precheck)`` charged as :meth:`decode_with`
        says.

        Raises:
            MemoryBudgetError: as :meth:`decode_with`.
            GRPCError: as :func:`~protocol_py.server.grpc_layer.limits.decode_request`.
        """

        def work(state: State | None) -> _Req:
            return decode_request(data, kind, strict, precheck, state)

        return await self.decode_with(data, work, elements)

    async def decode_with(
        self, data: bytes, work: Callable[[State | None], _R], elements: int | None = None
    ) -> _R:
        """``work(state)`` (in a worker thread for a large body): a decode of ``data`` by
        :func:`~protocol_py.server.grpc_layer.limits.decode_request` with ``state``, and what
        else the caller does in the same worker step, with the decoder's element budget set to
        what the memory budget has room for; then the call charged
        :func:`in_flight_estimate` of what it decoded.

        Raises:
            MemoryBudgetError: the request holds more elements than the budget has room for,
                even after waiting (bounded) for room for all it may hold.
            GRPCError: as :func:`~protocol_py.server.grpc_layer.limits.decode_request`.
        """
        size = len(data)
        most = min(wire.MAX_DECODED_OBJECTS, size // 2 + 1) if elements is None else elements
        body = BODY_COPIES * size
        if self.small or self.budget.limit is None:
            allowed = most
        else:
            room = self.budget.available() + max(0, self.held - body)
            allowed = min(most, room // (IN_FLIGHT_COPIES * OBJECT_BYTES))
        what = f"request message of {size} bytes"
        for attempt in (1, 2):
            reserve = max(body, in_flight_estimate(size, allowed))
            await self.grow_to(reserve, what)
            state = State(allowed) if allowed < wire.MAX_DECODED_OBJECTS else State()
            over = False
            try:
                if allowed < most:  # no room for all it may hold: the call waits from now
                    message = await run_cpu_started_by(self._wait_until(), size, work, state)
                else:
                    message = await run_cpu(size, work, state)
            except JobNotStarted:
                over = True  # no worker before the call's wait ran out: room for all now,
                # or refused below (the wait is over, so grow_to refuses at once)
            except wire.DecodeBudgetError:
                over = True  # raised below, outside this block: no chained traceback (with
                # the frames holding the body and the partial decode) outlives the call
            if not over:
                self.resize(in_flight_estimate(size, state.limit - state.left))
                return message
            self.resize(body)
            limit = self.budget.limit
            if (
                attempt == 2
                or allowed >= most
                or (limit is not None and in_flight_estimate(size, most) > limit)
            ):
                raise self.budget.refusal(
                    f"{what} holds more than the {allowed} elements there is room for"
                )
            allowed = most  # wait (bounded) for room for all it may hold, then again
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self) -> None:
        """Return everything this call holds."""
        self.resize(0)
