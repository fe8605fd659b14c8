"""Serve a provider with one call: ``protocol_py.serve(MyProvider())``.

:func:`serve` (blocking) and :func:`serve_async` run exactly what ``protocol-py serve`` runs:
the reference gRPC server (:class:`~protocol_py.server.ModelServer`) for one provider, stderr
logging (one JSON line per RPC, see :class:`~protocol_py.server.LogFormatter`), SIGINT/SIGTERM
handling with a grace period for in-flight streams (a second signal stops waiting), and the
optional ``--handshake`` line on stdout so a kernel can launch the plugin as a subprocess
(spec: "The wire protocol")::

    from protocol_py import serve
    from my_package import MyProvider

    serve(MyProvider(), port=0, handshake=True)

Returns after a graceful shutdown. Refused start-up (invalid Capabilities, an address that
cannot be bound, a provider whose ``start`` raised
:class:`~protocol_py.provider.ProviderStartError`) raises :class:`ServeError`; bad arguments raise
:class:`~protocol_py.errors.InvalidValueError` before anything starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, TextIO

from protocol_py import _compat
from protocol_py.errors import InvalidValueError, ProtocolError, ValidationError
from protocol_py.provider import Provider, ProviderStartError
from protocol_py.server import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_MAX_MESSAGE_SIZE,
    LogFormatter,
    ModelServer,
    RecordLimit,
)
from protocol_py.server.go_plugin import GoPluginServices
from protocol_py.server.grpc_layer.connection_limit import (
    CONNECTION_FD_RESERVE,
    default_max_connections,
)
from protocol_py.server.grpc_layer.memory_budget import machine_memory
from protocol_py.server.lifecycle import STOP_SECOND_SIGNAL
from protocol_py.server.log_writer import LogWriter
from protocol_py.server.malloc_arenas import keep_freed_heap, limit_malloc_arenas
from protocol_py.server.offload import SERVE_SWITCH_INTERVAL_S
from protocol_py.server.parent_watch import ParentWatch, watch_parent
from protocol_py.transport import go_plugin as go_plugin_handshake
from protocol_py.transport.go_plugin import NotLaunchedByKernelError, go_plugin_launch
from protocol_py.transport.handshake import (
    EXIT_ON_STDIN_EOF_ENV,
    HANDSHAKE_WRITE_TIMEOUT,
    ORDERLY_STOP,
    HandshakeWriteError,
    handshake_line,
    write_handshake_line,
)
from protocol_py.transport.listen import listen_spec
from protocol_py.transport.tls import CLIENT_CERT_ENV
from protocol_py.version import PROTOCOL_VERSION

__all__ = [
    "DEFAULT_LOG_LEVEL",
    "LOG_LEVELS",
    "ServeError",
    "configure_logging",
    "configure_serve_process",
    "handshake_line",
    "serve",
    "serve_async",
    "watch_stdin_eof",
]

log = logging.getLogger("protocol_py.server")

LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""Accepted ``log_level`` names (case-insensitive)."""

DEFAULT_LOG_LEVEL: Final = "INFO"
"""The log level of :func:`serve` and ``protocol-py serve`` unless told otherwise."""


class ServeError(ProtocolError):
    """The server refused to start: invalid Capabilities (every violation listed) or an
    address that cannot be bound. The message is one line fit for a terminal."""


FRAME_LOGGERS: Final = ("h2", "hpack", "grpclib", "hyperframe")
"""Loggers of the HTTP/2 and gRPC libraries whose DEBUG records are per frame (about 50 lines
per RPC); :func:`configure_logging` holds them at WARNING unless asked for them."""


