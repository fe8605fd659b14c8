"""A call grpclib refuses before dispatch (unknown method or service) is a valid Trailers-Only
response: it carries ``content-type: application/grpc`` (grpclib 0.2.3 to at least 0.4.9).

gRPC over HTTP/2 (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md, "Responses")
writes a response that is only a status as ``HTTP-Status Content-Type Trailers`` in one
HEADERS frame. grpclib's handler-side statuses were fixed that way
(https://github.com/vmagamedov/grpclib/issues/70), but the statuses ``grpclib.server``
answers before any handler runs go through its ``_abort`` helper, which writes ``:status``,
``grpc-status`` and ``grpc-message`` only: an unknown method or service (UNIMPLEMENTED, "Method
not found"), and the refusals of :mod:`protocol_py.server.grpc_layer.admission`. grpcio reads
the status anyway; grpc-go refuses a response without a gRPC content type and reports
``Unknown: OK: HTTP status code 200; transport: missing content-type field``, so a Go kernel
could not tell a method this plugin lacks from a broken plugin.

:func:`install` wraps ``_abort``: a response with HTTP status 200 and a gRPC status is written
as ``:status``, ``content-type`` :data:`CONTENT_TYPE`, ``grpc-status`` and ``grpc-message``
(percent-encoded, as grpclib encodes its other status messages), then the stream is reset as
before when it is still open; the HTTP-level refusals (405, 415, 400: not a gRPC request at
all) go to grpclib's ``_abort`` unchanged. Installed by :func:`protocol_py._compat.install`
(with the other patches, when the server starts), and only when grpclib still has the shape it
was written for (an ``_abort(h2_stream, h2_status, grpc_status, grpc_message)`` coroutine in
``grpclib.server``); otherwise nothing changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final

import grpclib.server as _server
from grpclib.metadata import encode_grpc_message

__all__ = ["CONTENT_TYPE", "install"]

CONTENT_TYPE: Final = "application/grpc"
"""The content type of a Trailers-Only response (grpc-go and grpcio accept it)."""

_PARAMETERS: Final = ("h2_stream", "h2_status", "grpc_status", "grpc_message")
_MARK: Final = "_protocol_py_content_type"


def install() -> bool:
    """Wrap ``grpclib.server._abort`` so its gRPC statuses carry :data:`CONTENT_TYPE`
    (idempotent).

    Returns:
        True when installed (now or before); False when grpclib's shape differs (then nothing
        is changed).
    """
    abort: Callable[..., Awaitable[None]] | None = getattr(_server, "_abort", None)
    if abort is None or not inspect.iscoroutinefunction(abort):
        return False
    if getattr(abort, _MARK, False):
        return True
    if tuple(inspect.signature(abort).parameters) != _PARAMETERS:
        return False
    original = abort

    async def abort_with_content_type(
        h2_stream: Any,
        h2_status: int,
        grpc_status: Any = None,
        grpc_message: str | None = None,
    ) -> None:
        if h2_status != 200 or grpc_status is None:
            await original(h2_stream, h2_status, grpc_status, grpc_message)
            return
        headers = [
            (":status", "200"),
            ("content-type", CONTENT_TYPE),
            ("grpc-status", str(grpc_status.value)),
        ]
        if grpc_message is not None:
            headers.append(("grpc-message", encode_grpc_message(grpc_message)))
        await h2_stream.send_headers(headers, end_stream=True)
        if h2_stream.closable:
            h2_stream.reset_nowait()

    setattr(abort_with_content_type, _MARK, True)
    _server._abort = abort_with_content_type
    return True
