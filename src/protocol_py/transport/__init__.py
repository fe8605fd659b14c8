"""Where and how a plugin server listens, how the kernel learns it, TLS, and launching a plugin.

:mod:`~protocol_py.transport.addresses` (addresses and their checks),
:mod:`~protocol_py.transport.listen` (binding and listening, unix socket modes),
:mod:`~protocol_py.transport.handshake` (the handshake line), :mod:`~protocol_py.transport.tls`
and :mod:`~protocol_py.transport.launch`. The command-line option helpers re-exported here
(:func:`add_serve_options`, :func:`add_client_options`, :func:`client_ssl_from_options`) live in
:mod:`protocol_py.cli.options` and are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from protocol_py.transport.addresses import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    MAX_UNIX_PATH_BYTES,
    check_socket_path,
    unix_socket_path,
)
from protocol_py.transport.handshake import (
    EXIT_ON_STDIN_EOF_ENV,
    HANDSHAKE_PROTOCOL,
    LOOPBACK_NAMES,
    MAX_HANDSHAKE_LINE_BYTES,
    Handshake,
    format_handshake,
    handshake_line,
    parse_handshake,
)
from protocol_py.transport.listen import (
    PRIVATE_DIR_MODE,
    PRIVATE_DIR_PREFIX,
    SOCKET_MODE,
    SOCKET_NAME,
    STALE_PROBE_TIMEOUT,
    ListenSpec,
    SocketIdentity,
    bind_unix_socket,
    is_private_socket_dir,
    listen_spec,
    make_private_socket_path,
    remove_socket,
    socket_identity,
)

if TYPE_CHECKING:
    from protocol_py.cli.options import (
        add_client_options,
        add_serve_options,
        client_ssl_from_options,
    )

_CLI_OPTIONS = frozenset({"add_client_options", "add_serve_options", "client_ssl_from_options"})
"""Names imported from :mod:`protocol_py.cli.options` on first use (importing the command line
eagerly would load the server with it)."""


def __getattr__(name: str) -> Any:
    if name not in _CLI_OPTIONS:
        raise AttributeError(f"module 'protocol_py.transport' has no attribute {name!r}")
    value = getattr(importlib.import_module("protocol_py.cli.options"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "EXIT_ON_STDIN_EOF_ENV",
    "HANDSHAKE_PROTOCOL",
    "LOOPBACK_NAMES",
    "MAX_HANDSHAKE_LINE_BYTES",
    "MAX_UNIX_PATH_BYTES",
    "PRIVATE_DIR_MODE",
    "PRIVATE_DIR_PREFIX",
    "SOCKET_MODE",
    "SOCKET_NAME",
    "STALE_PROBE_TIMEOUT",
    "Handshake",
    "ListenSpec",
    "SocketIdentity",
    "add_client_options",
    "add_serve_options",
    "bind_unix_socket",
    "check_socket_path",
    "client_ssl_from_options",
    "format_handshake",
    "handshake_line",
    "is_private_socket_dir",
    "listen_spec",
    "make_private_socket_path",
    "parse_handshake",
    "remove_socket",
    "socket_identity",
    "unix_socket_path",
]
