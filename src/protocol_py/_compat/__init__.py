"""Every change protocol-py makes to a dependency, in one place.

Each patch is one module named for the dependency and what it fixes. :func:`install` installs
them all; the client (:class:`~protocol_py.client.client.ModelClient` construction) and the
server (:func:`protocol_py.server.serve.serve_async` and
:meth:`~protocol_py.server.lifecycle.ServerLifecycle.start`) call it, so importing the package
changes nothing. A patch checks the shape of what it replaces and leaves a dependency whose
shape differs untouched (its ``install`` then returns False).

========================================  ==========  ==============  ==========================
Patch                                     Dependency  Versions        Upstream
========================================  ==========  ==============  ==========================
``grpclib_goaway``                        grpclib     >=0.4.9,<0.5    none filed
``grpclib_closed_connection``             grpclib     >=0.4.9,<0.5    vmagamedov/grpclib#110,
                                                                      #185
``grpclib_unimplemented_content_type``    grpclib     >=0.2.3,<0.5    vmagamedov/grpclib#70
``grpclib_timeout_header``                grpclib     >=0.4.9,<0.5    none filed
``grpclib_small_data``                    grpclib     >=0.4.9,<0.5    none filed
``grpclib_cancel_once``                   grpclib     >=0.4.9,<0.5    none filed
``hyperframe_frame_repr``                 hyperframe  >=6.1,<7        none filed
``httpx_response_cycle``                  httpx       >=0.28,<0.29    encode/httpx#3733
``h2_refused_stream``                     h2          >=4.1,<5        none filed
``asyncio_accept_backoff``                CPython     >=3.11,<3.14    python/cpython#151615
========================================  ==========  ==============  ==========================

:data:`PATCHES` holds the full rows: the symptom each patch fixes, the upstream report and when
the patch can be deleted. Reads of grpclib's private attributes (no patch: nothing is
replaced) go through :mod:`protocol_py._compat.grpclib_private`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from protocol_py._compat import (
    asyncio_accept_backoff,
    grpclib_cancel_once,
    grpclib_closed_connection,
    grpclib_goaway,
    grpclib_small_data,
    grpclib_timeout_header,
    grpclib_unimplemented_content_type,
    h2_refused_stream,
    httpx_response_cycle,
    hyperframe_frame_repr,
)


@dataclass(frozen=True, slots=True)
class Patch:
    """One patch of a dependency.

    Attributes:
        module: The patch's module in this package.
        dependency: The distribution it patches.
        versions: The versions it was checked against (a PEP 440 specifier).
        symptom: What goes wrong without it.
        upstream: The upstream issue URL(s), or ``"none filed"``.
        delete_when: When the patch can go.
        install: Installs it (idempotent); True when installed, False when the dependency's
            shape differs (nothing changed).
    """

    module: str
    dependency: str
    versions: str
    symptom: str
    upstream: str
    delete_when: str
    install: Callable[[], bool]


PATCHES: Final[tuple[Patch, ...]] = (
    Patch(
        module="grpclib_goaway",
        dependency="grpclib",
        versions=">=0.4.9,<0.5",
        symptom="a server shutting down (HTTP/2 GOAWAY, NO_ERROR) is reported to the client as "
        "'Connection lost': the transport's connection_lost fails the streams again after the "
        "GOAWAY did, and the last reason wins",
        upstream="none filed",
        delete_when="a grpclib release keeps the GOAWAY as the reason of every stream it ends "
        "(EventsProcessor.close called after process_connection_terminated)",
        install=grpclib_goaway.install,
    ),
    Patch(
        module="grpclib_closed_connection",
        dependency="grpclib",
        versions=">=0.4.9,<0.5",
        symptom="a stream opened on a connection the peer just closed raises AttributeError "
        "'_transport' (Connection.create_stream reads the transport close() deleted) instead "
        "of StreamTerminatedError",
        upstream="https://github.com/vmagamedov/grpclib/issues/110 (the same AttributeError, "
        "server side), https://github.com/vmagamedov/grpclib/issues/185 (client side, the "
        "server closing the connection); create_stream is unguarded in 0.4.9",
        delete_when="Connection.create_stream raises StreamTerminatedError on a closed "
        "connection (it checks for the transport)",
        install=grpclib_closed_connection.install,
    ),
    Patch(
        module="grpclib_unimplemented_content_type",
        dependency="grpclib",
        versions=">=0.2.3,<0.5",
        symptom="a status grpclib answers before dispatch (unknown method or service: "
        "UNIMPLEMENTED; a refused grpc-timeout) has no content-type header, so grpc-go reports "
        "'Unknown: OK: HTTP status code 200; transport: missing content-type field' instead "
        "of the status",
        upstream="https://github.com/vmagamedov/grpclib/issues/70 (Trailers-Only responses "
        "need content-type: fixed for handler statuses, not for grpclib.server._abort, "
        "unchanged from 0.2.3 through 0.4.9)",
        delete_when="grpclib.server._abort writes content-type: application/grpc with a "
        "gRPC status",
        install=grpclib_unimplemented_content_type.install,
    ),
    Patch(
        module="grpclib_timeout_header",
        dependency="grpclib",
        versions=">=0.4.9,<0.5",
        symptom="a client timeout over 10 s is sent as whole seconds rounded down (10.9 s as "
        "'10S'), so the server's deadline passes up to a second before the client's and the "
        "call ends with the server's DEADLINE_EXCEEDED status instead of the client's "
        "TimeoutError",
        upstream="none filed",
        delete_when="grpclib.metadata.encode_timeout never rounds a timeout down (rounds up, "
        "in the finest unit that fits 8 digits)",
        install=grpclib_timeout_header.install,
    ),
    Patch(
        module="grpclib_small_data",
        dependency="grpclib",
        versions=">=0.4.9,<0.5",
        symptom="every DATA frame a stream receives is held as its own objects (about 430 "
        "bytes whatever its payload) until the body is read, outside the memory budget: a "
        "body sent one byte per frame took 1.7 GB of RSS for 3.9 MB",
        upstream="none filed",
        delete_when="grpclib's stream Buffer stores received payloads as bytes (one buffer), "
        "not one queued tuple per frame",
        install=grpclib_small_data.install,
    ),
    Patch(
        module="grpclib_cancel_once",
        dependency="grpclib",
        versions=">=0.4.9,<0.5",
        symptom="a call ended from outside is cancelled again by every later cause (a deadline, "
        "then the client's reset; a cancel, then the connection closing, milliseconds apart), "
        "so a provider's finally that awaits the close of its upstream is cut at once, and the "
        "call's recorded cause becomes the last one instead of the first",
        upstream="none filed",
        delete_when="grpclib's Wrapper.cancel leaves an already cancelled wrapper as it is",
        install=grpclib_cancel_once.install,
    ),
    Patch(
        module="hyperframe_frame_repr",
        dependency="hyperframe",
        versions=">=6.1,<7",
        symptom="every received DATA frame is serialized and hex-encoded whole for a trace log "
        "line nobody reads (h2's _receive_frame formats repr(frame) eagerly): about 1.5 ms of "
        "the event loop per 1 MB request",
        upstream="none filed",
        delete_when="hyperframe's DataFrame repr stops serializing the whole body, or h2 "
        "formats received frames only when its logger traces",
        install=hyperframe_frame_repr.install,
    ),
    Patch(
        module="httpx_response_cycle",
        dependency="httpx",
        versions=">=0.28,<0.29",
        symptom="a streamed response and its stream hold each other, so the response, its "
        "request and the request body (about 1.1 MB for a 601-message turn) wait for the "
        "cyclic collector, which the server pauses and freezes around large jobs: under "
        "steady large turns RSS grew by the vendor body every turn until an idle second",
        upstream="https://github.com/encode/httpx/pull/3733 (a weak reference to the "
        "response; open), https://github.com/encode/httpx/issues/3734",
        delete_when="httpx's BoundAsyncStream and BoundSyncStream no longer hold a strong "
        "reference to their response",
        install=httpx_response_cycle.install,
    ),
    Patch(
        module="h2_refused_stream",
        dependency="h2",
        versions=">=4.1,<5",
        symptom="a peer's stream over SETTINGS_MAX_CONCURRENT_STREAMS ends the whole connection "
        "and every stream on it (GOAWAY PROTOCOL_ERROR): h2 raises TooManyStreamsError before "
        "decoding the header block, where RFC 9113 section 5.1.2 makes it a stream error",
        upstream="none filed",
        delete_when="h2 refuses a stream over the limit with RST_STREAM (decoding its header "
        "block) instead of raising a connection error",
        install=h2_refused_stream.install,
    ),
    Patch(
        module="asyncio_accept_backoff",
        dependency="CPython",
        versions=">=3.11,<3.14",
        symptom="a listening socket whose accept() fails with EMFILE, ENFILE, ENOBUFS or ENOMEM "
        "keeps looping after backing off: up to backlog (100) six-line 'socket.accept() out "
        "of system resource' tracebacks and as many restarts per readable event, tens of "
        "thousands of lines a second at the descriptor limit",
        upstream="https://github.com/python/cpython/issues/151615 (fixed by "
        "https://github.com/python/cpython/pull/151616: the loop returns after the first "
        "failure; the fixed delay and the traceback per failure stay)",
        delete_when="never for the rate-limited WARNING and growing delay; the loop fix is "
        "upstream from the first CPython release carrying python/cpython#151616",
        install=asyncio_accept_backoff.install,
    ),
)
"""Every patch of a dependency: the table above, with symptoms and when to delete each."""

_installed: dict[str, bool] = {}
"""The result of the first :func:`install` (empty before it)."""

log = logging.getLogger("protocol_py")


def install() -> dict[str, bool]:
    """Install every patch of :data:`PATCHES` (idempotent; after the first call it only
    returns the first call's result).

    Returns:
        Patch module name -> whether it is installed (False: the dependency's shape differs
        from the versions checked, nothing was changed; logged once at DEBUG).
    """
    if not _installed:
        for patch in PATCHES:
            _installed[patch.module] = installed = patch.install()
            if not installed:
                log.debug(
                    "dependency patch %s not installed: its target's shape differs", patch.module
                )
    return dict(_installed)


__all__ = ["PATCHES", "Patch", "install"]