def configure_logging(
    level: str = DEFAULT_LOG_LEVEL, stream: TextIO | None = None, *, frame_logs: bool = False
) -> None:
    """Send log records to ``stream`` (default stderr) at ``level``, RPC records as bare JSON,
    those of calls not ended ``ok`` bounded by a :class:`~protocol_py.server.RecordLimit`,
    written by a :class:`~protocol_py.server.log_writer.LogWriter` thread (a stream nobody
    reads never blocks the server: lines past a bounded queue are dropped and counted).

    Like :func:`logging.basicConfig`, it does nothing when the root logger already has
    handlers (an application that configured logging keeps its own setup). The loggers of
    :data:`FRAME_LOGGERS` are set to WARNING unless ``frame_logs`` (``--log-http2-frames``) is
    true, so DEBUG shows this package's records and httpx/httpcore's connection records.

    Raises:
        InvalidValueError: ``level`` is not one of :data:`LOG_LEVELS` (rule ``serve.log_level``).
    """
    name = str(level).upper()
    if name not in LOG_LEVELS:
        raise InvalidValueError(
            f"invalid log level {str(level)[:40]!r}: expected one of {', '.join(LOG_LEVELS)}",
            path="log_level",
            rule="serve.log_level",
        )
    if not logging.getLogger().handlers:
        handler = LogWriter(stream or sys.stderr)
        handler.setFormatter(LogFormatter())
        handler.addFilter(RecordLimit())
        logging.basicConfig(level=name, handlers=[handler])
    for logger in FRAME_LOGGERS:
        logging.getLogger(logger).setLevel(logging.NOTSET if frame_logs else logging.WARNING)


def _check_port(port: int) -> None:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        raise InvalidValueError(
            f"invalid port {port!r}: must be an integer in 0..65535 (0 picks a free one)",
            path="port",
            rule="serve.port",
        )


def limits_line(server: ModelServer) -> str:
    """The start-up INFO line giving the bounds in force, defaults resolved: the memory budget
    (MiB, or ``off``), the connection limit and the write timeout (seconds), each with the
    flag that sets it (docs/server.md, "Limits")."""
    budget = server.memory.limit
    memory = "off" if budget is None else f"{budget / 2**20:,.0f} MiB"
    return (
        f"limits: memory budget {memory} (--memory-budget), at most "
        f"{server.connection_limit.maximum:,} connections (--max-connections), write timeout "
        f"{server.write_timeout:g} s (--write-timeout)"
    )


def limit_warnings(
    server: ModelServer, *, memory: int | None = None, soft_nofile: int | None = None
) -> list[str]:
    """Start-up WARNING lines for bounds set past what the machine allows: a memory budget
    over the machine's memory (``memory``, bytes; default
    :func:`~protocol_py.server.grpc_layer.memory_budget.machine_memory`), so it bounds
    nothing, and a connection limit over the soft ``RLIMIT_NOFILE`` (``soft_nofile``; default
    the process's, none when unlimited) less the descriptors kept for upstream connections
    and files, so descriptors run out first (accepting then backs off, docs/decisions.md#d33).
    Nothing is refused: the operator may know better."""
    warnings: list[str] = []
    budget = server.memory.limit
    machine = machine_memory() if memory is None else memory
    if budget is not None and machine is not None and budget > machine:
        warnings.append(
            f"--memory-budget of {budget / 2**20:,.0f} MiB is more than this machine's memory "
            f"({machine / 2**20:,.0f} MiB): it will not bound the server's memory"
        )
    if soft_nofile is None:
        try:
            import resource  # noqa: PLC0415 (POSIX only)
        except ImportError:
            return warnings
        soft_nofile, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_nofile == resource.RLIM_INFINITY:
            return warnings
    room = soft_nofile - CONNECTION_FD_RESERVE
    maximum = server.connection_limit.maximum
    if maximum > room and maximum != default_max_connections(soft_nofile):  # set past it
        warnings.append(
            f"--max-connections {maximum:,} is more than the descriptor limit leaves room for "
            f"(soft RLIMIT_NOFILE {soft_nofile:,}, less {CONNECTION_FD_RESERVE} kept for "
            "upstream connections and files): descriptors run out before the bound is reached"
        )
    return warnings


