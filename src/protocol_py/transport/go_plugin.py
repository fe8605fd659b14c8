"""hashicorp/go-plugin's handshake: a Go kernel built on go-plugin launches ``serve --handshake``.

A kernel built on go-plugin (https://github.com/hashicorp/go-plugin; the layout below is the
same from 1.0 through 1.8) starts its plugin with ``plugin.NewClient(&plugin.ClientConfig{
HandshakeConfig: ..., AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC}, AutoMTLS: true,
Cmd: exec.Command("protocol-py", "serve", "--handshake")})`` and reads one line of its own
layout on the plugin's stdout (docs/handshake.md)::

    1|1|unix|/tmp/protocol-py-k2j4/plugin.sock|grpc|
    1|1|tcp|127.0.0.1:10000|grpc|MIIBszCCAVmgAwIBAgI...

Fields, separated by ``|``: CORE, go-plugin's own protocol (:data:`CORE_PROTOCOL_VERSION`);
APP, the application protocol version (:meth:`GoPluginLaunch.app_version`: the highest protocol
major this plugin speaks among the kernel's ``PLUGIN_PROTOCOL_VERSIONS``); NETWORK, ``unix`` or
``tcp``; ADDRESS, the socket's absolute path or ``host:port``; PROTOCOL, ``grpc``; CERT, empty
without AutoMTLS, otherwise the server certificate's DER in standard base64 without ``=``
padding. A seventh field ``false`` follows only when the kernel set :data:`MULTIPLEX_ENV`
(go-plugin >= 1.6 asks whether the plugin multiplexes its broker; this one does not).

**go-plugin mode.** ``serve --handshake`` whose environment has :data:`PROTOCOL_VERSIONS_ENV`
or :data:`MAGIC_COOKIE_KEY` (go-plugin always sets both) was launched by go-plugin
(:func:`go_plugin_launch`); otherwise it prints this package's own line
(:func:`protocol_py.transport.handshake.format_handshake`), as
:func:`protocol_py.transport.launch.launch` expects, which removes every variable of
:data:`GO_PLUGIN_ENV` from its plugin's environment. The published handshake config for Go
kernels: ``ProtocolVersion`` :data:`HANDSHAKE_PROTOCOL_VERSION`, ``MagicCookieKey``
:data:`MAGIC_COOKIE_KEY`, ``MagicCookieValue`` :data:`MAGIC_COOKIE_VALUE`; a plugin started in
go-plugin mode without that cookie refuses to start (:class:`NotLaunchedByKernelError`).

**Environment variables** (set by go-plugin; each value bounded by
:data:`MAX_ENV_VALUE_CHARS`):

* :data:`PROTOCOL_VERSIONS_ENV`: comma-separated decimal versions the kernel speaks.
* :data:`MAGIC_COOKIE_KEY`: must equal :data:`MAGIC_COOKIE_VALUE`.
* :data:`CLIENT_CERT_ENV`: the kernel's PEM certificate; AutoMTLS exactly as
  ``PROTOCOL_PY_CLIENT_CERT`` (:func:`protocol_py.transport.listen.listen_spec`).
* :data:`UNIX_SOCKET_DIR_ENV`: the socket is created in this directory (a file
  ``plugin-<random>.sock``, removed on shutdown; the directory is the kernel's) instead of a
  private ``protocol-py-*`` directory under ``$TMPDIR``.
* :data:`UNIX_SOCKET_GROUP_ENV`: refused (the socket stays owner-only, mode 0600).
* :data:`MIN_PORT_ENV`, :data:`MAX_PORT_ENV`: the TCP ports to choose from when the plugin
  serves TCP (``--host`` without ``--port``): the first free one, as go-plugin's own plugins
  do; ``--port`` wins.
* :data:`MULTIPLEX_ENV`: answered with the seventh field ``false``.

The kernel side: :func:`parse_handshake_line` reads both layouts.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocol_py.errors import InvalidValueError, ProtocolError
from protocol_py.transport.addresses import _quote, check_socket_path
from protocol_py.transport.handshake import (
    HANDSHAKE_PROTOCOL,
    MAX_HANDSHAKE_LINE_BYTES,
    Handshake,
    _check_handshake_address,
    _decode_certificate,
    handshake_line,
    parse_handshake,
)
from protocol_py.version import PROTOCOL_MAJOR

CORE_PROTOCOL_VERSION: Final = 1
"""The first field: go-plugin's core protocol version (``plugin.CoreProtocolVersion``)."""

