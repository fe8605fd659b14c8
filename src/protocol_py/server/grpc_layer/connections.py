"""Per-connection hardening of the reference server: cancellation, flow control, stalled peers.

What grpclib 0.4.9 leaves to the application, done here once for every RPC (spec: "The wire
protocol"):

* **Cancellation checkpoints** (:func:`send_events`): a server-streaming handler whose events
  come without any await (an unpaced provider) never gave the event loop a turn, so a client's
  RST_STREAM, a lost connection or the deadline timer could not be processed until the stream
  ended. :func:`send_events` yields to the loop (one full I/O poll) at least every
  :data:`SEND_CHECKPOINT_INTERVAL` seconds, so a cancel or deadline stops the provider at its
  next yield. A provider that blocks in CPU work between yields can only be interrupted at its
  next ``yield`` or ``await``: its generator is then closed before it is advanced again.
* **Bounded parsing** (:class:`TransportProtocol`): a connection's read is handed to h2 in
  slices of :data:`FEED_SLICE_BYTES` (one ending inside a large DATA payload runs to its end,
  :data:`WHOLE_DATA_MIN_BYTES`) while the loop turn's shared budget lasts; the rest
  waits, the connection's reading paused, and waiting connections get one slice each per
  turn in turn (the bytes stay in order, so HPACK and flow control are as before).
* **Flow control**: replies are written only as far as the peer's HTTP/2 window allows
  (grpclib's ``send_data``), and the next event is pulled from the provider only after the
  previous one was handed to the connection, so a peer that reads nothing pauses the provider
  instead of the server buffering its output (at most one window of bytes plus one event).
* **Released memory** (:class:`TransportHandler`): grpclib stores the exception that ended a
  cancelled call on the stream's wrapper; its traceback holds the frames that were sending the
  reply (the encoded message included) in a reference cycle, which only the cyclic garbage
  collector frees, and it rarely runs because bytes do not count towards its thresholds. When a
  call ends the cycle is broken and the finished task dropped at once.
* **Streams reset before their task ran** (:class:`TransportHandler`;
  https://github.com/vmagamedov/grpclib/issues/217): a stream whose HEADERS, DATA and
  RST_STREAM arrive in one read is cancelled before its handler task first runs, so the task's
  ``finally`` never acknowledges the buffered DATA and the connection's receive window shrinks
  for good. Every accepted stream is released when its task ends, however it ends.
* **Stalled peers**: a unary-request call whose handler is still waiting for request bytes
  (no END_STREAM yet) when the receive timeout (default :data:`DEFAULT_RECEIVE_TIMEOUT`) has
  passed since its HEADERS is ended with DEADLINE_EXCEEDED and its buffered bytes released
  (client-streaming calls, such as reflection, are not timed); a connection with no open
  stream for the idle timeout (default :data:`DEFAULT_IDLE_TIMEOUT`) is closed with GOAWAY
  (NO_ERROR).
* **Control frame floods** (:class:`TransportProtocol`): PING, SETTINGS (weighing
  :data:`SETTINGS_FRAME_WEIGHT`), PRIORITY, RST_STREAM, empty DATA frames, small DATA frames
  beyond those a stream earns (:data:`SMALL_DATA_FRAME_BYTES`) and WINDOW_UPDATE
  frames not earned by DATA the server sent (:data:`WINDOW_UPDATES_PER_DATA_FRAME`) or by a
  stream the peer opened (:data:`WINDOW_UPDATES_PER_STREAM`), counted
  from their 9-byte headers before h2 parses a read (so a flood costs the loop at most one
  read, and counting stops at :data:`CONTROL_FRAME_BURST`), are charged to a per-connection
  allowance of :data:`CONTROL_FRAME_BURST` frames refilled at :data:`CONTROL_FRAME_RATE` per
  second; a connection that spends it gets GOAWAY ENHANCE_YOUR_CALM and is closed (aborted
  after :data:`FLOOD_CLOSE_WAIT` if it never reads), with one WARNING per
  :data:`~protocol_py.server.grpc_layer.log_limit.WARNING_INTERVAL` for the whole server.
* **Connection limit** (:class:`TransportProtocol`): each new connection is counted by the
  server's :class:`~protocol_py.server.grpc_layer.connection_limit.ConnectionLimit`; over it
  the connection idle longest is closed, or this one at once.
* **Progress timeouts** (:mod:`protocol_py.server.grpc_layer.progress`): a stream whose peer
  keeps its window closed for the write timeout is reset; a connection over its budget of
  queued bytes is closed.
* **No log flood**: once a connection's transport is closing, nothing more is written to it
  (asyncio logs ``socket.send() raised exception.`` for every write after a lost connection).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
import traceback
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, cast

import grpclib.server
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from h2.errors import ErrorCodes
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes

from protocol_py._compat import grpclib_cancel_once, grpclib_private
from protocol_py.bounded_text import bounded_message
from protocol_py.server.grpc_layer.batching import EventWriter
from protocol_py.server.grpc_layer.cardinality import REQUEST_READ_ATTR
from protocol_py.server.grpc_layer.connection_limit import ConnectionLimit
from protocol_py.server.grpc_layer.log_limit import RateLimitedWarning
from protocol_py.server.grpc_layer.progress import (
    DEFAULT_WRITE_TIMEOUT,
    ProgressWatch,
    cancel_reason,
    over_queue_budget,
)
from protocol_py.server.malloc_arenas import find_malloc_trim
from protocol_py.server.offload import run_released

log = logging.getLogger("protocol_py.server")

SEND_CHECKPOINT_INTERVAL: Final = 0.01
"""Longest time, in seconds, a server-streaming handler sends events without giving the event
loop a turn (so a cancel, a lost connection or the deadline reaches it); also the sending time
all streams share in one loop turn (:func:`_yield_if_turn_over`)."""

FEED_SLICE_BYTES: Final = 8 * 1024
"""Most bytes of a connection's read handed to the HTTP/2 parser at once, bytes (8 KiB: about
1 ms of h2's parsing of small requests' HEADERS and DATA and of grpclib's set-up of the
streams they start, on this project's test machine). A read of up to 256 KiB (asyncio's read
size) is fed slice by slice while the loop turn's shared budget
(:data:`SEND_CHECKPOINT_INTERVAL`) lasts, and at least one slice per new budget; the rest
waits, the connection's reading paused, for later turns, which feed the waiting connections
one slice each in turn (:class:`_FeedQueue`)."""

WHOLE_DATA_MIN_BYTES: Final = 64 * 1024
"""A slice (:data:`FEED_SLICE_BYTES`) that ends inside the payload of a DATA frame of at least
this many bytes (64 KiB) is extended to the end of that payload within the read: h2's cost for
a large payload is a few copies of it, not the per-frame work the slice bounds, and a 1.1 MB
request in 256 KiB frames was fed in 138 slices, parsed in 1.9 ms against 1.4 ms in whole
payloads (h2 alone, in one process). A slice is then at most :data:`FEED_SLICE_BYTES` plus one
frame (:data:`INBOUND_MAX_FRAME_BYTES`)."""

CANCELLED_CALLS_GRACE: Final = 1.0
"""Seconds a call cancelled by a reset of its stream, and still finishing when its connection
goes, gets before it is cancelled again (its provider's cleanup in ``finally``, its trailers):
as long as the server's own redelivery interval
(:data:`protocol_py.server.lifecycle.CANCEL_REDELIVERY_S`, docs/decisions.md#d46)."""

DEFAULT_RECEIVE_TIMEOUT: Final = 60.0
"""Default receive timeout, in seconds: the time allowed between the start of a unary-request
call (its HEADERS) and its complete request (END_STREAM). A slower call gets
DEADLINE_EXCEEDED and its buffered bytes are released."""

MEMORY_TRIM_INTERVAL: Final = 1.0
"""Least time between two requests to the C allocator to return freed memory to the operating
system (``malloc_trim``, glibc only), in seconds."""

LARGE_CALL_BYTES: Final = 1024 * 1024
"""A call that sent or received at least this many bytes (or was aborted: cancelled, reset,
timed out, its connection lost) is followed by a memory trim, in bytes; so is any call that
leaves its connection without an open call (docs/decisions.md#d45)."""

DEADLINE_RESET_MARGIN: Final = 0.1
"""Seconds before a call's deadline (its ``grpc-timeout``) within which a client's reset counts
as the deadline expiring, plus :data:`DEADLINE_ROUNDING_FRACTION` of the call's whole timeout:
the client resets the stream at its own deadline, which, measured from its send time (before
its connection was made, for a new channel's first calls), comes before the server's (the RPC
record says ``deadline_exceeded``, as grpcio reports, not ``cancelled``)."""

DEADLINE_ROUNDING_FRACTION: Final = 0.01
"""Part of a call's timeout by which a client's ``grpc-timeout`` may exceed its own deadline:
grpcio rounds the header up to three significant digits (25 s is sent as ``25100m``, 2 s as
``2010m``), so its reset comes up to 1% of the timeout before the server's deadline."""


def reset_at_deadline(deadline: Any, started: float | None) -> bool:
    """Whether a client's reset, now, is its own deadline timer: at most
    :data:`DEADLINE_RESET_MARGIN` s plus :data:`DEADLINE_ROUNDING_FRACTION` of the call's
    timeout (from ``started``, the call's start on the monotonic clock; None: the margin alone)
    before ``deadline`` (grpclib's; None: no ``grpc-timeout``)."""
    if deadline is None:
        return False
    remaining: float = deadline.time_remaining()
    elapsed = time.monotonic() - started if started is not None else 0.0
    return remaining <= DEADLINE_RESET_MARGIN + DEADLINE_ROUNDING_FRACTION * (elapsed + remaining)


DEFAULT_HANDSHAKE_TIMEOUT: Final = 10.0
"""Default connection handshake timeout, in seconds: a new connection must complete its TLS
handshake (on TLS) within this long, and then send the HTTP/2 connection preface and the
header of its first SETTINGS frame (:data:`HTTP2_PREFACE_BYTES`) within this long again, or it
is closed (a client that connects and sends nothing was held until the idle timeout)."""

HTTP2_PREFACE_BYTES: Final = 24 + 9
"""Bytes a client sends first: the HTTP/2 connection preface (24 bytes, RFC 9113 section 3.4)
and the 9-byte header of its SETTINGS frame."""

CONTROL_FRAME_RATE: Final = 200.0
"""Control frames per second a connection may send for as long as it likes (the refill rate of
its allowance of :data:`CONTROL_FRAME_BURST`), in frames per second. Counted: PING, PRIORITY,
RST_STREAM (one each), SETTINGS (:data:`SETTINGS_FRAME_WEIGHT` each), DATA frames with no
payload and no END_STREAM (:data:`EMPTY_DATA_FRAME_WEIGHT` each), DATA frames of a payload under
:data:`SMALL_DATA_FRAME_BYTES` and no END_STREAM beyond those a stream earns
(:data:`SMALL_DATA_FRAMES_PER_STREAM`; :data:`SMALL_DATA_FRAME_WEIGHT` each), and WINDOW_UPDATE
frames beyond those earned by DATA the server sent (:data:`WINDOW_UPDATES_PER_DATA_FRAME`) and by
streams the peer opened (:data:`WINDOW_UPDATES_PER_STREAM`; :data:`WINDOW_UPDATE_FRAME_WEIGHT`
each). A connection over its allowance gets GOAWAY
ENHANCE_YOUR_CALM and is closed."""

CONTROL_FRAME_BURST: Final = 2000
"""Control frames (see :data:`CONTROL_FRAME_RATE`) a connection may send at once, in frames."""

SETTINGS_FRAME_WEIGHT: Final = 10
"""Control frames one SETTINGS frame (not an ACK) is charged as: h2 applies each one (its
window change reaches every open stream) and answers it with an ACK, several times the work
of a PING; a client sends a handful per connection. So a connection may send
:data:`CONTROL_FRAME_BURST` / 10 = 200 at once and 20 per second."""

EMPTY_DATA_FRAME_WEIGHT: Final = 10
"""Control frames one DATA frame with no payload and no END_STREAM is charged as: it carries
nothing, no gRPC client sends one, and h2 and grpclib handle each as a data event."""

SMALL_DATA_FRAME_BYTES: Final = 1024
"""DATA frames with a payload under this many bytes (1 KiB) and no END_STREAM are counted
(:data:`SMALL_DATA_FRAME_WEIGHT` each beyond :data:`SMALL_DATA_FRAMES_PER_STREAM`): h2 and
grpclib spend the same work on a frame whatever its payload (about 15 us), so a body sent a
byte per frame cost the loop a second per 70 KB; a gRPC client writes a message in frames as
large as the window and the frame size allow (docs/decisions.md#d44)."""

SMALL_DATA_FRAME_WEIGHT: Final = 1
"""Control frames one small DATA frame (:data:`SMALL_DATA_FRAME_BYTES`) beyond those a stream
earns is charged as: a connection may send :data:`CONTROL_FRAME_BURST` at once and
:data:`CONTROL_FRAME_RATE` a second."""

SMALL_DATA_FRAMES_PER_STREAM: Final = 2
"""Small DATA frames (:data:`SMALL_DATA_FRAME_BYTES`) each HEADERS frame the peer sends earns it
free of charge: a small message written without END_STREAM, and the window's last bytes of a
larger one."""

WINDOW_UPDATE_FRAME_WEIGHT: Final = 10
"""Control frames one WINDOW_UPDATE frame not earned (by DATA the server sent,
:data:`WINDOW_UPDATES_PER_DATA_FRAME`, or by a stream the peer opened,
:data:`WINDOW_UPDATES_PER_STREAM`) is charged as: a client gives window back after data arrived
or when it opens a stream, so unearned ones are a handful per connection."""

WINDOW_UPDATES_PER_STREAM: Final = 1
"""WINDOW_UPDATE frames each HEADERS frame the peer sends earns it free of charge: grpcio
raises every new stream's window with one WINDOW_UPDATE before any DATA has come back, so a
call answered trailers-only (a unary error) earns nothing by DATA; charged, 20 such calls a
second on one connection exhausted its allowance."""

WINDOW_UPDATES_PER_DATA_FRAME: Final = 2
"""WINDOW_UPDATE frames each DATA frame the server sends earns its peer free of charge (one
for the stream's window, one for the connection's); any others are charged as control frames,
:data:`WINDOW_UPDATE_FRAME_WEIGHT` each."""

MAX_WINDOW_UPDATE_CREDIT: Final = 1_000_000
"""Most uncharged WINDOW_UPDATE frames a connection may have earned and not yet used."""

FLOOD_CLOSE_WAIT: Final = 1.0
"""Seconds a connection the server closes (for a control frame flood, or idle, evicted or at
shutdown: :func:`close_connection`) gets to take its GOAWAY before it is aborted (its unsent
bytes dropped): a peer that reads nothing would otherwise keep the socket and its descriptor
open for as long as it likes."""

DEFAULT_IDLE_TIMEOUT: Final = 300.0
"""Default idle-connection timeout, in seconds: a connection with no open stream for this long
is closed with GOAWAY (NO_ERROR)."""


def receive_timeout_message(timeout: float) -> str:
    """The status message of a call whose request did not arrive in time."""
    return f"request not received within the receive timeout of {timeout:g} s"


async def checkpoint() -> None:
    """Give the event loop one full turn: I/O that arrived meanwhile (a RST_STREAM, a lost
    connection) and due timers (the deadline) are processed before this returns, so a pending
    cancellation is raised here (``asyncio.CancelledError``)."""
    await asyncio.sleep(0)  # our step first, then the callbacks of this poll ...
    await asyncio.sleep(0)  # ... ran before we resume


class _TurnBudget:
    """The time all streams share in one loop turn for their sends and their starts (see
    :func:`_yield_if_turn_over` and :func:`wait_for_start_turn`), and the starts waiting for a
    later turn, first come first woken."""

    def __init__(self) -> None:
        self.due = 0.0  # time.monotonic() past which every sending stream yields this turn
        self.reset_loop: asyncio.AbstractEventLoop | None = None  # a reset pending on it
        self.starts = 0  # stream starts let through since the last reset
        self.feeds = 0  # slices of connections' reads handed to h2 since the last reset
        self.waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def reset(self) -> None:
        self.due = time.monotonic() + SEND_CHECKPOINT_INTERVAL
        self.reset_loop = None
        self.starts = 0
        self.feeds = 0
        self.wake_next()

    def schedule_reset(self) -> None:
        """Start a new budget at the beginning of the next loop turn (once per turn)."""
        loop = asyncio.get_running_loop()
        if self.reset_loop is not loop:  # the first stream over the budget in this turn
            self.reset_loop = loop
            loop.call_soon(self.reset)  # runs first in the next turn

    def wake_next(self) -> None:
        """Wake the first waiting start that is still waiting (one only: it checks the budget
        when it runs and wakes the next one if the budget still has room)."""
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)
                return


_turn_budget = _TurnBudget()


class _FeedQueue:
    """Connections whose received bytes wait for h2 (their reading paused), first come first
    fed: each new loop turn feeds them one slice (:data:`FEED_SLICE_BYTES`) each in turn while
    the turn's budget lasts (at least one slice), a connection with more left going to the
    back, so a small read (a Describe) waits at most one round of slices behind large ones,
    not until they are all parsed."""

    def __init__(self) -> None:
        self.queue: collections.deque[TransportProtocol] = collections.deque()
        self.scheduled_loop: asyncio.AbstractEventLoop | None = None

    def add(self, protocol: TransportProtocol) -> None:
        self.queue.append(protocol)
        self.schedule()

    def schedule(self) -> None:
        """Run the queue in the next loop turn, after its new budget (once per turn)."""
        loop = asyncio.get_running_loop()
        if self.scheduled_loop is not loop:
            _turn_budget.schedule_reset()  # scheduled first: the new budget comes first
            self.scheduled_loop = loop
            loop.call_soon(self.run)

    def run(self) -> None:
        self.scheduled_loop = None
        turn = _turn_budget
        queue = self.queue
        while queue and (not turn.feeds or time.monotonic() < turn.due):
            protocol = queue.popleft()
            if protocol._unfed is None:  # its connection was lost meanwhile
                continue
            if protocol._feed_slice():
                queue.append(protocol)
            else:
                protocol._fed_all()
        if queue:
            self.schedule()


_feed_queue = _FeedQueue()


async def _yield_if_turn_over() -> None:
    """Yield to the loop when the sends of all streams have run longer than
    :data:`SEND_CHECKPOINT_INTERVAL` in this loop turn: many short replies ready in one turn
    then go out over several turns, each one polling the sockets first, instead of one turn
    running them all back to back (which held a Describe on another connection 300-570 ms
    behind 100 small streams)."""
    turn = _turn_budget
    if time.monotonic() < turn.due:
        return
    turn.schedule_reset()
    await checkpoint()


async def wait_for_start_turn() -> None:
    """Wait until the loop turn's shared budget (:data:`SEND_CHECKPOINT_INTERVAL`, shared with
    the sends of :func:`_yield_if_turn_over`) has room for one more stream start: a stream's
    start (its request's decode, validation and token count; the provider's first event) runs
    only while the turn's budget lasts, or as the first start after a new budget began (so
    starts always progress, whatever else the turn runs). Past it, or while other starts wait,
    the start joins a first-in first-out queue: each new budget wakes the first waiter, and a
    start let through wakes the next one, which runs after it and checks the budget again, so
    a turn wakes only the starts that fit in it (plus one) however many wait, and 1,000
    streams ready at once start over many turns, in the order they came, each turn polling
    the sockets first. A start finding the last budget spent long ago (a quiet server) waits
    one loop turn for a new one, as a send does.

    Raises:
        asyncio.CancelledError: the call was cancelled (reset, deadline, lost connection)
            while it waited; nothing of its start has run (a start woken and cancelled
            before it ran wakes the next waiter in its place).
    """
    turn = _turn_budget
    if not turn.waiting and (not turn.starts or time.monotonic() < turn.due):
        turn.starts += 1
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    turn.waiting.append(waiter)
    turn.schedule_reset()
    while True:
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # woken, then cancelled: pass it on
                turn.wake_next()
            raise
        if not turn.starts or time.monotonic() < turn.due:
            break
        # woken by the start before it, but the budget ran out meanwhile: first again
        waiter = loop.create_future()
        turn.waiting.appendleft(waiter)
        turn.schedule_reset()
    turn.starts += 1
    if turn.waiting:
        turn.wake_next()  # runs after this start's step, and checks the budget again


async def send_events(stream: grpclib.server.Stream[Any, Any], events: AsyncIterator[Any]) -> None:
    """Send every message of a server-streaming reply, with cancellation checkpoints.

    ``events`` is closed (``aclose``, when it has one) as soon as the call ends for any reason,
    so the provider's ``finally`` runs at once. The loop gets a turn at least every
    :data:`SEND_CHECKPOINT_INTERVAL` seconds (see :func:`checkpoint`).

    Raises:
        asyncio.CancelledError: the client cancelled, the connection was lost or the deadline
            passed (grpclib then answers the status).
    """
    closing: contextlib.AbstractAsyncContextManager[Any] = (
        contextlib.aclosing(events) if hasattr(events, "aclose") else contextlib.nullcontext()
    )
    writer = EventWriter(stream)  # events ready at once go out in one write
    try:
        async with closing:
            await wait_for_start_turn()  # the provider's start and first event: budgeted
            due = time.monotonic() + SEND_CHECKPOINT_INTERVAL
            async for event in events:
                await _yield_if_turn_over()
                if time.monotonic() >= due:
                    await checkpoint()
                    due = time.monotonic() + SEND_CHECKPOINT_INTERVAL
                await writer.send(event)
        await writer.drain()
    finally:
        writer.close()


def cancel_outcome(
    stream: grpclib.server.Stream[Any, Any], started: float | None = None
) -> tuple[str, str | None]:
    """``(outcome, detail)`` for the RPC record of a call that was cancelled: ``deadline_exceeded``
    when its deadline or the receive timeout ended it (detail: the status message), or when the
    client reset the stream at the deadline its ``grpc-timeout`` set (:func:`reset_at_deadline`,
    ``started`` the call's start: a client enforcing its own deadline, and grpcio reports
    DEADLINE_EXCEEDED), else ``cancelled`` (detail: the server's own reason for resetting the
    stream, :func:`~protocol_py.server.grpc_layer.progress.cancel_reason`, or None)."""
    error = grpclib_private.wrapper_error(grpclib_private.server_h2_stream(stream).wrapper)
    if isinstance(error, GRPCError) and error.status is Status.DEADLINE_EXCEEDED:
        return "deadline_exceeded", error.message
    if isinstance(error, TimeoutError):
        return "deadline_exceeded", None
    if reset_at_deadline(stream.deadline, started):
        return "deadline_exceeded", None
    return "cancelled", cancel_reason(grpclib_private.server_h2_stream(stream))


def _drop_traceback_cycle(error: BaseException | None) -> None:
    """Clear the frames of ``error``'s traceback and of every exception chained to it."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if error.__traceback__ is not None:
            traceback.clear_frames(error.__traceback__)
            error.__traceback__ = None
        error = error.__cause__ or error.__context__


class MemoryTrimmer:
    """Returns memory freed by large or aborted calls, and by the calls before a connection
    goes without an open call, to the operating system.

    glibc keeps freed heap pages of medium-sized blocks (the HTTP/2 frames and write buffers of
    a large reply) mapped, so RSS stayed hundreds of MB above baseline after 60 MiB replies
    were refused. :meth:`request` schedules one ``malloc_trim(0)`` in a worker thread (it
    releases the GIL), at most once per :data:`MEMORY_TRIM_INTERVAL` seconds; elsewhere it is
    a no-op.
    """

    def __init__(self) -> None:
        self._trim = find_malloc_trim()
        self._scheduled: asyncio.TimerHandle | None = None
        self._last = 0.0

    def request(self, loop: asyncio.AbstractEventLoop) -> None:
        """Schedule a trim (coalesced with one already scheduled)."""
        if self._trim is None or self._scheduled is not None or loop.is_closed():
            return
        delay = max(0.0, self._last + MEMORY_TRIM_INTERVAL - time.monotonic())
        self._scheduled = loop.call_later(delay, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = None
        self._last = time.monotonic()
        if self._trim is not None:
            run_released(self._trim, 0)  # a started thread: none started on the loop

    def cancel(self) -> None:
        """Drop a scheduled trim (the server is closing)."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None


class _QuietTransport:
    """The connection's transport, writing nothing once it is closing (asyncio would log a
    warning for every write after a lost connection), and closing the connection when the
    bytes it holds pass :data:`~protocol_py.server.grpc_layer.progress.CONNECTION_QUEUE_BYTES`."""

    def __init__(
        self,
        transport: asyncio.Transport,
        on_data_frames: Callable[[int], None] | None = None,
        protocol: Any = None,
    ) -> None:
        self._transport = transport
        self._on_data_frames = on_data_frames
        self._data_frames = DataFrameCounter() if on_data_frames is not None else None
        self._protocol = protocol

    def write(self, data: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(data)
            if self._data_frames is not None and self._on_data_frames is not None:
                sent = self._data_frames.feed(data)
                if sent:
                    self._on_data_frames(sent)
            if self._protocol is not None:
                over_queue_budget(self._protocol, self._transport)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class TransportHandler(grpclib.server.Handler):
    """grpclib's per-connection request handler with the fixes of this module.

    Args:
        receive_timeout: Seconds a unary-request call gets to complete its request.
        idle_timeout: Seconds a connection may stay without an open stream.
        trimmer: Asked to return memory to the OS after a large or aborted call.
    """

    protocol_ref: weakref.ref[H2Protocol] | None = None

    def __init__(
        self,
        *args: Any,
        receive_timeout: float,
        idle_timeout: float,
        trimmer: MemoryTrimmer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.trimmer = trimmer
        self.receive_timeout = receive_timeout
        self.idle_timeout = idle_timeout
        self.open_streams = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._arm_idle_timer()

    # -- streams --------------------------------------------------------------------------------

    def accept(
        self,
        stream: Any,
        headers: list[tuple[str, str]],
        release_stream: Callable[[], Any],
    ) -> None:
        """Start the call's task; release its stream when the task ends, however it ends
        (https://github.com/vmagamedov/grpclib/issues/217), and watch its receive timeout."""
        released = False

        def release_once() -> None:
            nonlocal released
            if not released:
                released = True
                release_stream()

        super().accept(stream, headers, release_once)
        task = grpclib_private.handler_tasks(self)[stream]
        self.open_streams += 1
        self._disarm_idle_timer()
        timer: asyncio.TimerHandle | None = None
        method = self.mapping.get(dict(headers).get(":path", ""))
        if method is not None and not method.cardinality.client_streaming:
            timer = self.loop.call_later(self.receive_timeout, self._receive_expired, stream, task)
        task.add_done_callback(lambda done: self._finished(stream, done, release_once, timer))

    def _finished(
        self,
        stream: Any,
        task: asyncio.Task[None],
        release: Callable[[], None],
        timer: asyncio.TimerHandle | None,
    ) -> None:
        if timer is not None:
            timer.cancel()
        # https://github.com/vmagamedov/grpclib/issues/217: a task cancelled before its first
        # step never ran the ``finally`` that acknowledges the stream's buffered DATA; release
        # it here (a no-op otherwise).
        with contextlib.suppress(Exception):
            release()
        # The exceptions that ended the call hold, through their tracebacks, the frames that
        # were sending its reply; they sit in reference cycles: break them now.
        wrapper = stream.wrapper
        if wrapper is not None:
            _drop_traceback_cycle(grpclib_private.wrapper_error(wrapper))
        stream.wrapper = None
        aborted = wrapper is not None and grpclib_private.wrapper_error(wrapper) is not None
        if task.cancelled():
            aborted = True
            try:
                task.result()
            except asyncio.CancelledError as exc:
                _drop_traceback_cycle(exc)
        large = max(stream.data_sent, stream.data_received) >= LARGE_CALL_BYTES
        tasks = grpclib_private.handler_tasks(self)
        if tasks.get(stream) is task:
            del tasks[stream]
        grpclib_private.handler_cancelled(self).discard(task)
        self.open_streams -= 1
        # a large or aborted call, or the connection's last open call (a provider may have
        # moved megabytes upstream for a small one: the freed heap serve keeps is returned)
        if self.trimmer is not None and (aborted or large or not self.open_streams):
            self.trimmer.request(self.loop)
        protocol = self.protocol_ref() if self.protocol_ref is not None else None
        limit = getattr(protocol, "connection_limit", None)
        if limit is not None:
            limit.touch(protocol)  # just active: the last to be closed for room
        if self.open_streams == 0 and not self.closing:
            self._arm_idle_timer()

    def _receive_expired(self, stream: Any, task: asyncio.Task[None]) -> None:
        buffer = stream.buffer
        waiting = grpclib_private.queue_has_getters(grpclib_private.buffer_unacked(buffer))
        ended = grpclib_private.buffer_ended(buffer)
        if task.done() or ended or not waiting or getattr(stream, REQUEST_READ_ATTR, False):
            return  # the request is complete, or the handler has read all it needed
        error = GRPCError(Status.DEADLINE_EXCEEDED, receive_timeout_message(self.receive_timeout))
        if stream.wrapper is not None:
            stream.wrapper.cancel(error)  # grpclib sends the status, then RST_STREAM
        else:
            task.cancel()

    def cancel(self, stream: Any) -> None:
        """Cancel the task of a reset stream (tolerates a stream already finished), unless its
        call's cancellation wrapper, which grpclib cancels first for the same reset, already
        cancelled that task: a call's cancellation is delivered once
        (``_compat.grpclib_cancel_once``)."""
        task = grpclib_private.handler_tasks(self).pop(stream, None)
        if task is not None:
            wrapper = getattr(stream, "wrapper", None)
            if wrapper is None or not grpclib_cancel_once.delivered_to(wrapper, task):
                task.cancel()  # not inside its wrapper then (sending its trailers): cancel it
            grpclib_private.handler_cancelled(self).add(task)

    def close(self) -> None:
        """The connection is gone: cancel every call not cancelled yet and the idle timer; the
        calls already cancelled by a reset that are still finishing are cancelled again
        :data:`CANCELLED_CALLS_GRACE` seconds later (grpclib forgets them, so one waiting to
        write its trailers on a connection paused for writing hung forever, holding its reply;
        one closing its upstream in ``finally`` gets that long)."""
        self._disarm_idle_timer()
        finishing = [t for t in grpclib_private.handler_cancelled(self) if not t.done()]
        if finishing:
            self.loop.call_later(CANCELLED_CALLS_GRACE, _cancel_unfinished, finishing)
        super().close()

    # -- idle connections -----------------------------------------------------------------------

    def _arm_idle_timer(self) -> None:
        self._disarm_idle_timer()
        self._idle_timer = self.loop.call_later(self.idle_timeout, self._idle_expired)

    def _disarm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_expired(self) -> None:
        self._idle_timer = None
        protocol = self.protocol_ref() if self.protocol_ref is not None else None
        if self.open_streams == 0 and protocol is not None:
            close_connection(protocol, "idle connection closed")


def _cancel_unfinished(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        if not task.done():
            task.cancel()


def close_connection(protocol: H2Protocol, reason: str = "server shutting down") -> None:
    """Send GOAWAY (NO_ERROR, best effort) and close the transport of one connection; its
    calls are cancelled with ``reason``. A transport still open :data:`FLOOD_CLOSE_WAIT`
    seconds later (a peer that reads nothing) is aborted."""
    connection = getattr(protocol, "connection", None)
    if connection is None or connection.is_closing():
        return
    transport = None  # grpclib's close drops the connection's transport: take it first
    with contextlib.suppress(Exception):
        transport = grpclib_private.connection_transport(connection)
    with contextlib.suppress(Exception):
        grpclib_private.connection_h2(connection).close_connection()
        connection.flush()
    with contextlib.suppress(Exception):
        protocol.processor.close(reason)
    if transport is not None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing more is written
            asyncio.get_running_loop().call_later(FLOOD_CLOSE_WAIT, transport.abort)


def protocol_factory(
    server: grpclib.server.Server,
    *,
    receive_timeout: float,
    idle_timeout: float,
    trimmer: MemoryTrimmer | None = None,
    protocol_class: Callable[..., H2Protocol] | None = None,
    handler_class: type[TransportHandler] | None = None,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    connection_limit: ConnectionLimit | None = None,
    flood_warnings: RateLimitedWarning | None = None,
    write_timeout: float = DEFAULT_WRITE_TIMEOUT,
) -> H2Protocol:
    """grpclib's ``Server._protocol_factory`` with ``handler_class`` (default
    :class:`TransportHandler`, or a subclass of it) and ``protocol_class`` (default
    :class:`TransportProtocol`, or a subclass of it), one pair per accepted connection;
    ``handshake_timeout`` (seconds) bounds the HTTP/2 preface; ``connection_limit`` counts
    the connection (:mod:`~protocol_py.server.grpc_layer.connection_limit`);
    ``flood_warnings`` is the server's limit of flood WARNING lines; ``write_timeout``
    (seconds) bounds a closed flow-control window
    (:mod:`~protocol_py.server.grpc_layer.progress`)."""
    handler = (handler_class or TransportHandler)(
        *grpclib_private.handler_arguments(server),
        receive_timeout=receive_timeout,
        idle_timeout=idle_timeout,
        trimmer=trimmer,
    )
    grpclib_private.add_handler(server, handler)
    make = protocol_class or TransportProtocol
    protocol = make(handler, *grpclib_private.protocol_configurations(server))
    if isinstance(protocol, TransportProtocol):
        protocol.handshake_timeout = handshake_timeout
        protocol.connection_limit = connection_limit
        if flood_warnings is not None:
            protocol.flood_warnings = flood_warnings
        protocol.write_timeout = write_timeout
    handler.protocol_ref = weakref.ref(protocol)
    return protocol


INBOUND_MAX_FRAME_BYTES: Final = 256 * 1024
"""SETTINGS_MAX_FRAME_SIZE the server advertises, bytes (256 KiB; HTTP/2's default is 16 KiB):
the largest frame a peer may send it, taken from the first read on (before the peer's SETTINGS
ACK). grpclib's client cuts a request's DATA into frames of this size, so a 1.1 MB request
arrives in 5 DATA frames instead of 69, with as many fewer events, acknowledgements and
WINDOW_UPDATEs. It is also the most bytes of one frame h2 holds before parsing it. Larger is
slower: h2 parsed a 1.1 MB body in 1 MiB frames in 6.5 ms, in 256 KiB frames in 2.0 ms, in
16 KiB frames in 2.4 ms (asyncio reads 256 KiB at a time; docs/server.md)."""


OUTBOUND_MAX_FRAME_BYTES: Final = 256 * 1024
"""Largest DATA or HEADERS frame the server sends, bytes (256 KiB), whatever larger
SETTINGS_MAX_FRAME_SIZE the peer advertises (grpcio advertises 16 MiB; a sender may always
send smaller frames, RFC 9113 section 4.2). grpclib writes one frame per wait for the
transport, so a peer's 16 MiB limit put 16 MiB at once in the connection's buffer: with any
byte already queued that passed
:data:`~protocol_py.server.grpc_layer.progress.CONNECTION_QUEUE_BYTES` and closed the
connection of a client that was reading a large reply. A 256 KiB frame keeps what one writer
adds to the buffer far under that bound."""


def _cap_outbound_frames(h2: Any) -> None:
    """Lower h2's outbound frame size (the connection's and every open stream's) to
    :data:`OUTBOUND_MAX_FRAME_BYTES`."""
    h2.max_outbound_frame_size = OUTBOUND_MAX_FRAME_BYTES
    for stream in h2.streams.values():
        stream.max_outbound_frame_size = OUTBOUND_MAX_FRAME_BYTES


class TransportProtocol(H2Protocol):
    """grpclib's HTTP/2 protocol writing through :class:`_QuietTransport`, which wakes every
    writer when the connection is lost (grpclib left a writer paused by a full transport buffer
    waiting forever), and closing a connection that has not sent the HTTP/2 preface and its
    first SETTINGS frame header within :attr:`handshake_timeout` seconds."""

    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    """Seconds a new connection gets to send :data:`HTTP2_PREFACE_BYTES` bytes."""

    connection_limit: ConnectionLimit | None = None
    """The server's bound on open connections: a connection over it closes the longest idle
    one or is itself closed at once."""

    flood_warnings: RateLimitedWarning = RateLimitedWarning(log)
    """The server-wide limit of the WARNING logged when a flooding connection is closed: one
    line per :data:`~protocol_py.server.grpc_layer.log_limit.WARNING_INTERVAL` seconds across
    all of the server's connections, with the count of those suppressed (set per server by
    :func:`protocol_factory`)."""
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    """Seconds a stream's window may stay closed
    (:class:`~protocol_py.server.grpc_layer.progress.ProgressWatch`)."""

    _progress: ProgressWatch | None = None

    _preface_timer: asyncio.TimerHandle | None = None
    _preface_received = 0
    _frames: ControlFrameCounter | None = None
    _closed_for_flood = False
    _control_allowance: float = float(CONTROL_FRAME_BURST)
    _control_checked: float = 0.0
    _window_update_credit: int = 0
    _small_data_credit: int = 0
    _unfed: list[bytes] | None = None  # bytes received and not yet given to h2, in order
    _unfed_position = 0  # bytes of _unfed[0] already given
    _unfed_spans: list[list[tuple[int, int]]] | None = None  # large DATA payloads of each
    _feed_failed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Set up the connection over the quiet transport and start the preface timer."""
        quiet = _QuietTransport(cast(asyncio.Transport, transport), self._data_frames_sent, self)
        super().connection_made(quiet)  # type: ignore[arg-type]
        h2_connection = grpclib_private.connection_h2(self.connection)
        h2_connection.update_settings({SettingCodes.MAX_FRAME_SIZE: INBOUND_MAX_FRAME_BYTES})
        # Taken at once, not from the peer's SETTINGS ACK on: h2 applies a new frame limit from
        # the next receive_data call on, so a peer whose ACK and first large frame arrived in
        # one read got FRAME_SIZE_ERROR (a peer may not send larger frames before its ACK; one
        # that does is only taken sooner).
        h2_connection.max_inbound_frame_size = INBOUND_MAX_FRAME_BYTES
        self.connection.flush()
        if self.connection_limit is not None and not self.connection_limit.admit(self):
            return  # over the connection limit with none idle: closed at once
        if not transport.is_closing():
            self._progress = ProgressWatch(self, self.write_timeout)
            self._progress.start()
            self._preface_timer = asyncio.get_running_loop().call_later(
                self.handshake_timeout, self._preface_expired, transport
            )

    def data_received(self, data: bytes) -> None:
        """Count the preface bytes until they are all in, charge the control frames in
        ``data`` to the connection's allowance (closing it when spent, before h2 parses any of
        them), then hand data to grpclib."""
        if self._preface_timer is not None:
            self._preface_received += len(data)
            if self._preface_received >= HTTP2_PREFACE_BYTES:
                self._preface_timer.cancel()
                self._preface_timer = None
        if self._frames is None:
            self._frames = ControlFrameCounter()
        if self._closed_for_flood:
            return
        frames = self._frames
        # past the burst: over any allowance
        control = frames.feed(data, CONTROL_FRAME_BURST, self._small_data_credit)
        if frames.headers:  # each stream the peer opens earns its WINDOW_UPDATE
            self._earn_window_updates(frames.headers * WINDOW_UPDATES_PER_STREAM)
            self._small_data_credit = min(
                MAX_WINDOW_UPDATE_CREDIT,
                self._small_data_credit + frames.headers * SMALL_DATA_FRAMES_PER_STREAM,
            )
            frames.headers = 0
        if frames.small_data:  # those a stream earned are free
            free = min(frames.small_data, self._small_data_credit)
            self._small_data_credit -= free
            control += (frames.small_data - free) * SMALL_DATA_FRAME_WEIGHT
            frames.small_data = 0
        if frames.window_updates:  # those earned by DATA the server sent are free
            free = min(frames.window_updates, self._window_update_credit)
            self._window_update_credit -= free
            control += (frames.window_updates - free) * WINDOW_UPDATE_FRAME_WEIGHT
            frames.window_updates = 0
        if self._over_control_allowance(control):
            return
        spans = frames.data_spans  # this read's large DATA payloads (WHOLE_DATA_MIN_BYTES)
        if self._unfed is not None and self._unfed_spans is not None:  # after an earlier read
            self._unfed.append(data)
            self._unfed_spans.append(spans)
            return
        self._unfed, self._unfed_position, self._unfed_spans = [data], 0, [spans]
        self._feed_within_budget()

    def _feed_within_budget(self) -> None:
        """Hand the unfed bytes to h2 in slices of at most :data:`FEED_SLICE_BYTES`, in order,
        while the loop turn's shared budget lasts (and one slice in any case when none ran on
        this budget yet); when it is spent, pause reading and queue the connection
        (:class:`_FeedQueue`), so 50 connections' reads arriving in one poll are parsed over
        several turns, each polling the sockets first, instead of one turn parsing them all
        (10-40 ms each)."""
        turn = _turn_budget
        while self._unfed:
            if turn.feeds and time.monotonic() >= turn.due:
                if grpclib_private.connection_closed(self.connection):
                    break  # closed (flood, write timeout, eviction): the rest is dropped
                transport = grpclib_private.connection_transport(self.connection)
                if transport.is_closing():
                    break  # nothing more is read
                transport.pause_reading()
                _feed_queue.add(self)
                return
            self._feed_slice()
        self._unfed = self._unfed_spans = None

    def _clear_unfed(self) -> None:
        """Drop the bytes not yet given to h2 (and their DATA spans), keeping the lists."""
        if self._unfed is not None:
            self._unfed.clear()
        if self._unfed_spans is not None:
            self._unfed_spans.clear()

    def _feed_slice(self) -> bool:
        """Feed the next slice of the unfed bytes; False once none is left (or the connection
        is closing: h2 raised once, or the server closed the connection while its bytes waited;
        the rest is dropped)."""
        unfed = self._unfed
        if not unfed:
            return False
        if grpclib_private.connection_closed(self.connection):
            self._clear_unfed()
            return False
        data, position = unfed[0], self._unfed_position
        end = position + FEED_SLICE_BYTES
        spans = self._unfed_spans
        if spans:
            for start, stop in spans[0]:  # a few per read: payloads of 64 KiB or more
                if start < end < stop:  # ends inside a large payload: feed it to its end
                    end = stop
                    break
        piece = data[position:end]
        if position + len(piece) >= len(data):
            unfed.pop(0)
            if spans:
                spans.pop(0)
            self._unfed_position = 0
        else:
            self._unfed_position = position + len(piece)
        _turn_budget.feeds += 1
        self._feed(piece)
        if self._feed_failed or self._closed_for_flood:
            self._clear_unfed()
        return bool(unfed)

    def _fed_all(self) -> None:
        """The queued bytes are all fed: reading resumes."""
        self._unfed = self._unfed_spans = None
        if not self._feed_failed and not grpclib_private.connection_closed(self.connection):
            transport = grpclib_private.connection_transport(self.connection)
            if not transport.is_closing():
                transport.resume_reading()

    def _data_frames_sent(self, count: int) -> None:
        """``count`` DATA frames written: each earns the peer
        :data:`WINDOW_UPDATES_PER_DATA_FRAME` uncharged WINDOW_UPDATE frames."""
        self._earn_window_updates(count * WINDOW_UPDATES_PER_DATA_FRAME)

    def _earn_window_updates(self, count: int) -> None:
        """``count`` more uncharged WINDOW_UPDATE frames, up to :data:`MAX_WINDOW_UPDATE_CREDIT`."""
        self._window_update_credit = min(
            MAX_WINDOW_UPDATE_CREDIT, self._window_update_credit + count
        )

    def _preface_expired(self, transport: asyncio.BaseTransport) -> None:
        self._preface_timer = None
        log.info(
            "closed a connection that sent no HTTP/2 preface within the handshake timeout of %g s",
            self.handshake_timeout,
        )
        cast(asyncio.Transport, transport).abort()

    def connection_lost(self, exc: BaseException | None) -> None:
        """Cancel the connection's calls and wake its writers (they write nothing more)."""
        if self._preface_timer is not None:
            self._preface_timer.cancel()
            self._preface_timer = None
        if self.connection_limit is not None:
            self.connection_limit.release(self)
        if self._progress is not None:
            self._progress.stop()
        self._unfed = self._unfed_spans = None  # the calls are cancelled: bytes not needed
        super().connection_lost(exc)
        self.connection.write_ready.set()

    def _feed(self, data: bytes) -> None:
        """Feed ``data`` to the HTTP/2 state machine, as grpclib does, except that a connection
        error (an oversized header list: more than the advertised SETTINGS_MAX_HEADER_LIST_SIZE
        of 64 KiB; any other protocol violation) sends the GOAWAY that h2 prepared and logs one
        WARNING naming the peer and the rule before the connection closes (grpclib dropped it
        silently). A stream beyond SETTINGS_MAX_CONCURRENT_STREAMS is not a connection error:
        it is refused alone (:mod:`protocol_py._compat.h2_refused_stream`)."""
        try:
            events = self.connection.feed(data)
        except ProtocolError as exc:
            self._feed_failed = True
            # the GOAWAY h2 queued, with its error code
            self._close_with_goaway(
                getattr(exc, "error_code", ErrorCodes.PROTOCOL_ERROR),
                bounded_message(str(exc))
                + (_wrong_protocol(data) if "preamble" in str(exc).lower() else ""),
                queued=True,
            )
        except UnicodeError as exc:
            # h2 decodes header names and values as ASCII and raises the codec's error, not a
            # ProtocolError: a header that is not ASCII (RFC 9113 section 8.2.1) ends the
            # connection with GOAWAY PROTOCOL_ERROR and one WARNING, never a traceback.
            self._feed_failed = True
            self._close_with_goaway(
                ErrorCodes.PROTOCOL_ERROR,
                f"a header that is not ASCII ({bounded_message(str(exc))})",
                queued=False,
            )
        else:
            h2 = grpclib_private.connection_h2(self.connection)
            if h2.max_outbound_frame_size > OUTBOUND_MAX_FRAME_BYTES:  # the peer's SETTINGS
                _cap_outbound_frames(h2)
            self.connection.flush()
            for event in events:
                self.processor.process(event)
            self.connection.flush()

    def _close_with_goaway(self, code: ErrorCodes, detail: str, *, queued: bool) -> None:
        """Send GOAWAY ``code`` (already queued by h2 when ``queued``), log one WARNING naming
        the peer, the code and ``detail``, and close the connection's calls."""
        if not queued:
            grpclib_private.connection_h2(self.connection).close_connection(error_code=code)
        self.connection.flush()
        log.warning(
            "closing HTTP/2 connection from %s with GOAWAY %s: %s",
            _peer(self.connection),
            code.name,
            detail,
        )
        self.processor.close("Protocol error")

    def _over_control_allowance(self, control: int) -> bool:
        """Charge ``control`` frames to the connection's allowance (:data:`CONTROL_FRAME_BURST`,
        refilled at :data:`CONTROL_FRAME_RATE` per second); when it is spent, send GOAWAY
        ENHANCE_YOUR_CALM, log one WARNING and close the connection (True: the data is
        dropped)."""
        if not control:
            return False
        now = time.monotonic()
        if self._control_checked:
            self._control_allowance = min(
                float(CONTROL_FRAME_BURST),
                self._control_allowance + (now - self._control_checked) * CONTROL_FRAME_RATE,
            )
        self._control_checked = now
        self._control_allowance -= control
        if self._control_allowance >= 0:
            return False
        self._closed_for_flood = True
        with contextlib.suppress(Exception):
            grpclib_private.connection_h2(self.connection).close_connection(
                ErrorCodes.ENHANCE_YOUR_CALM
            )
            self.connection.flush()
        self.flood_warnings.warn(
            "closing HTTP/2 connection from %s with GOAWAY ENHANCE_YOUR_CALM: more than %d "
            "control frames (PING, SETTINGS, PRIORITY, RST_STREAM, empty or small DATA, "
            "unearned WINDOW_UPDATE) at once or over %g per second",
            _peer(self.connection),
            CONTROL_FRAME_BURST,
            CONTROL_FRAME_RATE,
        )
        # grpclib's close drops the connection's transport: take it first
        transport = grpclib_private.connection_transport(self.connection)
        self.processor.close("Control frame flood")
        with contextlib.suppress(Exception):
            transport.close()
            # A flooder that never reads keeps the GOAWAY (and any ACKs) unsent and the socket
            # open: drop it after FLOOD_CLOSE_WAIT seconds.
            asyncio.get_running_loop().call_later(FLOOD_CLOSE_WAIT, transport.abort)
        return True


class ControlFrameCounter:
    """Counts the control frames in a connection's bytes from the 9-byte HTTP/2 frame headers
    alone (RFC 9113 section 4.1), before h2 parses anything, so a flood is stopped after one
    read instead of after h2 has handled every frame in it. Counted (:meth:`feed`'s result):
    PING, PRIORITY and RST_STREAM, one each; DATA with an empty payload and no END_STREAM flag,
    :data:`EMPTY_DATA_FRAME_WEIGHT` each; SETTINGS (not its ACK), :data:`SETTINGS_FRAME_WEIGHT`
    each. WINDOW_UPDATE frames are counted apart (:attr:`window_updates`), and so are HEADERS
    frames (:attr:`headers`) and small DATA frames (:attr:`small_data`): WINDOW_UPDATEs earned
    by DATA the server sent or by a stream the peer opened are free, the others weigh
    :data:`WINDOW_UPDATE_FRAME_WEIGHT`, and small DATA frames beyond those the streams earned
    weigh :data:`SMALL_DATA_FRAME_WEIGHT` (:class:`TransportProtocol`). The client connection
    preface (24 bytes) is skipped."""

    __slots__ = (
        "_header",
        "_skip",
        "_skip_data",
        "data_spans",
        "headers",
        "small_data",
        "window_updates",
    )

    def __init__(self) -> None:
        self._skip = 24  # bytes of the current frame's payload (first: the preface) still due
        self._skip_data = False  # that payload is a DATA frame's of WHOLE_DATA_MIN_BYTES or more
        self._header = b""
        self.data_spans: list[tuple[int, int]] = []
        """The ``(start, end)`` offsets, in the bytes of the last :meth:`feed`, of the payloads
        (or their parts in those bytes) of DATA frames of at least
        :data:`WHOLE_DATA_MIN_BYTES` (a new list each call)."""
        self.window_updates = 0
        """WINDOW_UPDATE frames seen so far (the caller resets it after charging them)."""
        self.headers = 0
        """HEADERS frames seen so far (the caller resets it after crediting them)."""
        self.small_data = 0
        """DATA frames with a payload under :data:`SMALL_DATA_FRAME_BYTES` and no END_STREAM
        seen so far (the caller resets it after charging them)."""

    def feed(self, data: bytes, limit: float = float("inf"), credit: int = 0) -> int:
        """Control frames (weighted, see the class) whose header is complete in ``data`` (with
        what came before); counting stops as soon as the count passes ``limit`` (the
        connection is then closed, so the rest is never needed), small DATA frames beyond
        ``credit`` (and those the HEADERS frames in ``data`` earn) counted in it."""
        count = 0
        position = 0
        end = len(data)
        spans: list[tuple[int, int]] = []
        self.data_spans = spans
        while position < end:
            if self._skip:
                step = min(self._skip, end - position)
                if self._skip_data:
                    spans.append((position, position + step))
                self._skip -= step
                position += step
                continue
            if self._header or end - position < 9:
                need = 9 - len(self._header)
                if end - position < need:
                    self._header += data[position:end]
                    break
                header = self._header + data[position : position + need]
                self._header = b""
                position += need
            else:
                header = data[position : position + 9]
                position += 9
            length = (header[0] << 16) | (header[1] << 8) | header[2]
            kind = header[3]
            if kind == 4:  # SETTINGS, unless an ACK
                if not header[4] & 1:
                    count += SETTINGS_FRAME_WEIGHT
            elif kind == 8:  # WINDOW_UPDATE
                self.window_updates += 1
            elif kind == 1:  # HEADERS
                self.headers += 1
            elif kind in (2, 3, 6):  # PRIORITY, RST_STREAM, PING
                count += 1
            elif kind == 0 and not header[4] & 1:  # DATA without END_STREAM
                if not length:
                    count += EMPTY_DATA_FRAME_WEIGHT
                elif length < SMALL_DATA_FRAME_BYTES:
                    self.small_data += 1
                    charged = self.small_data - credit - SMALL_DATA_FRAMES_PER_STREAM * self.headers
                    if count + charged * SMALL_DATA_FRAME_WEIGHT > limit:
                        self._skip = length
                        break
            self._skip = length
            self._skip_data = kind == 0 and length >= WHOLE_DATA_MIN_BYTES
            if count > limit:
                break
        return count


class DataFrameCounter:
    """Counts the DATA frames with a payload in the bytes a connection writes (the server's
    side), from their 9-byte headers: each earns the peer WINDOW_UPDATE frames that are not
    charged as control frames (:data:`WINDOW_UPDATES_PER_DATA_FRAME`)."""

    __slots__ = ("_header", "_skip")

    def __init__(self) -> None:
        self._skip = 0
        self._header = b""

    def feed(self, data: bytes) -> int:
        """DATA frames with a payload whose header is complete in ``data``."""
        count = 0
        position = 0
        end = len(data)
        while position < end:
            if self._skip:
                step = min(self._skip, end - position)
                self._skip -= step
                position += step
                continue
            need = 9 - len(self._header)
            if end - position < need:
                self._header += data[position:end]
                break
            header = self._header + data[position : position + need]
            self._header = b""
            position += need
            length = (header[0] << 16) | (header[1] << 8) | header[2]
            if header[3] == 0 and length:
                count += 1
            self._skip = length
        return count


def _wrong_protocol(data: bytes) -> str:
    """What a connection that did not open with the HTTP/2 preface spoke instead, as a
    suffix for its log line: a TLS record (a TLS client of this plaintext port) or an HTTP/1.x
    request line; empty when neither."""
    if data[:1] == b"\x16" and data[1:2] == b"\x03":  # TLS handshake record, version 3.x
        return " (the client sent a TLS handshake to this plaintext port)"
    if data[:8].split(b" ", 1)[0] in {b"GET", b"POST", b"HEAD", b"PUT", b"OPTIONS"}:
        return " (the client sent an HTTP/1.x request, not the HTTP/2 preface)"
    return ""


def _peer(connection: Any) -> str:
    """``host:port`` of the connection's peer (``unix`` peers have no address)."""
    peer = grpclib_private.connection_transport(connection).get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer or "a unix socket peer")