async def serve_async(
    provider: Provider,
    *,
    host: str | None = None,
    port: int | None = None,
    socket: str | None = None,
    handshake: bool = False,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    allow_insecure_socket_dir: bool = False,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    log_level: str | None = DEFAULT_LOG_LEVEL,
    handle_signals: bool = True,
    stop: asyncio.Event | None = None,
    on_started: Callable[[ModelServer], None] | None = None,
    restore_signals: bool = True,
    handshake_write_timeout: float = HANDSHAKE_WRITE_TIMEOUT,
    **server_options: Any,
) -> None:
    """Serve ``provider`` until SIGINT/SIGTERM (or ``stop`` is set), then drain and return.

    Args:
        provider: The provider to serve.
        host: Bind address (default 127.0.0.1, loopback only).
        port: TCP port (default 50051); 0 picks a free one (read it from the handshake line or
            ``on_started``).
        socket: Listen on this unix-domain socket (mode 0600) instead of TCP.
        handshake: Print the handshake line (``1|tcp|<host>:<port>|grpc``,
            ``1|unix|<path>|grpc``; docs/handshake.md) on stdout once serving. With no
            ``host``, ``port`` or ``socket``: listen on a fresh socket in a private temporary
            directory; with ``PROTOCOL_PY_CLIENT_CERT`` in the environment: automatic mutual
            TLS (:func:`protocol_py.transport.listen.listen_spec`). Launched by a kernel
            built on hashicorp/go-plugin (its variables in the environment,
            :func:`protocol_py.transport.go_plugin.go_plugin_launch`): go-plugin's line and
            environment variables, its services (:mod:`protocol_py.server.go_plugin`;
            ``Shutdown`` drains as SIGTERM does), SIGINT ignored (the kernel stops its
            plugins), and stdin not watched. A kernel's death (:func:`watch_stdin_eof` when
            :data:`EXIT_ON_STDIN_EOF_ENV` is ``1``; and go-plugin's or that one's parent
            process gone, :func:`protocol_py.server.parent_watch.watch_parent`) drains as
            SIGTERM does.
        tls_cert: TLS certificate chain, PEM file (with ``tls_key``).
        tls_key: Its private key, PEM file.
        tls_client_ca: Require client certificates issued by these CAs, PEM file (mutual TLS).
        grace_period: Seconds in-flight StreamCompletions get to finish on shutdown.
        max_message_size: Largest message in either direction, bytes.
        log_level: Configure stderr logging at this level (:func:`configure_logging`); None
            leaves logging as the application set it up.
        handle_signals: Install SIGINT/SIGTERM handlers (main thread only); a first signal
            drains, a second stops waiting for in-flight streams.
        restore_signals: After shutdown, put back the SIGINT/SIGTERM handlers found at start.
            False (what :func:`serve` and ``protocol-py serve`` use): after a graceful
            shutdown (not after a refused start-up) they are set to
            ``SIG_IGN`` instead (kept through interpreter shutdown, and inherited by processes
            started afterwards), so a duplicate signal while the process exits cannot turn its
            status 0 into 143 or 130.
        stop: Set this event to shut down gracefully (as a signal would).
        on_started: Called with the server once it listens (before the handshake line).
        handshake_write_timeout: Longest wait, in seconds, for stdout to take the handshake
            line (:data:`~protocol_py.transport.handshake.HANDSHAKE_WRITE_TIMEOUT`); it is
            written off the event loop, which keeps serving and honours SIGTERM meanwhile
            (:func:`~protocol_py.transport.handshake.write_handshake_line`).
        **server_options: Passed to :class:`~protocol_py.server.ModelServer` unchanged.

    Raises:
        ServeError: invalid Capabilities, the address cannot be bound, the provider's
            ``start`` raised :class:`~protocol_py.provider.ProviderStartError`, or go-plugin's
            variables are set without its magic cookie (nothing is served); or the handshake
            line could not be written (stdout closed, its reader gone, or full for
            ``handshake_write_timeout`` seconds: the server is stopped at once, and the
            message, one line, says which).
        InvalidValueError: an invalid ``port`` or ``log_level``, conflicting listening options
            or an unusable TLS file (``TLSConfigError``).

    Cancelling the task shuts the server down at once (grace period 0) and re-raises.
    """
    _compat.install()
    if port is not None:
        _check_port(port)
    if log_level is not None:
        configure_logging(log_level)
    parent = os.getppid()
    try:
        go_plugin = go_plugin_launch(os.environ) if handshake else None
    except NotLaunchedByKernelError as exc:
        raise ServeError(str(exc)) from None
    if go_plugin is not None:
        host, port, socket = go_plugin.listen_options(host=host, port=port, socket=socket)
    server = ModelServer(
        provider, max_message_size=max_message_size, grace_period=grace_period, **server_options
    )
    listen = listen_spec(
        host=host,
        port=port,
        socket=socket,
        handshake=handshake,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=tls_client_ca,
        client_cert_env=go_plugin_handshake.CLIENT_CERT_ENV if go_plugin else CLIENT_CERT_ENV,
        allow_shared_dir=allow_insecure_socket_dir,
    )
    loop = asyncio.get_running_loop()
    stop_event = stop or asyncio.Event()
    force = asyncio.Event()

    def on_signal() -> None:
        if stop_event.is_set():
            force.set()  # a second signal: stop waiting for in-flight streams
        stop_event.set()

    def handler(signum: int, frame: object) -> None:
        # A plain signal handler runs before the event loop handles anything else, so no
        # health Check can be answered SERVING after the signal arrived (case C04).
        server.mark_draining()
        loop.call_soon_threadsafe(on_signal)

    def ignore_interrupt(signum: int, frame: object) -> None:
        loop.call_soon_threadsafe(
            log.info, "SIGINT ignored: a kernel built on go-plugin stops its plugins itself"
        )

    if go_plugin is not None:
        server.go_plugin = GoPluginServices(on_shutdown=lambda: handler(0, None))
    previous: dict[int, Any] = {}
    stopped = False  # a graceful shutdown completed
    watcher: asyncio.BaseTransport | None = None
    parent_watch: ParentWatch | None = None
    main_thread = threading.current_thread() is threading.main_thread()
    if handle_signals and main_thread:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        if go_plugin is not None:
            signal.signal(signal.SIGINT, ignore_interrupt)
    try:
        try:
            await listen.start(server)
        except ValidationError as exc:
            raise ServeError(f"refusing to start: {exc}") from None
        except ProviderStartError as exc:
            raise ServeError(str(exc)) from None
        except OSError as exc:
            raise ServeError(
                f"cannot listen on {listen.describe()}: {exc.strerror or exc}"
            ) from None
        log.info("serving %s on %s (protocol %s)", provider.name, server.address, PROTOCOL_VERSION)
        log.info("%s", limits_line(server))
        for warning in limit_warnings(server):
            log.warning("%s", warning)
        if on_started is not None:
            on_started(server)
        launched = handshake and os.environ.get(EXIT_ON_STDIN_EOF_ENV) == "1"
        if launched or go_plugin is not None:  # watching from before the line is printed
            parent_watch = watch_parent(
                lambda: handler(0, None),
                parent=parent,
                use_signal=handle_signals and main_thread,
            )
            log.info("watching the launching kernel (pid %d): %s", parent, parent_watch.method)
        line: str | None = None
        if go_plugin is not None:
            _log_go_plugin(go_plugin)
            line = go_plugin.handshake_line(server, listen.server_certificate)
        elif handshake:
            line = handshake_line(server, listen.server_certificate)
        if line is not None:
            await _announce(line, server, stop_event, handshake_write_timeout)
        if launched and go_plugin is None:  # go-plugin passes the kernel's own stdin
            watcher = await watch_stdin_eof(lambda: handler(0, None))
        try:
            await stop_event.wait()
        except asyncio.CancelledError:
            server.mark_draining()
            await server.shutdown(grace_period=0)
            raise
        await _drain(server, force)
        stopped = True
    finally:
        if watcher is not None:
            watcher.close()
        if parent_watch is not None:
            parent_watch.close()
        for sig, old in previous.items():
            # Restoring SIG_DFL would let a late duplicate signal (coreutils ``timeout`` signals
            # the child and its group) kill the process while it exits 0: ignore it instead.
            # SIG_IGN, not a Python handler: interpreter shutdown resets those to SIG_DFL.
            signal.signal(sig, signal.SIG_IGN if stopped and not restore_signals else old)
        listen.discard()