HANDSHAKE_PROTOCOL_VERSION: Final = PROTOCOL_MAJOR
"""``ProtocolVersion`` of the handshake config a Go kernel publishes: the protocol major."""

MAGIC_COOKIE_KEY: Final = "MODEL_PLUGIN_MAGIC_COOKIE"
"""``MagicCookieKey`` of the handshake config a Go kernel publishes."""

MAGIC_COOKIE_VALUE: Final = "model.v1.ModelService"
"""``MagicCookieValue`` of the handshake config a Go kernel publishes."""

SUPPORTED_MAJORS: Final = (PROTOCOL_MAJOR,)
"""Protocol majors this plugin speaks: the APP versions it can announce."""

PROTOCOL_VERSIONS_ENV: Final = "PLUGIN_PROTOCOL_VERSIONS"
"""The versions the kernel speaks, comma-separated decimal integers."""

CLIENT_CERT_ENV: Final = "PLUGIN_CLIENT_CERT"
"""go-plugin's AutoMTLS: the kernel's PEM client certificate."""

UNIX_SOCKET_DIR_ENV: Final = "PLUGIN_UNIX_SOCKET_DIR"
"""The directory to create the unix socket in (go-plugin >= 1.5)."""

UNIX_SOCKET_GROUP_ENV: Final = "PLUGIN_UNIX_SOCKET_GROUP"
"""A group to give the socket to (go-plugin >= 1.5); refused here."""

MIN_PORT_ENV: Final = "PLUGIN_MIN_PORT"
"""Lowest TCP port the plugin may listen on (go-plugin sets 10000 by default)."""

MAX_PORT_ENV: Final = "PLUGIN_MAX_PORT"
"""Highest TCP port the plugin may listen on (go-plugin sets 25000 by default)."""

MULTIPLEX_ENV: Final = "PLUGIN_MULTIPLEX_GRPC"
"""Set by go-plugin >= 1.6 when the kernel wants its broker multiplexed over the connection."""

GO_PLUGIN_ENV: Final = (
    MAGIC_COOKIE_KEY,
    PROTOCOL_VERSIONS_ENV,
    CLIENT_CERT_ENV,
    UNIX_SOCKET_DIR_ENV,
    UNIX_SOCKET_GROUP_ENV,
    MIN_PORT_ENV,
    MAX_PORT_ENV,
    MULTIPLEX_ENV,
)
"""Every variable go-plugin sets for its plugin (removed by
:func:`protocol_py.transport.launch.launch`, whose plugin must print this package's layout)."""

MAX_ENV_VALUE_CHARS: Final = 1024
"""Longest value accepted from any of the variables but :data:`CLIENT_CERT_ENV` (bounded by
:data:`protocol_py.transport.tls.MAX_CERT_PEM_BYTES`), characters."""

SOCKET_FILE_PREFIX: Final = "plugin-"
"""Name prefix of a socket created in :data:`UNIX_SOCKET_DIR_ENV` (``plugin-<12 hex>.sock``)."""

LAYOUT: Final = "go-plugin"
""":attr:`~protocol_py.transport.handshake.Handshake.layout` of a go-plugin line."""

_TRANSPORTS: Final = ("tcp", "unix")


class NotLaunchedByKernelError(ProtocolError):
    """go-plugin mode without the right magic cookie: the program was not started by a kernel
    (``serve`` exits with status 1, as go-plugin's own plugins do)."""


