"""Calls refused before dispatch: an invalid or already-expired ``grpc-timeout``.

grpclib answers both itself, before any handler runs: an unparsable ``grpc-timeout`` as
``UNKNOWN "Invalid grpc-timeout header"`` and a deadline already past (``1n``, ``1u``, an
expired propagated deadline) as ``UNKNOWN "Internal Server Error"`` with an ERROR traceback
("Timeout occurred"), and no per-RPC log record. :class:`AdmissionHandler`
checks the header first: ``INVALID_ARGUMENT`` for a malformed value, ``DEADLINE_EXCEEDED`` for
a deadline less than :data:`MIN_USABLE_DEADLINE` away, each with exactly one JSON log record
(:class:`~protocol_py.server.records.RpcRecord`) for a ModelService method and no traceback.
Every other call goes to grpclib unchanged. (gRPC over HTTP/2: ``grpc-timeout`` is
``1*8DIGIT unit``, units ``H M S m u n``.)
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Collection
from typing import Any, Final

from grpclib.const import Status
from grpclib.metadata import decode_timeout

from protocol_py._compat import grpclib_private
from protocol_py.bounded_text import quote_value
from protocol_py.server.grpc_layer.connections import TransportHandler
from protocol_py.server.grpc_layer.progress import cancel_reason
from protocol_py.server.records import RpcRecord

MIN_USABLE_DEADLINE: Final = 0.001
"""A call whose deadline is less than this many seconds away when it arrives is answered
DEADLINE_EXCEEDED at once (it could not even be dispatched in time)."""

MODEL_SERVICE_PREFIX: Final = "/model.v1.ModelService/"
"""``:path`` prefix of the ModelService methods, which get a per-RPC log record."""


def refusal(headers: Collection[tuple[str, str]]) -> tuple[Status, str] | None:
    """The status for a call whose ``grpc-timeout`` header is malformed or (nearly) expired,
    else None.

    Returns:
        ``(INVALID_ARGUMENT, "grpc-timeout: ...")`` for a value that is not ``1*8DIGIT`` and a
        unit (the value is quoted, capped); ``(DEADLINE_EXCEEDED, "deadline exceeded before
        the call was dispatched ...")`` for a timeout below :data:`MIN_USABLE_DEADLINE`.
    """
    values = [v for k, v in headers if k == "grpc-timeout"]
    if not values:
        return None
    timeouts: list[float] = []
    for value in values:
        try:
            timeouts.append(decode_timeout(value))
        except ValueError:
            return (
                Status.INVALID_ARGUMENT,
                f"grpc-timeout: invalid value {quote_value(value)} (expected up to 8 digits "
                "and a unit H, M, S, m, u or n)",
            )
        if len(value) > 9:
            return (
                Status.INVALID_ARGUMENT,
                f"grpc-timeout: invalid value {quote_value(value)} (at most 8 digits)",
            )
    timeout = min(timeouts)
    if timeout < MIN_USABLE_DEADLINE:
        return (
            Status.DEADLINE_EXCEEDED,
            f"deadline exceeded before the call was dispatched (grpc-timeout of {timeout:g} s)",
        )
    return None


class AdmissionHandler(TransportHandler):
    """The server's connection handler
    (:class:`~protocol_py.server.grpc_layer.connections.TransportHandler`),
    answering :func:`refusal`'s calls itself.

    It also logs the one record of a ModelService call reset by the client before its
    handler task ever ran (the handler, which otherwise logs it, never starts then).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._paths: dict[Any, str] = {}

    def __gc_collect__(self) -> None:
        super().__gc_collect__()
        self._paths = {s: p for s, p in self._paths.items() if s in self._tasks}

    def accept(
        self,
        stream: Any,
        headers: list[tuple[str, str]],
        release_stream: Callable[[], Any],
    ) -> None:
        """Dispatch the call, or answer it with :func:`refusal`'s status."""
        path = dict(headers).get(":path", "")
        refused = refusal(headers) if path in self.mapping else None
        if refused is None:
            super().accept(stream, headers, release_stream)
            if path.startswith(MODEL_SERVICE_PREFIX) and path in self.mapping:
                self._paths[stream] = path
                # forget the finished call's stream at once (not at grpclib's next GC step)
                task = grpclib_private.handler_tasks(self)[stream]
                task.add_done_callback(lambda _: self._paths.pop(stream, None))
            return
        self.__gc_step__()
        grpclib_private.handler_tasks(self)[stream] = self.loop.create_task(
            _refuse(stream, path, refused, release_stream)
        )

    def cancel(self, stream: Any) -> None:
        """Cancel the call's task (grpclib); log its record if its handler never started."""
        task = grpclib_private.handler_tasks(self).get(stream)
        path = self._paths.pop(stream, None)
        super().cancel(stream)
        if (
            task is not None
            and path is not None
            and inspect.getcoroutinestate(task.get_coro()) == inspect.CORO_CREATED  # type: ignore[arg-type]
        ):
            record = RpcRecord(rpc=path.removeprefix(MODEL_SERVICE_PREFIX))
            record.outcome = "cancelled"
            record.detail = cancel_reason(stream)
            record.emit()


async def _refuse(
    stream: Any, path: str, refused: tuple[Status, str], release_stream: Callable[[], Any]
) -> None:
    status, message = refused
    record = None
    if path.startswith(MODEL_SERVICE_PREFIX):
        record = RpcRecord(rpc=path.removeprefix(MODEL_SERVICE_PREFIX))
        record.outcome = "deadline_exceeded" if status == Status.DEADLINE_EXCEEDED else "error"
        record.error_kind = status.name
        record.detail = message
    try:
        with contextlib.suppress(Exception):
            await grpclib_private.abort(stream, status, message)
    finally:
        release_stream()
        if record is not None:
            record.emit()


__all__ = [
    "MIN_USABLE_DEADLINE",
    "MODEL_SERVICE_PREFIX",
    "AdmissionHandler",
    "refusal",
]
