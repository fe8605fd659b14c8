"""Where and how a plugin server listens: TCP or a unix-domain socket, its modes, and TLS.

* :func:`listen_spec` turns ``serve``'s options into a :class:`ListenSpec`: TCP
  ``--host``/``--port``, a unix socket ``--socket PATH``, or, with ``--handshake`` and no
  address, a fresh socket :data:`SOCKET_NAME` in a private temporary directory (mode
  :data:`PRIVATE_DIR_MODE`); a socket file gets mode :data:`SOCKET_MODE`. TLS from files
  (``--tls-cert``/``--tls-key``, mutual with ``--tls-client-ca``) or automatic mutual TLS when
  the kernel set :data:`~protocol_py.transport.tls.CLIENT_CERT_ENV` (with ``--handshake``
  only).
* :func:`bind_unix_socket` binds a socket path without taking over a live server's socket;
  :func:`remove_socket` removes only the socket file this server created.
"""

from __future__ import annotations

import contextlib
import errno
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
from protocol_py.transport.addresses import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    _quote,
    check_socket_path,
)
from protocol_py.transport.tls import (
    CLIENT_CERT_ENV,
    TLSConfigError,
    auto_mtls_server_context,
    parse_client_certificate,
    server_context,
)

SOCKET_MODE: Final = 0o600
"""Mode of a socket file the server creates: only its owner may connect."""

PRIVATE_DIR_MODE: Final = 0o700
"""Mode of the private temporary directory of a handshake socket: only its owner may enter."""

SOCKET_NAME: Final = "plugin.sock"
"""File name of the socket inside the private temporary directory."""

PRIVATE_DIR_PREFIX: Final = "protocol-py-"
"""Name prefix of the private temporary directory (created by :func:`tempfile.mkdtemp`)."""


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


def _directories_above(directory: str) -> list[str]:
    """``directory`` and each of its ancestors up to ``/``, for the path as written and, when
    a symlink leads elsewhere, for its resolved path too (each directory once, nearest
    first)."""
    out: list[str] = []
    for start in (directory, os.path.realpath(directory)):
        current = start
        while True:
            if current not in out:
                out.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return out


def check_socket_directory(path: str, *, allow_shared_dir: bool = False) -> None:
    """Refuse a socket path under a directory other users may write without the sticky bit.

    In such a directory any local user can unlink the socket file and bind an impostor in its
    place, which the kernel would then connect to; in such an ancestor they can rename the
    directory below it and put one of their own, with an impostor, in its place. So the
    socket's directory and every ancestor up to ``/`` are checked, as OpenSSH's
    ``StrictModes`` checks each directory above a key file. A sticky directory (``/tmp``: mode
    1777) only lets an entry's owner remove or rename it, so it is accepted. With
    ``allow_shared_dir`` the path is used anyway and a WARNING names each offending directory
    and its mode. A directory that cannot be examined is left to ``bind`` to report.

    Raises:
        PermissionError: ``EPERM`` with a message naming the first offending directory (the
            nearest), its mode and the rule.
    """
    directory = os.path.dirname(os.path.abspath(path))
    for candidate in _directories_above(directory):
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if not (mode & stat.S_IWOTH) or mode & stat.S_ISVTX:
            continue
        where = (
            f"socket directory {_quote(candidate)}"
            if candidate == directory
            else f"directory {_quote(candidate)} above the socket directory {_quote(directory)}"
        )
        problem = (
            f"{where} (mode {stat.S_IMODE(mode):04o}) is writable by other users without the "
            "sticky bit: another user could replace the socket"
        )
        if not allow_shared_dir:
            raise PermissionError(
                errno.EPERM,
                f"{problem}; choose a private directory (or force it: --allow-insecure-socket-dir)",
            )
        logging.getLogger("protocol_py.server").warning("%s (used anyway, as asked)", problem)


def bind_unix_socket(path: str, *, allow_shared_dir: bool = False) -> socket.socket:
    """A stream socket bound to ``path`` (not yet listening), never taking over a live one.

    The directory is checked first (:func:`check_socket_directory`, ``allow_shared_dir``).

    asyncio's ``create_unix_server`` unlinks any socket file at the path, so a second server
    silently took over a live server's address. Here an existing socket file is replaced only
    when it is stale (a connect to it is refused: its server is gone), with a warning; when a
    connect succeeds the address is refused as in use. Other files are never removed.

    Raises:
        PermissionError: the directory is writable by others without the sticky bit.
        OSError: ``EADDRINUSE`` ("address in use") when a server listens at ``path`` or a file
            that is not a socket is there; any other error of ``bind``.
    """
    check_socket_directory(path, allow_shared_dir=allow_shared_dir)
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
        allow_shared_dir: Listen on ``path`` even when its directory is writable by other
            users without the sticky bit, with one WARNING (``--allow-insecure-socket-dir``;
            :func:`check_socket_directory`).
    """

    host: str | None = None
    port: int | None = None
    path: str | None = None
    owns_socket_dir: bool = False
    ssl: ssl.SSLContext | None = None
    server_certificate: bytes | None = None
    client_certificate: bytes | None = None
    allow_shared_dir: bool = False

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
            allow_shared_dir=self.allow_shared_dir,
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
    allow_shared_dir: bool = False,
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
    * ``allow_shared_dir`` (``--allow-insecure-socket-dir``): with ``--socket``, a directory
      writable by others without the sticky bit is used with a WARNING instead of refused
      (:func:`check_socket_directory`); it needs ``--socket``.

    Raises:
        InvalidValueError: conflicting or malformed options (``TLSConfigError``, a subclass,
            for an unusable file or client certificate); the message names the option.
    """
    environ = os.environ if env is None else env
    if socket is not None and (host is not None or port is not None):
        raise InvalidValueError(
            "--socket cannot be combined with --host or --port", rule="listen.conflict"
        )
    if allow_shared_dir and socket is None:
        raise InvalidValueError(
            "--allow-insecure-socket-dir needs --socket", rule="listen.socket.insecure_dir"
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
            allow_shared_dir=allow_shared_dir,
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


__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_DIR_PREFIX",
    "SOCKET_MODE",
    "SOCKET_NAME",
    "STALE_PROBE_TIMEOUT",
    "ListenSpec",
    "SocketIdentity",
    "bind_unix_socket",
    "is_private_socket_dir",
    "listen_spec",
    "make_private_socket_path",
    "remove_socket",
    "socket_identity",
]