@dataclass(frozen=True, slots=True)
class GoPluginLaunch:
    """What a kernel built on go-plugin asked for (:func:`go_plugin_launch`).

    Attributes:
        kernel_versions: The versions of :data:`PROTOCOL_VERSIONS_ENV`, in the kernel's order
            (empty when it sent none).
        socket_dir: :data:`UNIX_SOCKET_DIR_ENV`, or None.
        port_range: ``(lowest, highest)`` TCP port (:data:`MIN_PORT_ENV`,
            :data:`MAX_PORT_ENV`); ``(0, 0)``: any free port.
        multiplex: :data:`MULTIPLEX_ENV` was set (the line gets a seventh field ``false``).
    """

    kernel_versions: tuple[int, ...] = ()
    socket_dir: str | None = None
    port_range: tuple[int, int] = (0, 0)
    multiplex: bool = False

    @property
    def shared_versions(self) -> tuple[int, ...]:
        """The protocol majors both sides speak, highest first."""
        return tuple(sorted(set(self.kernel_versions) & set(SUPPORTED_MAJORS), reverse=True))

    @property
    def app_version(self) -> int:
        """The APP field: the highest shared major; with none shared (or none sent), this
        plugin's own :data:`~protocol_py.version.PROTOCOL_MAJOR`, which such a kernel refuses
        with its own error naming both sides' versions."""
        shared = self.shared_versions
        return shared[0] if shared else PROTOCOL_MAJOR

    def listen_options(
        self, *, host: str | None, port: int | None, socket: str | None
    ) -> tuple[str | None, int | None, str | None]:
        """``serve``'s ``(host, port, socket)`` with what the kernel asked for: with no
        address, a socket in :attr:`socket_dir` when set (:func:`socket_path_in`); with
        ``host`` and no ``port``, the first free port of :attr:`port_range`
        (:func:`free_port`). Anything given explicitly is kept.

        Raises:
            InvalidValueError: :attr:`socket_dir` is not a usable directory, or no port of
                the range is free.
        """
        if socket is None and host is None and port is None and self.socket_dir is not None:
            return None, None, socket_path_in(self.socket_dir)
        if host is not None and port is None:
            return host, free_port(host, *self.port_range), socket
        return host, port, socket

    def handshake_line(self, server: Any, server_certificate: bytes | None = None) -> str:
        """go-plugin's handshake line of a started server, newline-terminated (see the module
        docstring)."""
        _, transport, address, protocol, *rest = (
            handshake_line(server, server_certificate).rstrip("\n").split("|")
        )
        fields = [
            str(CORE_PROTOCOL_VERSION),
            str(self.app_version),
            transport,
            address,
            protocol,
            rest[0] if rest else "",
        ]
        if self.multiplex:
            fields.append("false")
        return "|".join(fields) + "\n"


def _value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is not None and len(value) > MAX_ENV_VALUE_CHARS:
        raise InvalidValueError(
            f"{name}: {len(value)} characters, more than {MAX_ENV_VALUE_CHARS}",
            rule="go_plugin.env.length",
        )
    return value


def _versions(text: str) -> tuple[int, ...]:
    versions: list[int] = []
    for item in text.split(","):
        entry = item.strip()
        if not (entry.isascii() and entry.isdigit() and len(entry) <= 9):
            raise InvalidValueError(
                f"{PROTOCOL_VERSIONS_ENV}: {_quote(item)} is not a version (expected "
                "comma-separated decimal integers)",
                rule="go_plugin.versions",
            )
        versions.append(int(entry))
    return tuple(versions)


def _port(env: Mapping[str, str], name: str) -> int:
    text = _value(env, name)
    if text is None or not text.strip():
        return 0
    entry = text.strip()
    if not (entry.isascii() and entry.isdigit() and len(entry) <= 5 and int(entry) < 65536):
        raise InvalidValueError(
            f"{name}: {_quote(text)} is not a port (0..65535)", rule="go_plugin.port"
        )
    return int(entry)