async def _announce(
    line: str, server: ModelServer, stop: asyncio.Event, write_timeout: float
) -> None:
    """Write the handshake line to stdout off the loop, waiting at most ``write_timeout`` s; a
    stop (SIGTERM) meanwhile abandons the write and lets the drain proceed.

    Raises:
        ServeError: the line could not be written (the server has been stopped).
    """
    writing = asyncio.ensure_future(
        write_handshake_line(line, sys.stdout, write_timeout=write_timeout)
    )
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({writing, stopping}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the serving task was cancelled: stop writing too
        writing.cancel()
        raise
    finally:
        stopping.cancel()
    if not writing.done():
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError, HandshakeWriteError):
            await writing
        log.info("stopping before the handshake line was written (stdout did not take it)")
        return
    try:
        writing.result()
    except HandshakeWriteError as exc:
        server.mark_draining()
        await server.shutdown(grace_period=0)
        raise ServeError(str(exc)) from None


def _log_go_plugin(launch: go_plugin_handshake.GoPluginLaunch) -> None:
    """Log what a go-plugin kernel asked for and the version answered."""
    offered = ",".join(map(str, launch.kernel_versions)) or "none"
    if launch.shared_versions:
        log.info(
            "launched by a kernel built on hashicorp/go-plugin: protocol version %d (the "
            "kernel offered %s)",
            launch.app_version,
            offered,
        )
    else:
        log.warning(
            "launched by a kernel built on hashicorp/go-plugin offering protocol versions %s; "
            "this plugin speaks %s: announcing %d, which the kernel will refuse",
            offered,
            ",".join(map(str, go_plugin_handshake.SUPPORTED_MAJORS)),
            launch.app_version,
        )


