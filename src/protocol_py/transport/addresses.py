"""Plugin addresses: ``host:port`` over TCP or a unix-domain socket, and the checks on them.

* TCP: ``host:port`` (:func:`protocol_py.client.client.parse_address`), by default
  :data:`DEFAULT_HOST` (loopback) and :data:`DEFAULT_PORT`.
* Unix-domain sockets, in grpcio's spelling: ``unix:PATH`` or ``unix:///ABSOLUTE/PATH``
  (:func:`unix_socket_path`); a path is at most :data:`MAX_UNIX_PATH_BYTES` bytes and holds no
  NUL (:func:`check_socket_path`).

Listening on an address is :mod:`protocol_py.transport.listen`; announcing it to a kernel is
:mod:`protocol_py.transport.handshake`.
"""

from __future__ import annotations

import os
from typing import Final

from protocol_py.errors import InvalidValueError

DEFAULT_HOST: Final = "127.0.0.1"
"""Default listening host: loopback only."""

DEFAULT_PORT: Final = 50051
"""Default listening TCP port."""

MAX_UNIX_PATH_BYTES: Final = 107
"""Longest unix-domain socket path, bytes of its file-system encoding (Linux ``sun_path`` holds
108 bytes including the terminating NUL)."""

_ECHO_LIMIT: Final = 200
"""Characters of caller text an error message quotes at most."""


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _ECHO_LIMIT else text[: _ECHO_LIMIT - 3] + "..."


def check_socket_path(path: str, what: str = "socket path") -> str:
    """Check a unix-domain socket path: not empty, no NUL, at most :data:`MAX_UNIX_PATH_BYTES`.

    Returns:
        ``path`` unchanged.

    Raises:
        InvalidValueError: the path breaks one of those rules (``what`` names it).
    """
    if not path:
        raise InvalidValueError(f"{what}: empty path", rule="address.unix.empty")
    if "\x00" in path:
        raise InvalidValueError(f"{what}: NUL character in {_quote(path)}", rule="address.unix.nul")
    size = len(os.fsencode(path))
    if size > MAX_UNIX_PATH_BYTES:
        raise InvalidValueError(
            f"{what}: {size} bytes, more than the {MAX_UNIX_PATH_BYTES} a unix socket path may "
            f"have: {_quote(path)}",
            rule="address.unix.length",
        )
    return path


def unix_socket_path(address: str) -> str | None:
    """The socket path of a ``unix:`` address, or None for any other address.

    ``unix:PATH`` (relative or absolute) and ``unix:///ABSOLUTE/PATH`` are grpcio's spellings;
    ``unix://HOST/...`` (an authority) and ``unix-abstract:`` are refused.

    Raises:
        InvalidValueError: a ``unix:`` address with an authority, or a bad path
            (:func:`check_socket_path`).
    """
    if not isinstance(address, str):
        return None
    text = address.strip()
    if text.startswith("unix-abstract:"):
        raise InvalidValueError(
            f"invalid address {_quote(address)}: abstract unix sockets are not supported",
            rule="address.unix.abstract",
        )
    if not text.startswith("unix:"):
        return None
    rest = text[len("unix:") :]
    if rest.startswith("//"):
        if not rest.startswith("///"):
            raise InvalidValueError(
                f"invalid address {_quote(address)}: write unix:///absolute/path or unix:path",
                rule="address.unix.authority",
            )
        rest = rest[2:]
    return check_socket_path(rest, f"invalid address {_quote(address)}")


__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_UNIX_PATH_BYTES",
    "check_socket_path",
    "unix_socket_path",
]