def go_plugin_launch(env: Mapping[str, str]) -> GoPluginLaunch | None:
    """What a go-plugin kernel asked for, or None when go-plugin did not launch this process
    (neither :data:`PROTOCOL_VERSIONS_ENV` nor :data:`MAGIC_COOKIE_KEY` is set).

    Raises:
        NotLaunchedByKernelError: go-plugin mode, and :data:`MAGIC_COOKIE_KEY` is missing or
            is not :data:`MAGIC_COOKIE_VALUE` (its value is never echoed).
        InvalidValueError: a malformed value (the message names the variable): a version that
            is not a decimal integer, a port outside 0..65535, :data:`MIN_PORT_ENV` above
            :data:`MAX_PORT_ENV`, :data:`UNIX_SOCKET_GROUP_ENV` set, a value over
            :data:`MAX_ENV_VALUE_CHARS`.
    """
    versions_text = _value(env, PROTOCOL_VERSIONS_ENV)
    cookie = _value(env, MAGIC_COOKIE_KEY)
    if versions_text is None and cookie is None:
        return None
    if cookie != MAGIC_COOKIE_VALUE:
        problem = "is not set" if cookie is None else f"is not {MAGIC_COOKIE_VALUE!r}"
        raise NotLaunchedByKernelError(
            "this program is a model-provider plugin: a kernel starts it (hashicorp/go-plugin "
            f"with MagicCookieKey {MAGIC_COOKIE_KEY!r} and MagicCookieValue "
            f"{MAGIC_COOKIE_VALUE!r}, or protocol_py.transport.launch); {MAGIC_COOKIE_KEY} "
            f"{problem} (to run it by hand, unset {PROTOCOL_VERSIONS_ENV} and "
            f"{MAGIC_COOKIE_KEY})"
        )
    if _value(env, UNIX_SOCKET_GROUP_ENV):
        raise InvalidValueError(
            f"{UNIX_SOCKET_GROUP_ENV} is not supported: the plugin's socket is owner-only "
            "(mode 0600); run the plugin as the kernel's user",
            rule="go_plugin.socket_group",
        )
    low, high = _port(env, MIN_PORT_ENV), _port(env, MAX_PORT_ENV)
    if low > high:
        raise InvalidValueError(
            f"{MIN_PORT_ENV} {low} is above {MAX_PORT_ENV} {high}", rule="go_plugin.port"
        )
    socket_dir = _value(env, UNIX_SOCKET_DIR_ENV)
    return GoPluginLaunch(
        kernel_versions=_versions(versions_text) if versions_text else (),
        socket_dir=socket_dir or None,
        port_range=(low, high),
        multiplex=bool(_value(env, MULTIPLEX_ENV)),
    )


def socket_path_in(directory: str) -> str:
    """A fresh socket path ``<directory>/plugin-<12 hex digits>.sock`` (absolute).

    Raises:
        InvalidValueError: ``directory`` is not a directory, contains ``|`` or a line break
            (it could not be announced), or the path is too long for a socket
            (:func:`~protocol_py.transport.addresses.check_socket_path`).
    """
    if any(ch in directory for ch in "|\r\n"):
        raise InvalidValueError(
            f"{UNIX_SOCKET_DIR_ENV}: a path containing '|' or a line break cannot be announced "
            f"in the handshake line: {_quote(directory)}",
            rule="go_plugin.socket_dir",
        )
    if not os.path.isdir(directory):
        raise InvalidValueError(
            f"{UNIX_SOCKET_DIR_ENV}: {_quote(directory)} is not a directory",
            rule="go_plugin.socket_dir",
        )
    name = f"{SOCKET_FILE_PREFIX}{secrets.token_hex(6)}.sock"
    return check_socket_path(os.path.join(os.path.abspath(directory), name), UNIX_SOCKET_DIR_ENV)


def free_port(host: str, low: int, high: int) -> int:
    """The first port in ``low..high`` that ``host`` can bind now (0 for ``(0, 0)``: the
    server then picks one). A port taken between this probe and the server's bind makes the
    start fail with "address in use".

    Raises:
        InvalidValueError: no port of the range is free.
    """
    if (low, high) == (0, 0):
        return 0
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for port in range(low, high + 1):
        with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host.strip("[]"), port))
            return port
    raise InvalidValueError(
        f"no free TCP port on {_quote(host)} in {MIN_PORT_ENV}..{MAX_PORT_ENV} ({low}..{high})",
        rule="go_plugin.port",
    )


