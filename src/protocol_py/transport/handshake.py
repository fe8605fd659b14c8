"""The handshake line: how a plugin serving with ``--handshake`` tells the kernel its address.

The plugin prints one line on stdout once it serves (:func:`format_handshake`,
:func:`handshake_line`); the kernel reads and checks it (:func:`parse_handshake`)::

    1|tcp|127.0.0.1:50051|grpc
    1|unix|/tmp/protocol-py-abc123/plugin.sock|grpc
    1|unix|/tmp/protocol-py-abc123/plugin.sock|grpc|MIIBszCCAVmgAwIBAgI...

Fields are positional and separated by ``|``: handshake version (the protocol major,
:data:`~protocol_py.version.PROTOCOL_MAJOR`), transport (``tcp`` or ``unix``), address
(``host:port`` or the socket's absolute path), protocol (``grpc``) and, under AutoMTLS, the
server's certificate as DER in standard base64 without ``=`` padding (RFC 4648 section 4
alphabet, as hashicorp/go-plugin writes it; :func:`parse_handshake` accepts it padded too).
New fields are only ever appended; a kernel ignores fields it does not know; a change that
an older kernel could misread bumps the first field.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from dataclasses import dataclass
from typing import Any, Final

from protocol_py.errors import InvalidValueError
from protocol_py.transport.addresses import _quote, check_socket_path
from protocol_py.version import PROTOCOL_MAJOR

MAX_HANDSHAKE_LINE_BYTES: Final = 16 * 1024
"""Longest handshake line :func:`parse_handshake` accepts, bytes (a P-256 certificate is about
0.7 KiB in base64)."""

EXIT_ON_STDIN_EOF_ENV: Final = "PROTOCOL_PY_EXIT_ON_STDIN_EOF"
"""Environment variable :func:`protocol_py.transport.launch.launch` sets to ``1``: a plugin serving
with
``--handshake`` whose stdin is a pipe then shuts down (as on SIGTERM) when that pipe reaches
end of file, i.e. when the launching kernel is gone, even killed with SIGKILL."""

HANDSHAKE_PROTOCOL: Final = "grpc"
"""The fourth handshake field: the RPC protocol."""


@dataclass(frozen=True, slots=True)
class Handshake:
    """A parsed handshake line.

    Attributes:
        version: The first field (the protocol major).
        transport: ``tcp`` or ``unix``.
        address: ``host:port`` or the socket path.
        protocol: ``grpc``.
        server_certificate: DER bytes of the AutoMTLS server certificate, or None.
        extra: Fields after the known ones (ignored, kept for diagnostics).
        layout: ``"protocol-py"`` (the module docstring's layout) or ``"go-plugin"``
            (hashicorp/go-plugin's, :mod:`protocol_py.transport.go_plugin`; ``version`` is then
            its APP field).
    """

    version: int
    transport: str
    address: str
    protocol: str
    server_certificate: bytes | None
    extra: tuple[str, ...] = ()
    layout: str = "protocol-py"

    @property
    def target(self) -> str:
        """The address for :meth:`protocol_py.client.client.ModelClient.connect`."""
        return f"unix:{self.address}" if self.transport == "unix" else self.address


def format_handshake(transport: str, address: str, server_certificate: bytes | None = None) -> str:
    """The handshake line, newline-terminated (see the module docstring).

    Raises:
        InvalidValueError: an unknown transport, or an address containing ``|`` or a newline.
    """
    if transport not in ("tcp", "unix"):
        raise InvalidValueError(
            f"handshake transport must be 'tcp' or 'unix', got {_quote(transport)}",
            rule="handshake.transport",
        )
    if any(ch in address for ch in "|\r\n"):
        raise InvalidValueError(
            f"handshake address may not contain '|' or a newline: {_quote(address)}",
            rule="handshake.address",
        )
    fields = [str(PROTOCOL_MAJOR), transport, address, HANDSHAKE_PROTOCOL]
    if server_certificate is not None:
        fields.append(base64.b64encode(server_certificate).decode("ascii").rstrip("="))
    return "|".join(fields) + "\n"


def handshake_line(server: Any, server_certificate: bytes | None = None) -> str:
    """The handshake line of a started server (its ``socket_path`` or ``address``)."""
    path = getattr(server, "socket_path", None)
    if path is not None:
        return format_handshake("unix", str(path), server_certificate)
    return format_handshake("tcp", str(server.address), server_certificate)


LOOPBACK_NAMES: Final = frozenset({"localhost"})
"""Host names a TCP handshake address may use besides loopback IP addresses (127.0.0.0/8,
::1)."""


def _check_handshake_address(transport: str, address: str, field: int = 3) -> None:
    """A TCP address must be ``host:port`` on loopback; a unix address an absolute path
    (``field``: the address's position in the line, for the message)."""
    where = f"handshake address (field {field})"
    if transport == "unix":
        if not address.startswith("/"):
            raise InvalidValueError(
                f"{where}: a unix socket must be an absolute path, got {_quote(address)}",
                rule="handshake.address",
            )
        check_socket_path(address, where)
        return
    host, colon, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    valid_port = port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536
    if not colon or not host or not valid_port:
        raise InvalidValueError(
            f"{where}: expected host:port, got {_quote(address)}", rule="handshake.address"
        )
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host.lower() in LOOPBACK_NAMES
    if not loopback:
        raise InvalidValueError(
            f"{where}: a plugin must listen on loopback (127.0.0.1, ::1 or localhost), got "
            f"{_quote(address)}",
            rule="handshake.address",
        )


def _decode_certificate(text: str) -> bytes | None:
    """A certificate field: DER from standard base64, padded or not; None when empty.

    Raises:
        InvalidValueError: not standard base64 (rule ``handshake.cert``).
    """
    if not text:
        return None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidValueError(
            "handshake server certificate is not standard base64", rule="handshake.cert"
        ) from None


def parse_handshake(line: str) -> Handshake:
    """Parse a handshake line (the kernel side).

    Raises:
        InvalidValueError: longer than :data:`MAX_HANDSHAKE_LINE_BYTES`, fewer than four
            fields, a version other than :data:`~protocol_py.version.PROTOCOL_MAJOR`, an
            unknown transport or protocol, an address that is not ``host:port`` on loopback
            (TCP) or an absolute path (unix) (rule ``handshake.address``), or a certificate
            field that is not base64.
    """
    if len(line.encode("utf-8", "replace")) > MAX_HANDSHAKE_LINE_BYTES:
        raise InvalidValueError(
            f"handshake line longer than {MAX_HANDSHAKE_LINE_BYTES} bytes",
            rule="handshake.length",
        )
    fields = line.rstrip("\r\n").split("|")
    if len(fields) < 4:
        raise InvalidValueError(
            f"handshake line has {len(fields)} fields, expected at least 4: {_quote(line)}",
            rule="handshake.fields",
        )
    version, transport, address, protocol = fields[:4]
    if version != str(PROTOCOL_MAJOR):
        raise InvalidValueError(
            f"handshake version {_quote(version)} is not {PROTOCOL_MAJOR}",
            rule="handshake.version",
        )
    if transport not in ("tcp", "unix"):
        raise InvalidValueError(
            f"handshake transport {_quote(transport)} is not tcp or unix",
            rule="handshake.transport",
        )
    if protocol != HANDSHAKE_PROTOCOL:
        raise InvalidValueError(
            f"handshake protocol {_quote(protocol)} is not {HANDSHAKE_PROTOCOL}",
            rule="handshake.protocol",
        )
    _check_handshake_address(transport, address)
    certificate = _decode_certificate(fields[4]) if len(fields) > 4 else None
    return Handshake(
        version=int(version),
        transport=transport,
        address=address,
        protocol=protocol,
        server_certificate=certificate,
        extra=tuple(fields[5:]),
    )


__all__ = [
    "EXIT_ON_STDIN_EOF_ENV",
    "HANDSHAKE_PROTOCOL",
    "LOOPBACK_NAMES",
    "MAX_HANDSHAKE_LINE_BYTES",
    "Handshake",
    "format_handshake",
    "handshake_line",
    "parse_handshake",
]
