"""Where and how a plugin server listens, and the handshake line that tells a kernel.

* Addresses: ``host:port`` (TCP; :func:`protocol_py.client.client.parse_address`) or a unix-domain
  socket in grpcio's spelling, ``unix:PATH`` or ``unix:///ABSOLUTE/PATH``
  (:func:`unix_socket_path`).
* Listening (:func:`listen_spec`, from ``serve``'s options): TCP ``--host``/``--port``, a unix
  socket ``--socket PATH``, or, with ``--handshake`` and no address, a fresh socket
  :data:`SOCKET_NAME` in a private temporary directory (mode :data:`PRIVATE_DIR_MODE`); a
  socket file gets mode :data:`SOCKET_MODE`. TLS from files (``--tls-cert``/``--tls-key``,
  mutual with ``--tls-client-ca``) or automatic mutual TLS when the kernel set
  :data:`~protocol_py.transport.tls.CLIENT_CERT_ENV` (with ``--handshake`` only).
* The handshake line (:func:`format_handshake`, :func:`parse_handshake`), README "Handshake"::

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

import argparse
import base64
import binascii
import contextlib
import errno
import ipaddress
import logging
import os
import socket
import ssl
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from protocol_py.errors import InvalidValueError
from protocol_py.transport.tls import (
    CLIENT_CERT_ENV,
    TLSConfigError,
    auto_mtls_server_context,
    client_context,
    parse_client_certificate,
    server_context,
)
from protocol_py.version import PROTOCOL_MAJOR

DEFAULT_HOST: Final = "127.0.0.1"
"""Default listening host: loopback only."""

DEFAULT_PORT: Final = 50051
"""Default listening TCP port."""

MAX_UNIX_PATH_BYTES: Final = 107
"""Longest unix-domain socket path, bytes of its file-system encoding (Linux ``sun_path`` holds
108 bytes including the terminating NUL)."""

SOCKET_MODE: Final = 0o600
"""Mode of a socket file the server creates: only its owner may connect."""

PRIVATE_DIR_MODE: Final = 0o700
"""Mode of the private temporary directory of a handshake socket: only its owner may enter."""

SOCKET_NAME: Final = "plugin.sock"
"""File name of the socket inside the private temporary directory."""

PRIVATE_DIR_PREFIX: Final = "protocol-py-"
"""Name prefix of the private temporary directory (created by :func:`tempfile.mkdtemp`)."""

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

_ECHO_LIMIT: Final = 200
"""Characters of caller text an error message quotes at most."""


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _ECHO_LIMIT else text[: _ECHO_LIMIT - 3] + "..."


# -- addresses -----------------------------------------------------------------------------------


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


def make_private_socket_path() -> str:
    """A socket path :data:`SOCKET_NAME` inside a new private temporary directory (mode
    :data:`PRIVATE_DIR_MODE`, named ``protocol-py-*`` under :func:`tempfile.gettempdir`).

    Raises:
        InvalidValueError: the temporary directory's path is too long for a socket (set
            ``TMPDIR`` to a shorter one); the directory is removed again.
    """
    directory = tempfile.mkdtemp(prefix=PRIVATE_DIR_PREFIX)
    os.chmod(directory, PRIVATE_DIR_MODE)
    path = os.path.join(directory, SOCKET_NAME)
    try:
        return check_socket_path(path, "private socket path (set TMPDIR to a shorter directory)")
    except InvalidValueError:
        os.rmdir(directory)
        raise


SocketIdentity = tuple[int, int]
"""``(st_dev, st_ino)`` of a socket file: which file a server created at a path."""

STALE_PROBE_TIMEOUT: Final = 1.0
"""Longest wait for the connect that tells a live socket from a stale one, seconds."""


def socket_identity(path: str) -> SocketIdentity | None:
    """``(st_dev, st_ino)`` of the socket file at ``path``, or None when there is none."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISSOCK(info.st_mode) else None


def _someone_listens(path: str) -> bool:
    """Whether a connect to the unix socket at ``path`` succeeds (False: refused, a stale
    socket file left by a server that died)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(STALE_PROBE_TIMEOUT)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # a timeout (full backlog) or no permission: assume it is in use
    finally:
        probe.close()
    return True


def bind_unix_socket(path: str) -> socket.socket:
    """A stream socket bound to ``path`` (not yet listening), never taking over a live one.

    asyncio's ``create_unix_server`` unlinks any socket file at the path, so a second server
    silently took over a live server's address. Here an existing socket file is replaced only
    when it is stale (a connect to it is refused: its server is gone), with a warning; when a
    connect succeeds the address is refused as in use. Other files are never removed.

    Raises:
        OSError: ``EADDRINUSE`` ("address in use") when a server listens at ``path`` or a file
            that is not a socket is there; any other error of ``bind``.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            if socket_identity(path) is None:
                raise OSError(
                    errno.EADDRINUSE, f"address in use: {_quote(path)} exists and is not a socket"
                ) from None
            if _someone_listens(path):
                raise OSError(
                    errno.EADDRINUSE,
                    f"address in use: a server is listening on {_quote(path)}",
                ) from None
            logging.getLogger("protocol_py.server").warning(
                "replacing the stale socket file %s (a connect to it was refused)", _quote(path)
            )
            os.unlink(path)
            sock.bind(path)
    except BaseException:
        sock.close()
        raise
    return sock