class _EndOfInput(asyncio.Protocol):
    """Calls ``on_eof`` once when the pipe it reads reaches end of file. What it reads is
    dropped, except that :data:`ORDERLY_STOP` before the end of file marks the close as an
    orderly one (the kernel's :meth:`~protocol_py.transport.launch.LaunchedPlugin.close`);
    at most :data:`ORDERLY_STOP`'s length of bytes is kept."""

    def __init__(self, on_eof: Callable[[], None]) -> None:
        self._on_eof: Callable[[], None] | None = on_eof
        self.received = b""
        self.orderly = False

    def data_received(self, data: bytes) -> None:
        """Keep the first bytes, to recognise :data:`ORDERLY_STOP`."""
        self.received = (self.received + data)[: len(ORDERLY_STOP)]
        self.orderly = self.received == ORDERLY_STOP

    def eof_received(self) -> bool:
        """The write end was closed: the kernel is gone."""
        self._fire()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The pipe broke: as end of file."""
        self._fire()

    def _fire(self) -> None:
        on_eof, self._on_eof = self._on_eof, None
        if on_eof is not None:
            on_eof()


async def watch_stdin_eof(on_eof: Callable[[], None]) -> asyncio.BaseTransport | None:
    """Call ``on_eof`` when stdin, a pipe, reaches end of file (the launching kernel exited or
    was killed: every write end is closed); docs/security.md, "Launch hardening". Returns the
    pipe's transport (close it to stop watching), or None when stdin is not a pipe (nothing is
    watched).

    :func:`serve_async` does this with ``handshake`` when :data:`EXIT_ON_STDIN_EOF_ENV` is
    ``1`` (set by :func:`protocol_py.transport.launch.launch`), and treats end of file as
    SIGTERM."""
    try:
        if not stat.S_ISFIFO(os.fstat(0).st_mode):
            return None
    except OSError:
        return None
    pipe = os.fdopen(os.dup(0), "rb", buffering=0)
    loop = asyncio.get_running_loop()

    watcher: _EndOfInput

    def fire() -> None:
        if watcher.orderly:
            log.info("the launching kernel closed the plugin: orderly shutdown")
        else:
            log.info("stdin closed: the launching kernel is gone; shutting down")
        on_eof()

    watcher = _EndOfInput(fire)
    transport, _ = await loop.connect_read_pipe(lambda: watcher, pipe)
    return transport


async def _drain(server: ModelServer, force: asyncio.Event) -> None:
    """Shut down within the grace period, or at once when ``force`` is set meanwhile."""
    log.info("shutting down (draining)")
    shutdown = asyncio.ensure_future(server.shutdown())
    forced = asyncio.ensure_future(force.wait())
    done, _ = await asyncio.wait({shutdown, forced}, return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if shutdown not in done:
        shutdown.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await shutdown
        server.stop_reason = STOP_SECOND_SIGNAL
        await server.shutdown(grace_period=0)
    running = server.calls_still_running()
    if running:
        log.warning(
            "stopped, but %d call(s) still run: their provider catches every cancellation "
            "(docs/decisions.md#d46); the process exits when they end",
            running,
        )
    else:
        log.info("stopped")


def configure_serve_process() -> None:
    """The process-wide settings :func:`serve` (``protocol-py serve``) makes before serving:
    the process's glibc malloc arenas are limited
    (:func:`~protocol_py.server.malloc_arenas.limit_malloc_arenas`), its freed heap is kept
    for the next turn (:func:`~protocol_py.server.malloc_arenas.keep_freed_heap`,
    docs/decisions.md#d45) and its thread switch
    interval is set to :data:`~protocol_py.server.offload.SERVE_SWITCH_INTERVAL_S`
    (docs/decisions.md#d38). Process-wide, so never made on import: for a program whose
    whole process is a server it starts itself (a benchmark's server process, say), to run
    as ``protocol-py serve`` does; call it before any thread starts."""
    limit_malloc_arenas()
    keep_freed_heap()
    sys.setswitchinterval(SERVE_SWITCH_INTERVAL_S)


def serve(
    provider: Provider,
    *,
    host: str | None = None,
    port: int | None = None,
    socket: str | None = None,
    handshake: bool = False,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    allow_insecure_socket_dir: bool = False,
    grace_period: float = DEFAULT_GRACE_PERIOD,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    log_level: str | None = DEFAULT_LOG_LEVEL,
    **server_options: Any,
) -> None:
    """Serve ``provider`` in a new event loop until SIGINT/SIGTERM; blocks, returns after a
    graceful shutdown. Arguments and errors as :func:`serve_async` (``protocol-py serve`` is
    this call), with ``restore_signals=False``: after it returns, SIGINT and SIGTERM are
    ignored (``SIG_IGN``; the process is expected to exit, and a second signal must not kill
    it). The process is first set up as :func:`configure_serve_process` says."""
    configure_serve_process()
    asyncio.run(
        serve_async(
            provider,
            host=host,
            port=port,
            socket=socket,
            handshake=handshake,
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_client_ca=tls_client_ca,
            allow_insecure_socket_dir=allow_insecure_socket_dir,
            grace_period=grace_period,
            max_message_size=max_message_size,
            log_level=log_level,
            restore_signals=False,
            **server_options,
        )
    )
