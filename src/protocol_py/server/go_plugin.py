"""What a kernel built on hashicorp/go-plugin calls besides ModelService (docs/handshake.md).

Served only when go-plugin launched the server
(:func:`protocol_py.transport.go_plugin.go_plugin_launch`; :attr:`ModelServer.go_plugin
<protocol_py.server.handlers.ModelServer.go_plugin>`):

* gRPC health for the service name :data:`HEALTH_SERVICE_NAME` (``plugin``, what go-plugin's
  ``Ping`` checks): the server's own status, SERVING while serving, NOT_SERVING once draining.
* ``plugin.GRPCController/Shutdown`` (go-plugin's ``Kill``): answered with an empty message,
  then the server drains exactly as on SIGTERM (in-flight StreamCompletions get the grace
  period, the socket and its private directory are removed, the provider is closed) and
  ``serve`` returns, so the process exits 0.
* ``plugin.GRPCBroker/StartStream`` (opened by every go-plugin client at connect): accepted
  and idle. Messages the kernel sends on it (offers of kernel-side services) are read and
  dropped, one INFO line per stream: this plugin dials no kernel service and offers none. It
  ends when the kernel ends it or the server stops.
* ``plugin.GRPCStdio/StreamStdio`` (opened at connect by go-plugin >= 1.1): accepted and idle;
  nothing is ever sent (the plugin writes its logs to stderr, which go-plugin reads itself).
  It ends when the server stops.

The messages are go-plugin's (its package ``plugin``): ``Empty`` (no fields), ``ConnInfo``
(``service_id`` 1 uint32, ``network`` 2 string, ``address`` 3 string, ``knock`` 4 message)
and ``StdioData`` (``channel`` 1 enum, ``data`` 2 bytes). This server never reads a field of
any of them and sends only the empty message, so they are the opaque classes below rather than
generated code: they are go-plugin's contract, not this protocol's, and ``proto/`` holds only
the model protocol's packages (buf lint would also refuse an unversioned package ``plugin``).
Requests are bounded by :data:`MAX_GO_PLUGIN_MESSAGE_BYTES` (unary) and by the server's
message size (the broker stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import grpclib.const
import grpclib.server
from grpclib.const import Cardinality

from protocol_py.server.grpc_layer.cardinality import receive_single

log = logging.getLogger("protocol_py.server")

HEALTH_SERVICE_NAME: Final = "plugin"
"""The health service name go-plugin's ``Ping`` checks (``plugin.GRPCServiceName``)."""

SHUTDOWN_METHOD: Final = "/plugin.GRPCController/Shutdown"
"""go-plugin's stop request."""

BROKER_METHOD: Final = "/plugin.GRPCBroker/StartStream"
"""go-plugin's broker stream (bidirectional ``ConnInfo``)."""

STDIO_METHOD: Final = "/plugin.GRPCStdio/StreamStdio"
"""go-plugin's stdio stream (``Empty`` in, ``StdioData`` out)."""

MAX_GO_PLUGIN_MESSAGE_BYTES: Final = 64 * 1024
"""Largest request message of ``Shutdown`` and ``StreamStdio`` (both ``Empty``), bytes."""


class OpaqueMessage:
    """A go-plugin message whose fields this server never reads: decoding keeps only its
    size in bytes; encoding gives the empty message (all fields unset)."""

    __slots__ = ("size",)

    def __init__(self, size: int = 0) -> None:
        self.size = size

    @classmethod
    def FromString(cls, data: bytes) -> OpaqueMessage:  # noqa: N802  (protobuf's codec API)
        """The message of ``data`` (only its length is kept)."""
        return cls(len(data))

    def SerializeToString(self) -> bytes:  # noqa: N802  (protobuf's codec API)
        """The empty message's encoding: no bytes."""
        return b""


class Empty(OpaqueMessage):
    """go-plugin's ``plugin.Empty`` (and ``google.protobuf.Empty``)."""


class ConnInfo(OpaqueMessage):
    """go-plugin's ``plugin.ConnInfo`` (read and dropped)."""


class StdioData(OpaqueMessage):
    """go-plugin's ``plugin.StdioData`` (never sent)."""


class HealthName:
    """A health-check key for :class:`grpclib.health.service.Health` naming a service that is
    not a grpclib service (``plugin``): grpclib takes the name from the first method path."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __mapping__(self) -> dict[str, Any]:
        """One pseudo path ``/<name>/`` (never served)."""
        return {f"/{self.name}/": None}


class GoPluginServices:
    """go-plugin's controller, broker and stdio services (see the module docstring), one
    grpclib service object.

    Args:
        on_shutdown: Called once per ``Shutdown`` call, after its reply was written: start a
            graceful shutdown (:func:`protocol_py.server.serve.serve_async` treats it as
            SIGTERM). Must not block.
    """

    def __init__(self, on_shutdown: Callable[[], None]) -> None:
        self.on_shutdown = on_shutdown
        self.health_key = HealthName(HEALTH_SERVICE_NAME)

    def __mapping__(self) -> dict[str, grpclib.const.Handler]:
        """The three method paths."""
        return {
            SHUTDOWN_METHOD: grpclib.const.Handler(
                self.shutdown, Cardinality.UNARY_UNARY, Empty, Empty
            ),
            BROKER_METHOD: grpclib.const.Handler(
                self.start_stream, Cardinality.STREAM_STREAM, ConnInfo, ConnInfo
            ),
            STDIO_METHOD: grpclib.const.Handler(
                self.stream_stdio, Cardinality.UNARY_STREAM, Empty, StdioData
            ),
        }

    async def shutdown(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        """``Shutdown``: reply with ``Empty`` and OK, then call ``on_shutdown``."""
        await receive_single(stream, MAX_GO_PLUGIN_MESSAGE_BYTES)
        log.info("the kernel asked this plugin to stop (go-plugin Shutdown); draining")
        await stream.send_message(Empty())
        await stream.send_trailing_metadata()
        self.on_shutdown()

    async def start_stream(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        """``StartStream``: read and drop the kernel's messages until it ends the stream."""
        dropped = 0
        async for _ in stream:
            dropped += 1
            if dropped == 1:
                log.info(
                    "go-plugin broker: dropped a service offer from the kernel (this plugin "
                    "dials no kernel services)"
                )
        await stream.send_trailing_metadata()

    async def stream_stdio(self, stream: grpclib.server.Stream[Any, Any]) -> None:
        """``StreamStdio``: read the request, send nothing, stay open until the server
        stops (the call is cancelled then)."""
        await receive_single(stream, MAX_GO_PLUGIN_MESSAGE_BYTES)
        await asyncio.get_running_loop().create_future()  # never resolved: cancelled on stop


__all__ = [
    "BROKER_METHOD",
    "HEALTH_SERVICE_NAME",
    "MAX_GO_PLUGIN_MESSAGE_BYTES",
    "SHUTDOWN_METHOD",
    "STDIO_METHOD",
    "ConnInfo",
    "Empty",
    "GoPluginServices",
    "HealthName",
    "OpaqueMessage",
    "StdioData",
]
