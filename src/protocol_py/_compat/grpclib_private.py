"""Named reads (and the few writes) of grpclib's private attributes, in one place.

The reference server and the client reach past grpclib's public API where it leaves a job to
the application: bulk reads and writes of stream messages, flow control, the one-request
check, receive and idle timeouts, listening with a bounded TLS handshake. Every private name
they use is read here, through an accessor named for what it gives, so an upgrade of grpclib
is checked against this one module (and ``tests/compat/test_grpclib_private.py``, which
exercises every accessor on live grpclib objects).

Each accessor is registered in :data:`CHECKED` with the grpclib versions it was checked
against (:data:`GRPCLIB_WINDOW`, the dependency range ``pyproject.toml`` pins). Objects are
typed ``Any``: grpclib's private attributes carry no public types.

Besides these reads, two grpclib classes are subclassed at private hooks:
``grpclib.server.Server._protocol_factory`` is overridden by
:meth:`protocol_py.server.lifecycle.ServerLifecycle.start`, and
``grpclib.server.Handler``'s task table (:func:`handler_tasks`, :func:`handler_cancelled`) is
kept by :class:`protocol_py.server.grpc_layer.connections.TransportHandler`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, TypeVar

import grpclib.events
import grpclib.server
from grpclib.const import Status

GRPCLIB_WINDOW: Final = ">=0.4.9,<0.5"
"""The grpclib releases the accessors were checked against: the range ``pyproject.toml`` pins
(checked on 0.4.9, its only release in the range so far)."""

CHECKED: Final[dict[str, str]] = {}
"""Accessor name -> the grpclib version window it was checked against."""

_F = TypeVar("_F", bound=Callable[..., Any])


def _checked(window: str) -> Callable[[_F], _F]:
    """Register the decorated accessor in :data:`CHECKED` (the function itself is returned:
    no call overhead)."""

    def register(accessor: _F) -> _F:
        CHECKED[accessor.__name__] = window
        return accessor

    return register


NO_LISTENER: Final[Callable[..., Any]] = grpclib.events._ident
"""What grpclib's event dispatcher calls for an event no listener was registered for
(``grpclib.events._ident``): a dispatch method that ``is`` it can be skipped."""
CHECKED["NO_LISTENER"] = GRPCLIB_WINDOW


# -- a client call (grpclib.client.Stream) ------------------------------------------------------


@_checked(GRPCLIB_WINDOW)
def call_h2_stream(call: Any) -> Any:
    """The HTTP/2 stream (``grpclib.protocol.Stream``) of a client call."""
    return call._stream


@_checked(GRPCLIB_WINDOW)
def call_initial_metadata_received(call: Any) -> bool:
    """Whether the client call has received the response headers."""
    done: bool = call._recv_initial_metadata_done
    return done


@_checked(GRPCLIB_WINDOW)
def call_wrapper(call: Any) -> Any:
    """The call's cancellation wrapper (a context manager: the deadline, a lost connection)."""
    return call._wrapper


@_checked(GRPCLIB_WINDOW)
def call_recv_dispatch(call: Any) -> Callable[..., Any]:
    """The call's ``RecvMessage`` dispatch (:data:`NO_LISTENER` when none listens)."""
    dispatch: Callable[..., Any] = call._dispatch.recv_message
    return dispatch


@_checked(GRPCLIB_WINDOW)
def call_codec(call: Any) -> Any:
    """The codec that decodes the call's response messages."""
    return call._codec


@_checked(GRPCLIB_WINDOW)
def call_recv_type(call: Any) -> type[Any]:
    """The response message class of the call."""
    recv_type: type[Any] = call._recv_type
    return recv_type


@_checked(GRPCLIB_WINDOW)
def count_messages_received(call: Any, count: int) -> None:
    """Add ``count`` to the call's received-message counter (as ``recv_message`` does)."""
    call._messages_received += count


# -- a server call (grpclib.server.Stream) ------------------------------------------------------


@_checked(GRPCLIB_WINDOW)
def server_h2_stream(stream: Any) -> Any:
    """The HTTP/2 stream (``grpclib.protocol.Stream``) of a server call."""
    return stream._stream


