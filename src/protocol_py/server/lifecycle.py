"""The reference server's lifecycle: listening, health, in-flight accounting, graceful drain.

:class:`ServerLifecycle` is the base of :class:`~protocol_py.server.ModelServer`: it owns the
grpclib server, the health status, the set of open connections and the in-flight
StreamCompletions, and implements the drain of :meth:`ServerLifecycle.shutdown` (server case
C02: an idle client never keeps the process alive). The RPC handlers live in
:mod:`protocol_py.server.handlers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import weakref
from asyncio import BaseTransport
from collections.abc import Callable, Iterator
from ssl import SSLContext
from typing import Any, Final, cast

import grpclib.server
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.health.check import ServiceStatus
from grpclib.protocol import H2Protocol

from protocol_py import _compat
from protocol_py._compat import asyncio_accept_backoff, grpclib_private
from protocol_py.server.codec_warmup import build_codecs
from protocol_py.server.grpc_layer.admission import AdmissionHandler
from protocol_py.server.grpc_layer.connection_limit import (
    ConnectionLimit,
    default_max_connections,
)
from protocol_py.server.grpc_layer.connections import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RECEIVE_TIMEOUT,
    MemoryTrimmer,
    TransportProtocol,
    close_connection,
    protocol_factory,
)
from protocol_py.server.grpc_layer.limits import DEFAULT_MAX_MESSAGE_SIZE, LimitedCodec
from protocol_py.server.grpc_layer.log_limit import WARNING_INTERVAL, RateLimitedWarning
from protocol_py.server.grpc_layer.progress import DEFAULT_WRITE_TIMEOUT
from protocol_py.server.offload import start_workers
from protocol_py.transport.addresses import DEFAULT_HOST, DEFAULT_PORT
from protocol_py.transport.listen import (
    SOCKET_MODE,
    SocketIdentity,
    bind_unix_socket,
    remove_socket,
    socket_identity,
)
from protocol_py.transport.tls_accept import RefusalLog, tls_protocol_factory

log = logging.getLogger("protocol_py.server")

DEFAULT_GRACE_PERIOD: Final = 10.0
"""Default time in-flight StreamCompletions get to finish on shutdown, in seconds."""

FINAL_EVENT_TIMEOUT: Final = 1.0
"""Seconds allowed, at grace expiry, for the final in-band error events to be sent."""

LISTEN_BACKLOG: Final = 100
"""Pending connections the listening socket queues (``listen`` backlog; grpclib's default)."""

SHUTDOWN_LINGER: Final = 0.25
"""Seconds connections stay open after the last in-flight stream finished during a drain."""

CANCEL_SWEEP_SLICE: Final = 500
"""Most calls one loop turn of a redelivery sweep looks at (:data:`CANCEL_REDELIVERY_S`), and
so most tasks it cancels again at once (each runs to its next await in the next turn)."""

CANCEL_REDELIVERY_MAX_SWEEPS: Final = 32
"""Longest wait between two deliveries of a call's cancellation again, in sweeps
(:data:`CANCEL_REDELIVERY_S`: 32 s): a call still running is cancelled again 1, 2, 4, 8, 16
and 32 sweeps after the sweep that first found it ended, then every 32 sweeps, so thousands
of calls of a provider that catches every cancellation cost little CPU."""

CANCEL_REDELIVERY_S: Final = 1.0
"""Seconds between the sweeps that deliver a cancelled call's cancellation again
(docs/decisions.md#d46). A ModelService call ended by its client, its deadline, its connection
or a second request message (or a StreamCompletion cut at the shutdown's grace expiry) whose
handler still runs at two sweeps in a row (so between one and two intervals after its
cancellation) is cancelled again, and again at growing intervals
(:data:`CANCEL_REDELIVERY_MAX_SWEEPS`), until it ends: a provider that caught
``CancelledError`` and went on awaiting otherwise held its call, the request and its memory
reservation, until the process exited."""


class DrainableStatus(ServiceStatus):
    """grpclib's ServiceStatus whose value can be flipped from a signal handler.

    :meth:`mark` only assigns the value (safe inside a ``signal.signal`` handler, so a health
    Check answered after SIGTERM is never SERVING); :meth:`set` then notifies Watch streams.
    """

    def mark(self, value: bool | None) -> None:
        """Set the value without notifying watchers (signal-safe)."""
        self._value = value

    def set(self, value: bool | None) -> None:
        """Set the value and wake every Watch stream (also after :meth:`mark`)."""
        super().set(value)
        for event in self._events:
            event.set()


def _redelivers(sweeps: int) -> bool:
    """Whether the ``sweeps``-th sweep that found a call ended (and still running) delivers
    its cancellation again: after 1, 2, 4, ... sweeps, then every
    :data:`CANCEL_REDELIVERY_MAX_SWEEPS`."""
    waited = sweeps - 1
    if waited < 1:
        return False
    if waited <= CANCEL_REDELIVERY_MAX_SWEEPS:
        return waited & (waited - 1) == 0
    return waited % CANCEL_REDELIVERY_MAX_SWEEPS == 0


def _never() -> bool:
    """A call that nothing outside its handler ends (the grace expiry aside)."""
    return False


class ServerLifecycle:
    """Listening, health, in-flight accounting and graceful shutdown of one gRPC server.

    Subclasses provide :meth:`prepare` (run once before listening), :meth:`services` (the
    grpclib services to serve) and :meth:`close_provider` (run last on shutdown).

    Args:
        max_message_size: Maximum message size in both directions, bytes.
        grace_period: Time in-flight StreamCompletions get on shutdown, seconds.
        receive_timeout: Time a unary-request call gets to complete its request, seconds
            (:data:`~protocol_py.server.grpc_layer.connections.DEFAULT_RECEIVE_TIMEOUT`).
        idle_timeout: Time a connection may stay without an open stream before it is closed
            with GOAWAY, seconds
            (:data:`~protocol_py.server.grpc_layer.connections.DEFAULT_IDLE_TIMEOUT`).
        max_connections: Most connections open at once; at the limit the oldest idle one is
            closed (GOAWAY NO_ERROR), or, with none idle, the new one
            (:mod:`~protocol_py.server.grpc_layer.connection_limit`). None: derived from the
            soft ``RLIMIT_NOFILE``
            (:func:`~protocol_py.server.grpc_layer.connection_limit.default_max_connections`).

    Raises:
        ValueError: a timeout that is not a positive number of seconds, or a
            ``max_connections`` that is not a positive integer.
    """

    def __init__(
        self,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        receive_timeout: float = DEFAULT_RECEIVE_TIMEOUT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_connections: int | None = None,
    ) -> None:
        for name, value in (("receive_timeout", receive_timeout), ("idle_timeout", idle_timeout)):
            if not value > 0:
                raise ValueError(f"{name}: must be a positive number of seconds, got {value!r}")
        self.max_message_size = max_message_size
        self.grace_period = grace_period
        self.receive_timeout = receive_timeout
        self.idle_timeout = idle_timeout
        self.connection_limit = ConnectionLimit(
            default_max_connections() if max_connections is None else max_connections,
            close_connection,
        )
        """The bound on open connections (its ``maximum``) and the connections it counts."""
        self._guarded_fds: list[int] = []
        self.write_timeout: float = DEFAULT_WRITE_TIMEOUT
        """Seconds a stream's flow-control window may stay closed before it is reset
        (:data:`~protocol_py.server.grpc_layer.progress.DEFAULT_WRITE_TIMEOUT`); set it before
        :meth:`start`."""
        self.handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
        """Seconds a new connection gets for its TLS handshake and then for its HTTP/2 preface
        (:data:`~protocol_py.server.grpc_layer.connections.DEFAULT_HANDSHAKE_TIMEOUT`); set it
        before
        :meth:`start`."""
        self.tls_refusals = RefusalLog()
        """Refused TLS handshakes of this server: one WARNING each, at most
        :data:`~protocol_py.transport.tls_accept.TLS_REFUSAL_LOG_BURST` lines per
        :data:`~protocol_py.transport.tls_accept.TLS_REFUSAL_LOG_INTERVAL` seconds."""
        self._trimmer = MemoryTrimmer()
        self.health_status = DrainableStatus()
        self.draining = False
        self._server: grpclib.server.Server | None = None
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self._in_flight = 0
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        self._watched: dict[asyncio.Task[Any], tuple[str, Callable[[], bool]]] = {}
        """Handler tasks whose cancellation is delivered again (:meth:`redelivering`), with
        their RPC's name and whether their call was ended from outside."""
        self._cancel_seen: dict[asyncio.Task[Any], int] = {}
        """Watched tasks seen ended from outside, with the number of sweeps that saw them so."""
        self._cancel_sweep: asyncio.Handle | None = None
        self._stuck_new: dict[str, int] = {}
        """Calls delivered their cancellation again for the first time and not yet in a
        WARNING line, by RPC."""
        self._stuck_warned_at: float | None = None
        self._stuck_flush: asyncio.TimerHandle | None = None
        self._grace_expired = False
        self.stop_reason = STOP_GRACE_EXPIRED
        """Why in-flight streams were ended (:data:`STOP_GRACE_EXPIRED` or
        :data:`STOP_SECOND_SIGNAL`), in their RPC records: ``server shutting down (<reason>)``."""
        self._idle = asyncio.Event()
        self._idle.set()
        self.port: int | None = None
        self.host: str | None = None
        self.socket_path: str | None = None
        """The unix-domain socket listened on, or None on TCP."""
        self.tls = False
        """True when serving TLS."""
        self._owns_socket_dir = False
        self._socket_identity: SocketIdentity | None = None

    # -- hooks for the subclass -----------------------------------------------------------------

    @property
    def prepared(self) -> bool:
        """True once :meth:`prepare` has run successfully."""
        raise NotImplementedError

    async def prepare(self) -> Any:
        """Get ready to serve (called by :meth:`start` when :attr:`prepared` is false)."""
        raise NotImplementedError

    def services(self) -> list[Any]:
        """The grpclib services to serve."""
        raise NotImplementedError

    async def close_provider(self) -> None:
        """Release what :meth:`prepare` acquired; the last step of :meth:`shutdown`."""

    # -- listening ------------------------------------------------------------------------------

    async def start(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        path: str | None = None,
        ssl: SSLContext | None = None,
        owns_socket_dir: bool = False,
        client_certificate: bytes | None = None,
        allow_shared_dir: bool = False,
    ) -> int:
        """Prepare, listen and mark health SERVING.

        Args:
            host: TCP host (ignored with ``path``).
            port: TCP port; 0 picks a free one (ignored with ``path``).
            path: Listen on this unix-domain socket instead; the file gets mode
                :data:`~protocol_py.transport.listen.SOCKET_MODE` and is removed on
                :meth:`shutdown`
                if it is still the file created here. A socket a server listens on is refused
                (``OSError`` EADDRINUSE, "address in use"); a stale one (connect refused) is
                replaced (:func:`~protocol_py.transport.listen.bind_unix_socket`).
            ssl: Serve TLS with this server context (it must accept ALPN ``h2``).
            owns_socket_dir: The socket's private ``protocol-py-*`` directory was made for it:
                remove it too on :meth:`shutdown`.
            client_certificate: DER of the only client certificate accepted (automatic
                mutual TLS): a TLS connection whose verified peer certificate is any other is
                closed before its first HTTP/2 frame is read (:class:`PinnedH2Protocol`).
            allow_shared_dir: Listen on ``path`` even when its directory is writable by other
                users without the sticky bit (one WARNING); by default that is refused with
                ``PermissionError`` (:func:`~protocol_py.transport.listen.check_socket_directory`).

        Returns:
            The bound TCP port (0 on a unix socket).

        Raises:
            ValidationError: invalid Capabilities (the server does not start).
            OSError: the address cannot be bound.
        """
        _compat.install()
        if not self.prepared:
            await self.prepare()
        await asyncio.to_thread(build_codecs)  # not in the first call, on the event loop
        start_workers()  # CPU worker threads started now, not during a large request
        protocols = self._protocols
        receive_timeout, idle_timeout = self.receive_timeout, self.idle_timeout
        handshake_timeout = self.handshake_timeout
        write_timeout = self.write_timeout
        trimmer = self._trimmer
        connection_limit = self.connection_limit
        flood_warnings = RateLimitedWarning(log)  # one flood WARNING per 10 s, server-wide

        class _Server(grpclib.server.Server):
            def _protocol_factory(self) -> H2Protocol:
                protocol = protocol_factory(
                    self,
                    receive_timeout=receive_timeout,
                    idle_timeout=idle_timeout,
                    trimmer=trimmer,
                    handler_class=AdmissionHandler,
                    handshake_timeout=handshake_timeout,
                    connection_limit=connection_limit,
                    flood_warnings=flood_warnings,
                    write_timeout=write_timeout,
                    protocol_class=(
                        functools.partial(PinnedH2Protocol, client_certificate)
                        if client_certificate is not None
                        else TransportProtocol
                    ),
                )
                protocols.add(protocol)
                return protocol

        codec = LimitedCodec(self.max_message_size, self.max_message_size)
        self._server = _Server(self.services(), codec=codec)
        if path is not None:
            self._owns_socket_dir = owns_socket_dir
            # The socket is created owner-only (umask), not made so after a window.
            previous_umask = os.umask(0o777 & ~SOCKET_MODE)
            try:
                # refuses a live server's socket, and a directory others can write
                sock = bind_unix_socket(path, allow_shared_dir=allow_shared_dir)
            finally:
                os.umask(previous_umask)
            try:
                os.chmod(path, SOCKET_MODE)
                self._socket_identity = socket_identity(path)
                await self._listen(sock=sock, ssl=ssl)
            except BaseException:
                sock.close()
                remove_socket(path, identity=self._socket_identity)
                raise
            self.socket_path, self.host, self.port = path, None, 0
        else:
            await self._listen(host=host, port=port, ssl=ssl)
            listener = grpclib_private.listener(self._server)
            assert listener is not None
            sockname = listener.sockets[0].getsockname()  # type: ignore[attr-defined]
            self.host, self.port = str(sockname[0]), int(sockname[1])
        self.tls = ssl is not None
        self.health_status.set(True)
        return self.port

    async def _listen(
        self,
        *,
        host: str | None = None,
        port: int = 0,
        sock: socket.socket | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        """grpclib's ``Server.start``, with the TLS handshake bounded by
        :attr:`handshake_timeout` (grpclib does not pass asyncio's ``ssl_handshake_timeout``,
        whose default is 60 s) and each refused handshake logged to :attr:`tls_refusals`
        (:mod:`protocol_py.transport.tls_accept`)."""
        server = self._server
        assert server is not None and grpclib_private.listener(server) is None
        loop = asyncio.get_running_loop()
        factory = grpclib_private.server_protocol_factory(server)
        if ssl is not None:  # each refused handshake: one rate-limited WARNING
            factory = tls_protocol_factory(factory, ssl, self.handshake_timeout, self.tls_refusals)
        if sock is not None:
            listener = await loop.create_unix_server(factory, sock=sock, backlog=LISTEN_BACKLOG)
        else:
            listener = await loop.create_server(factory, host, port, backlog=LISTEN_BACKLOG)
        grpclib_private.set_listener(server, listener)
        for listening in listener.sockets:  # accept failures back off quietly
            fd = listening.fileno()
            asyncio_accept_backoff.guard(fd, self.connection_limit.accept_exhausted)
            self._guarded_fds.append(fd)

    @property
    def address(self) -> str:
        """``host:port`` the server listens on (IPv6 hosts in brackets), or ``unix:PATH``."""
        if self.socket_path is not None:
            return f"unix:{self.socket_path}"
        host = self.host or DEFAULT_HOST
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    # -- admission and in-flight accounting ----------------------------------------------------

    def check_accepting(self) -> None:
        """Raise UNAVAILABLE ``"server is shutting down"`` once draining has begun."""
        if self.draining:
            raise GRPCError(Status.UNAVAILABLE, "server is shutting down")

    @contextlib.contextmanager
    def in_flight(
        self, cancelled: Callable[[], bool] | None = None
    ) -> Iterator[asyncio.Task[Any] | None]:
        """Count the current task as an in-flight StreamCompletion while the block runs (a
        drain waits for it and cancels it at grace expiry). Yields the task.

        ``cancelled`` tells whether the call has been ended from outside the handler (its
        client, deadline or connection, or a second request message); once it has, or the
        grace period expired, a task still running is cancelled again until it ends
        (:meth:`redelivering`, docs/decisions.md#d46)."""
        self._in_flight += 1
        self._idle.clear()
        task = asyncio.current_task()
        if task is not None:
            self._stream_tasks.add(task)
        try:
            with self.redelivering("StreamCompletion", cancelled or _never):
                yield task
        finally:
            if task is not None:
                self._stream_tasks.discard(task)
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    @contextlib.contextmanager
    def redelivering(self, rpc: str, cancelled: Callable[[], bool]) -> Iterator[None]:
        """While the block runs, the current task (the handler of an ``rpc`` call) is cancelled
        again, at the sweeps :func:`_redelivers` names (1, 2, 4, ... 32 sweeps of
        :data:`CANCEL_REDELIVERY_S` seconds, then every 32), once ``cancelled()`` (its call was
        ended from outside: client reset, deadline, lost connection, a second request
        message) or, for an in-flight StreamCompletion, the grace period expired
        (docs/decisions.md#d46)."""
        task = asyncio.current_task()
        if task is None:
            yield
            return
        self._watched[task] = (rpc, cancelled)
        self._schedule_cancel_sweep()
        try:
            yield
        finally:
            self._watched.pop(task, None)
            self._cancel_seen.pop(task, None)

    def _schedule_cancel_sweep(self) -> None:
        """Start a sweep (:meth:`_sweep_cancelled`) :data:`CANCEL_REDELIVERY_S` from now while
        any watched call runs (one at a time)."""
        if self._cancel_sweep is None and self._watched:
            loop = asyncio.get_running_loop()
            self._cancel_sweep = loop.call_later(CANCEL_REDELIVERY_S, self._start_cancel_sweep)

    def _start_cancel_sweep(self) -> None:
        """Sweep the calls watched now (:meth:`_sweep_cancelled`)."""
        self._sweep_cancelled(list(self._watched))

    def _sweep_cancelled(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Cancel again each of ``tasks`` (the calls watched when the sweep started) that was
        ended from outside (or cut at grace expiry) and is still running 1, 2, 4, ... sweeps
        after the sweep that first found it so (:func:`_redelivers`); the calls cancelled again
        for the first time go into the next WARNING line (:meth:`_report_stuck`). At most
        :data:`CANCEL_SWEEP_SLICE` tasks per loop turn: the rest of the sweep is the next
        turn's."""
        loop = asyncio.get_running_loop()
        for _ in range(min(CANCEL_SWEEP_SLICE, len(tasks))):
            task = tasks.pop()
            watched = self._watched.get(task)
            if watched is None or task.done():
                continue
            rpc, cancelled = watched
            # a cancellation asks for one (``cancelling``); at grace expiry a handler that took
            # its cancellation to send the final error event has taken it back (uncancel)
            ended = task.cancelling() > 0 and (
                (self._grace_expired and task in self._stream_tasks) or cancelled()
            )
            if not ended:
                self._cancel_seen.pop(task, None)
                continue
            sweeps = self._cancel_seen[task] = self._cancel_seen.get(task, 0) + 1
            if not _redelivers(sweeps):
                continue  # the first sweep that sees it, or between growing intervals
            if sweeps == 2:
                self._stuck_new[rpc] = self._stuck_new.get(rpc, 0) + 1
            task.cancel()
        if tasks:
            self._cancel_sweep = loop.call_soon(self._sweep_cancelled, tasks)
            return
        self._cancel_sweep = None
        self._report_stuck()
        self._schedule_cancel_sweep()

    def _report_stuck(self, *, now: bool = False) -> None:
        """One WARNING for the calls delivered their cancellation again for the first time
        since the last one, at most one line per
        :data:`~protocol_py.server.grpc_layer.log_limit.WARNING_INTERVAL` (10 s): calls of a
        sweep within it are counted into the next line, written when the interval ends (or at
        once with ``now``, at shutdown)."""
        if not self._stuck_new:
            return
        clock = time.monotonic()
        last = self._stuck_warned_at
        if not now and last is not None and clock - last < WARNING_INTERVAL:
            if self._stuck_flush is None:
                self._stuck_flush = asyncio.get_running_loop().call_later(
                    last + WARNING_INTERVAL - clock, self._flush_stuck
                )
            return
        if self._stuck_flush is not None:
            self._stuck_flush.cancel()
            self._stuck_flush = None
        counts, self._stuck_new = self._stuck_new, {}
        self._stuck_warned_at = clock
        total = sum(counts.values())
        what = (
            f"{total} {next(iter(counts))} call{'s' if total > 1 else ''}"
            if len(counts) == 1
            else f"{total} calls ({', '.join(f'{rpc} {n}' for rpc, n in sorted(counts.items()))})"
        )
        log.warning(
            "provider %s: %s still ran %g s or more after being cancelled (the provider caught "
            "CancelledError and went on, or its cleanup takes that long); cancelling again "
            "until %s, after %g, %g, %g ... %g s (docs/decisions.md#d46)",
            self.provider_name(),
            what,
            CANCEL_REDELIVERY_S,
            "it ends" if total == 1 else "they end",
            CANCEL_REDELIVERY_S,
            2 * CANCEL_REDELIVERY_S,
            4 * CANCEL_REDELIVERY_S,
            CANCEL_REDELIVERY_S * CANCEL_REDELIVERY_MAX_SWEEPS,
        )

    def _flush_stuck(self) -> None:
        self._stuck_flush = None
        self._report_stuck()

    def calls_still_running(self) -> int:
        """How many ModelService calls are still running (after :meth:`shutdown`: the calls
        of a provider that catches every cancellation, docs/decisions.md#d46)."""
        return sum(not task.done() for task in self._watched)

    def provider_name(self) -> str:
        """The served provider's name, for log lines (subclasses that serve one say it)."""
        return "?"

    # -- shutdown -------------------------------------------------------------------------------

    def mark_draining(self) -> None:
        """Flip health to NOT_SERVING and refuse new calls at once; safe to call from a
        ``signal.signal`` handler. :meth:`shutdown` does the rest."""
        self.draining = True
        self.health_status.mark(False)

    async def shutdown(self, grace_period: float | None = None) -> None:
        """Drain and stop: NOT_SERVING, stop listening, let in-flight completions finish.

        Within ``grace_period`` seconds (default: the constructor's) in-flight
        StreamCompletions may finish; new calls are refused with UNAVAILABLE. Then remaining
        calls, health Watch streams included, are cancelled, every connection is closed (so
        idle clients cannot keep the process alive), and the provider is closed.
        """
        grace = self.grace_period if grace_period is None else grace_period
        self.draining = True
        self.health_status.set(False)
        server = self._server
        listening = grpclib_private.listener(server) if server is not None else None
        if listening is not None:
            listening.close()  # stop accepting connections; keep existing ones
        for fd in self._guarded_fds:
            asyncio_accept_backoff.unguard(fd)
        self._guarded_fds.clear()
        if self._in_flight:
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), timeout=grace)
            if self._in_flight:
                await self._end_in_flight_streams()
            # Let clients read the last messages and trailers before their connection goes
            # (a grpclib client fails every stream it has not finished reading on GOAWAY);
            # after grace expiry the final in-band errors were just sent: linger in full.
            linger = min(SHUTDOWN_LINGER, max(0.0, grace - (time.monotonic() - started)))
            if self._grace_expired:
                linger = SHUTDOWN_LINGER
            await asyncio.sleep(linger)
        if server is not None:
            server.close()  # cancels remaining handlers, including health Watch streams
            await asyncio.sleep(0)
            for protocol in list(self._protocols):
                close_connection(protocol)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
        self._trimmer.cancel()
        self._report_stuck(now=True)
        if self._cancel_sweep is not None and not self._watched:
            self._cancel_sweep.cancel()
            self._cancel_sweep = None
        if self.socket_path is not None:
            remove_socket(
                self.socket_path, owns_dir=self._owns_socket_dir, identity=self._socket_identity
            )
        with contextlib.suppress(Exception):
            await self.close_provider()

    @property
    def grace_expired(self) -> bool:
        """True once the grace period of a shutdown has run out (in-flight streams are then
        being cancelled and end with an in-band "server shutting down" error)."""
        return self._grace_expired

    async def _end_in_flight_streams(self) -> None:
        """Grace period expired: cancel every in-flight StreamCompletion; each one's handler
        closes its provider generator and sends a final in-band ``error`` event (TRANSIENT,
        retryable, "server shutting down") and its trailers where the connection still allows
        (waits at most :data:`FINAL_EVENT_TIMEOUT` seconds for them)."""
        self._grace_expired = True
        for task in list(self._stream_tasks):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout=FINAL_EVENT_TIMEOUT)


STOP_GRACE_EXPIRED: Final = "grace period expired"
""":attr:`ServerLifecycle.stop_reason` when the grace period ran out."""

STOP_SECOND_SIGNAL: Final = "second signal"
""":attr:`ServerLifecycle.stop_reason` when a second SIGTERM/SIGINT cut the grace period short."""


class PinnedH2Protocol(TransportProtocol):
    """grpclib's server connection that accepts only one client certificate (AutoMTLS).

    The SSL context already required a client certificate that verifies against the pinned
    one; this also refuses any other certificate that verifies (one issued by the pinned
    certificate's key, should that be a CA), comparing the DER bytes exactly.
    """

    def __init__(self, certificate: bytes, *args: Any) -> None:
        super().__init__(*args)
        self.pinned_certificate = certificate

    def connection_made(self, transport: BaseTransport) -> None:
        """Set up HTTP/2, then abort at once unless the peer presented the pinned certificate
        (the handler is closed through ``connection_lost``, so nothing is kept)."""
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if peer != self.pinned_certificate:
            log.warning("refused a TLS connection: its client certificate is not the kernel's")
            cast(asyncio.Transport, transport).abort()