def remove_socket(
    path: str, *, owns_dir: bool = False, identity: SocketIdentity | None = None
) -> None:
    """Remove a socket file (only if it is a socket, and, given ``identity``, only if it is
    still that file: another server may have replaced a stale one since) and, with
    ``owns_dir``, its directory when that is an empty private ``protocol-py-*`` directory.
    Missing files are ignored; nothing else is ever deleted."""
    current = socket_identity(path)
    if current is not None and (identity is None or current == identity):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(path)
    directory = Path(path).parent
    if owns_dir and directory.name.startswith(PRIVATE_DIR_PREFIX):
        with contextlib.suppress(OSError):
            directory.rmdir()


def is_private_socket_dir(path: str, *, created_after: float | None = None) -> bool:
    """Whether the socket ``path`` names sits in a private directory a plugin made for it:
    ``<tempdir>/protocol-py-*/`` (:func:`make_private_socket_path`), a real directory (not a
    symlink) owned by this process's user, mode :data:`PRIVATE_DIR_MODE`, and, given
    ``created_after`` (a :func:`time.time` value, seconds), last changed after that instant (a
    directory of an older, unrelated plugin is not ours to clean up)."""
    directory = os.path.dirname(path)
    if os.path.realpath(os.path.dirname(directory)) != os.path.realpath(tempfile.gettempdir()):
        return False
    if not os.path.basename(directory).startswith(PRIVATE_DIR_PREFIX):
        return False
    try:
        info = os.lstat(directory)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) == PRIVATE_DIR_MODE
        and (created_after is None or info.st_ctime >= created_after)
    )


# -- listening -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListenSpec:
    """Where and how a server listens (built by :func:`listen_spec`).

    Attributes:
        host: TCP host, or None on a unix socket.
        port: TCP port (0: a free one), or None on a unix socket.
        path: Unix-domain socket path, or None on TCP.
        owns_socket_dir: The socket's directory was made for it (removed on shutdown).
        ssl: The server's SSL context, or None for plaintext.
        server_certificate: Under AutoMTLS, the server certificate's DER bytes (the fifth
            handshake field); otherwise None.
        client_certificate: Under AutoMTLS, the kernel's certificate, DER: the only one
            accepted.
    """

    host: str | None = None
    port: int | None = None
    path: str | None = None
    owns_socket_dir: bool = False
    ssl: ssl.SSLContext | None = None
    server_certificate: bytes | None = None
    client_certificate: bytes | None = None

    def describe(self) -> str:
        """``host:port`` or ``unix:PATH`` (for messages)."""
        return f"unix:{self.path}" if self.path is not None else f"{self.host}:{self.port}"

    @property
    def security(self) -> str:
        """Who may call the server, in words (logged at start-up; README "Security")."""
        if self.client_certificate is not None:
            return "automatic mutual TLS: only the launching kernel's certificate is accepted"
        if self.ssl is not None and self.ssl.verify_mode == ssl.CERT_REQUIRED:
            return "mutual TLS: clients need a certificate issued by --tls-client-ca"
        if self.ssl is not None:
            return "TLS without client authentication: any client that can connect may call"
        if self.path is not None:
            return f"unix socket, mode {SOCKET_MODE:o}: only its owner's processes may call"
        return "plaintext TCP: any process that can connect may call"

    async def start(self, server: Any) -> None:
        """Start ``server`` (a :class:`~protocol_py.server.ModelServer`) on this address."""
        await server.start(
            self.host or "",
            self.port or 0,
            path=self.path,
            ssl=self.ssl,
            owns_socket_dir=self.owns_socket_dir,
            client_certificate=self.client_certificate,
        )
        logging.getLogger("protocol_py.server").info("transport security: %s", self.security)

    def discard(self) -> None:
        """Remove the private socket directory of a server that never started."""
        if self.path is not None and self.owns_socket_dir:
            remove_socket(self.path, owns_dir=True)