def parse_handshake_line(line: str) -> Handshake:
    """Parse a handshake line of either layout (the kernel side): this package's
    (:func:`~protocol_py.transport.handshake.parse_handshake`) or go-plugin's, told apart by
    the second field (a transport, or go-plugin's APP version).

    A go-plugin line must have at least five fields: CORE :data:`CORE_PROTOCOL_VERSION`, an
    APP version in :data:`SUPPORTED_MAJORS`, ``tcp`` or ``unix``, an address as for this
    package's layout (loopback ``host:port`` or an absolute socket path), ``grpc``, and an
    optional certificate (empty: none); later fields are kept in ``extra``.

    Raises:
        InvalidValueError: longer than
            :data:`~protocol_py.transport.handshake.MAX_HANDSHAKE_LINE_BYTES`, or a field
            breaking those rules (the message names the field by its position).
    """
    if len(line.encode("utf-8", "replace")) > MAX_HANDSHAKE_LINE_BYTES:
        raise InvalidValueError(
            f"handshake line longer than {MAX_HANDSHAKE_LINE_BYTES} bytes",
            rule="handshake.length",
        )
    fields = line.rstrip("\r\n").split("|")
    if len(fields) < 2 or not (fields[1].isascii() and fields[1].isdigit()):
        return parse_handshake(line)
    if len(fields) < 5:
        raise InvalidValueError(
            f"go-plugin handshake line has {len(fields)} fields, expected at least 5: "
            f"{_quote(line)}",
            rule="handshake.fields",
        )
    core, app, transport, address, protocol = fields[:5]
    if core != str(CORE_PROTOCOL_VERSION):
        raise InvalidValueError(
            f"go-plugin core protocol (field 1) {_quote(core)} is not {CORE_PROTOCOL_VERSION}",
            rule="handshake.core",
        )
    if not (app.isascii() and len(app) <= 9 and int(app) in SUPPORTED_MAJORS):
        raise InvalidValueError(
            f"handshake protocol version (field 2) {_quote(app)} is not "
            f"{' or '.join(map(str, SUPPORTED_MAJORS))}",
            rule="handshake.version",
        )
    if transport not in _TRANSPORTS:
        raise InvalidValueError(
            f"handshake transport (field 3) {_quote(transport)} is not tcp or unix",
            rule="handshake.transport",
        )
    _check_handshake_address(transport, address, field=4)
    if protocol != HANDSHAKE_PROTOCOL:
        raise InvalidValueError(
            f"handshake protocol (field 5) {_quote(protocol)} is not {HANDSHAKE_PROTOCOL}",
            rule="handshake.protocol",
        )
    return Handshake(
        version=int(app),
        transport=transport,
        address=address,
        protocol=protocol,
        server_certificate=_decode_certificate(fields[5]) if len(fields) > 5 else None,
        extra=tuple(fields[6:]),
        layout=LAYOUT,
    )


__all__ = [
    "CLIENT_CERT_ENV",
    "CORE_PROTOCOL_VERSION",
    "GO_PLUGIN_ENV",
    "HANDSHAKE_PROTOCOL_VERSION",
    "LAYOUT",
    "MAGIC_COOKIE_KEY",
    "MAGIC_COOKIE_VALUE",
    "MAX_ENV_VALUE_CHARS",
    "MAX_PORT_ENV",
    "MIN_PORT_ENV",
    "MULTIPLEX_ENV",
    "PROTOCOL_VERSIONS_ENV",
    "SOCKET_FILE_PREFIX",
    "SUPPORTED_MAJORS",
    "UNIX_SOCKET_DIR_ENV",
    "UNIX_SOCKET_GROUP_ENV",
    "GoPluginLaunch",
    "NotLaunchedByKernelError",
    "free_port",
    "go_plugin_launch",
    "parse_handshake_line",
    "socket_path_in",
]