@_checked(GRPCLIB_WINDOW)
def server_method_name(stream: Any) -> str:
    """The call's method path (``/package.Service/Method``), or ``""`` when unknown."""
    method: str = getattr(stream, "_method_name", "") or ""
    return method


@_checked(GRPCLIB_WINDOW)
def server_initial_metadata_sent(stream: Any) -> bool:
    """Whether the server call has sent its response headers."""
    done: bool = stream._send_initial_metadata_done
    return done


@_checked(GRPCLIB_WINDOW)
def server_send_dispatch(stream: Any) -> Callable[..., Any]:
    """The call's ``SendMessage`` dispatch (:data:`NO_LISTENER` when none listens)."""
    dispatch: Callable[..., Any] = stream._dispatch.send_message
    return dispatch


@_checked(GRPCLIB_WINDOW)
def server_codec(stream: Any) -> Any:
    """The codec that encodes the call's response messages."""
    return stream._codec


@_checked(GRPCLIB_WINDOW)
def server_send_type(stream: Any) -> type[Any]:
    """The response message class of the call."""
    send_type: type[Any] = stream._send_type
    return send_type


@_checked(GRPCLIB_WINDOW)
def count_message_sent(stream: Any) -> None:
    """Add one to the call's sent-message counter (as ``send_message`` does)."""
    stream._messages_sent += 1


@_checked(GRPCLIB_WINDOW)
async def abort(stream: Any, status: Status, message: str) -> None:
    """Answer a call before dispatch with HTTP 200 and ``status``/``message`` in the headers
    (``grpclib.server._abort``, what grpclib does for an unknown method)."""
    await grpclib.server._abort(stream, 200, status, message)


# -- an HTTP/2 stream (grpclib.protocol.Stream) and its receive buffer --------------------------


@_checked(GRPCLIB_WINDOW)
def h2_connection(raw: Any) -> Any:
    """The h2 ``H2Connection`` state machine an HTTP/2 stream writes to."""
    return raw._h2_connection


@_checked(GRPCLIB_WINDOW)
def h2_transport(raw: Any) -> Any:
    """The asyncio transport an HTTP/2 stream writes to."""
    return raw._transport


@_checked(GRPCLIB_WINDOW)
def wrapper_error(wrapper: Any) -> BaseException | None:
    """The exception a cancellation wrapper ended its call with, or None."""
    error: BaseException | None = getattr(wrapper, "_error", None)
    return error


@_checked(GRPCLIB_WINDOW)
def buffer_ended(buffer: Any) -> bool:
    """Whether the receive buffer has seen END_STREAM."""
    ended: bool = buffer._eof
    return ended


@_checked(GRPCLIB_WINDOW)
def buffer_unacked(buffer: Any) -> asyncio.Queue[Any]:
    """The buffer's queue of received DATA not yet taken: ``(data, data_size, ack_size)``
    items; ``(b"", 0, 0)`` marks END_STREAM."""
    queue: asyncio.Queue[Any] = buffer._unacked
    return queue


@_checked(GRPCLIB_WINDOW)
def buffer_acked(buffer: Any) -> Any:
    """The buffer's deque of taken (acknowledged) but unread chunks, ``(data, size)``."""
    return buffer._acked


@_checked(GRPCLIB_WINDOW)
def buffer_acked_size(buffer: Any) -> int:
    """Bytes taken (acknowledged) from the buffer but not yet read."""
    size: int = buffer._acked_size
    return size


@_checked(GRPCLIB_WINDOW)
def buffer_ack(buffer: Any, size: int) -> None:
    """Acknowledge ``size`` bytes taken from the buffer (a WINDOW_UPDATE to the peer)."""
    buffer._ack_callback(size)


@_checked(GRPCLIB_WINDOW)
def queued_items(queue: asyncio.Queue[Any]) -> Any:
    """The items of an asyncio queue, without taking them (its ``_queue`` deque; the queue
    is the one :func:`buffer_unacked` returns)."""
    return queue._queue  # type: ignore[attr-defined]


@_checked(GRPCLIB_WINDOW)
def queue_has_getters(queue: asyncio.Queue[Any]) -> bool:
    """Whether a task waits on the asyncio queue (True when that cannot be told)."""
    return bool(getattr(queue, "_getters", True))


# -- a connection (grpclib.protocol.Connection) -------------------------------------------------