def listen_spec(
    *,
    host: str | None,
    port: int | None,
    socket: str | None,
    handshake: bool,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    env: Mapping[str, str] | None = None,
    client_cert_env: str = CLIENT_CERT_ENV,
) -> ListenSpec:
    """The listening address and TLS of ``serve`` from its options.

    * ``--socket PATH``: that unix socket, made absolute (with neither ``--host`` nor
      ``--port``; with ``handshake``, without ``|`` or line breaks).
    * ``--host``/``--port``: TCP; a missing one takes its default.
    * no address: with ``handshake`` a private socket (:func:`make_private_socket_path`),
      otherwise TCP on :data:`DEFAULT_HOST`, port :data:`DEFAULT_PORT`.
    * ``--tls-cert``/``--tls-key`` (both or neither), ``--tls-client-ca`` (needs them): TLS
      from files (:func:`protocol_py.transport.tls.server_context`).
    * ``handshake`` and ``client_cert_env`` (default
      :data:`~protocol_py.transport.tls.CLIENT_CERT_ENV`; go-plugin's ``PLUGIN_CLIENT_CERT``
      for a kernel built on it, :mod:`protocol_py.transport.go_plugin`) in ``env``: automatic
      mutual TLS (a fresh server certificate; only the kernel's certificate is accepted). It
      cannot be combined with ``--tls-cert`` (the kernel could not verify that certificate).

    Raises:
        InvalidValueError: conflicting or malformed options (``TLSConfigError``, a subclass,
            for an unusable file or client certificate); the message names the option.
    """
    environ = os.environ if env is None else env
    if socket is not None and (host is not None or port is not None):
        raise InvalidValueError(
            "--socket cannot be combined with --host or --port", rule="listen.conflict"
        )
    if port is not None and not 0 <= port < 65536:
        raise InvalidValueError(f"invalid --port {port}: must be in 0..65535", rule="listen.port")
    if (tls_cert is None) != (tls_key is None):
        raise TLSConfigError("--tls-cert and --tls-key must be given together", rule="tls.key_pair")
    if tls_client_ca is not None and tls_cert is None:
        raise TLSConfigError("--tls-client-ca needs --tls-cert and --tls-key", rule="tls.client_ca")
    client_cert = environ.get(client_cert_env) if handshake else None
    if client_cert and tls_cert is not None:
        raise TLSConfigError(
            f"{client_cert_env} (automatic mutual TLS) cannot be combined with --tls-cert",
            rule="tls.auto_conflict",
        )
    context: ssl.SSLContext | None = None
    certificate: bytes | None = None
    pinned: bytes | None = None
    if client_cert:
        kernel_pem = parse_client_certificate(client_cert, client_cert_env)
        context, pair = auto_mtls_server_context(kernel_pem)
        certificate = pair.cert_der
        pinned = ssl.PEM_cert_to_DER_cert(kernel_pem.decode("ascii"))
    elif tls_cert is not None and tls_key is not None:
        context = server_context(tls_cert, tls_key, tls_client_ca)
    if socket is not None:
        if handshake and any(ch in socket for ch in "|\r\n"):
            raise InvalidValueError(
                f"--socket: a path containing '|' or a line break cannot be announced in the "
                f"handshake line: {_quote(socket)}",
                rule="listen.socket.handshake",
            )
        return ListenSpec(
            path=check_socket_path(os.path.abspath(socket) if socket else socket, "--socket"),
            ssl=context,
            server_certificate=certificate,
            client_certificate=pinned,
        )
    if host is None and port is None and handshake:
        return ListenSpec(
            path=make_private_socket_path(),
            owns_socket_dir=True,
            ssl=context,
            server_certificate=certificate,
            client_certificate=pinned,
        )
    return ListenSpec(
        host=DEFAULT_HOST if host is None else host,
        port=DEFAULT_PORT if port is None else port,
        ssl=context,
        server_certificate=certificate,
        client_certificate=pinned,
    )


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--socket``, ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca`` to ``serve``."""
    parser.add_argument(
        "--socket",
        default=None,
        metavar="PATH",
        help="listen on this unix-domain socket (mode 0600) instead of TCP",
    )
    parser.add_argument("--tls-cert", default=None, metavar="FILE", help="TLS certificate, PEM")
    parser.add_argument("--tls-key", default=None, metavar="FILE", help="TLS private key, PEM")
    parser.add_argument(
        "--tls-client-ca",
        default=None,
        metavar="FILE",
        help="require client certificates issued by these CAs, PEM (mutual TLS)",
    )


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--tls-server-name``
    to a client command."""
    parser.add_argument("--tls", action="store_true", help="use TLS with the system's trusted CAs")
    parser.add_argument(
        "--tls-ca", default=None, metavar="FILE", help="use TLS; trust these CAs, PEM"
    )
    parser.add_argument(
        "--tls-cert", default=None, metavar="FILE", help="client certificate, PEM (mutual TLS)"
    )
    parser.add_argument("--tls-key", default=None, metavar="FILE", help="client key, PEM")
    parser.add_argument(
        "--tls-server-name",
        default=None,
        metavar="NAME",
        help="name to check in the server's certificate (default: the host; localhost on unix:)",
    )


def client_ssl_from_options(args: argparse.Namespace) -> tuple[ssl.SSLContext | None, str | None]:
    """The client's SSL context (None: plaintext) and server name from
    :func:`add_client_options`' options; any TLS option turns TLS on.

    Raises:
        TLSConfigError: an unusable file, or only one of ``--tls-cert``/``--tls-key``.
    """
    wanted = args.tls or any(
        value is not None for value in (args.tls_ca, args.tls_cert, args.tls_key)
    )
    if not wanted:
        return None, None
    return client_context(args.tls_ca, args.tls_cert, args.tls_key), args.tls_server_name


# -- the handshake line -------------------------------------------------------------------------


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
]