@_checked(GRPCLIB_WINDOW)
def connection_h2(connection: Any) -> Any:
    """The h2 ``H2Connection`` state machine of a grpclib connection."""
    return connection._connection


@_checked(GRPCLIB_WINDOW)
def connection_transport(connection: Any) -> Any:
    """The asyncio transport of a grpclib connection (gone once it closed)."""
    return connection._transport


@_checked(GRPCLIB_WINDOW)
def connection_closed(connection: Any) -> bool:
    """True once grpclib closed the connection: ``Connection.close`` drops its transport and
    the h2 state machine's frame dispatch table, so no byte may be fed to h2 any more."""
    return not hasattr(connection, "_transport")


# -- a server (grpclib.server.Server) and its per-connection handler ----------------------------


@_checked(GRPCLIB_WINDOW)
def handler_arguments(server: grpclib.server.Server) -> tuple[Any, Any, Any, Any]:
    """``(mapping, codec, status_details_codec, dispatch)``: what grpclib passes to each
    connection's ``Handler``."""
    return (
        server._mapping,
        server._codec,
        server._status_details_codec,
        server.__dispatch__,
    )


@_checked(GRPCLIB_WINDOW)
def add_handler(server: grpclib.server.Server, handler: Any) -> None:
    """Register a connection's handler with the server (closed with it), after one step of
    the server's periodic sweep of finished handlers, as grpclib does."""
    server.__gc_step__()
    server._handlers.add(handler)


@_checked(GRPCLIB_WINDOW)
def protocol_configurations(server: grpclib.server.Server) -> tuple[Any, Any]:
    """``(config, h2_config)``: grpclib's and h2's configuration of each connection."""
    return server._config, server._h2_config


@_checked(GRPCLIB_WINDOW)
def server_protocol_factory(server: grpclib.server.Server) -> Callable[[], Any]:
    """The server's per-connection protocol factory."""
    factory: Callable[[], Any] = server._protocol_factory
    return factory


@_checked(GRPCLIB_WINDOW)
def listener(server: grpclib.server.Server) -> asyncio.AbstractServer | None:
    """The asyncio server grpclib listens with, or None before it starts."""
    current: asyncio.AbstractServer | None = server._server
    return current


@_checked(GRPCLIB_WINDOW)
def set_listener(server: grpclib.server.Server, listening: asyncio.AbstractServer) -> None:
    """Make ``listening`` the server's listener, as grpclib's ``Server.start`` does (with the
    future its ``wait_closed`` awaits)."""
    server._server = listening
    server._server_closed_fut = asyncio.get_running_loop().create_future()


@_checked(GRPCLIB_WINDOW)
def handler_tasks(handler: Any) -> dict[Any, asyncio.Task[None]]:
    """A connection handler's tasks by HTTP/2 stream (the calls it runs)."""
    tasks: dict[Any, asyncio.Task[None]] = handler._tasks
    return tasks


@_checked(GRPCLIB_WINDOW)
def handler_cancelled(handler: Any) -> set[asyncio.Task[None]]:
    """A connection handler's cancelled tasks not yet finished."""
    cancelled: set[asyncio.Task[None]] = handler._cancelled
    return cancelled


__all__ = [
    "CHECKED",
    "GRPCLIB_WINDOW",
    "NO_LISTENER",
    "abort",
    "add_handler",
    "buffer_ack",
    "buffer_acked",
    "buffer_acked_size",
    "buffer_ended",
    "buffer_unacked",
    "call_codec",
    "call_h2_stream",
    "call_initial_metadata_received",
    "call_recv_dispatch",
    "call_recv_type",
    "call_wrapper",
    "connection_closed",
    "connection_h2",
    "connection_transport",
    "count_message_sent",
    "count_messages_received",
    "h2_connection",
    "h2_transport",
    "handler_arguments",
    "handler_cancelled",
    "handler_tasks",
    "listener",
    "protocol_configurations",
    "queue_has_getters",
    "queued_items",
    "server_codec",
    "server_h2_stream",
    "server_initial_metadata_sent",
    "server_method_name",
    "server_protocol_factory",
    "server_send_dispatch",
    "server_send_type",
    "set_listener",
    "wrapper_error",
]
