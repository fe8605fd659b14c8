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

import asyncio
import base64
import binascii
import contextlib
import errno
import ipaddress
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Final

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

ORDERLY_STOP: Final = b"stop\n"
"""What :meth:`protocol_py.transport.launch.LaunchedPlugin.close` writes to a launched plugin's
stdin before closing it: the end of file that follows is an orderly shutdown, not a lost
kernel."""


HANDSHAKE_PROTOCOL: Final = "grpc"
"""The fourth handshake field: the RPC protocol."""

HANDSHAKE_WRITE_TIMEOUT: Final = 10.0
"""Longest wait for the handshake line to be taken by stdout, in seconds: a pipe that stays full
(its reader never reads) for this long fails the start-up (:class:`HandshakeWriteError`)."""

_WRITE_CHUNK: Final = 512
"""Bytes written per ``write`` once ``select`` says stdout is writable: at most POSIX's
``PIPE_BUF``, so a write to a pipe never blocks."""

_POLL_SLICE: Final = 0.1
"""Seconds between checks whether the wait for stdout was abandoned (SIGTERM)."""


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


class HandshakeWriteError(OSError):
    """The handshake line could not be written: stdout is closed, its reader has exited (broken
    pipe), or it stayed full for :data:`HANDSHAKE_WRITE_TIMEOUT` seconds. The message
    (``str()``, without the ``[Errno N]`` prefix) is one line saying which."""

    def __str__(self) -> str:
        return str(self.strerror)


def _write_fd(
    fd: int, data: bytes, deadline: float, abandoned: threading.Event, timeout: float
) -> None:
    """Write ``data`` to ``fd`` in chunks of :data:`_WRITE_CHUNK` bytes, each only once
    ``select`` reports ``fd`` writable, so no call blocks for long (see
    :func:`write_handshake_line`)."""
    view = memoryview(data)
    while view:
        if abandoned.is_set():
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeWriteError(
                errno.ETIMEDOUT,
                f"cannot write the handshake line: stdout did not take it within {timeout:g} s "
                "(a full pipe nobody reads)",
            )
        try:
            _, writable, _ = select.select([], [fd], [], min(remaining, _POLL_SLICE))
        except (OSError, ValueError) as exc:
            raise _write_failure(exc) from None
        if not writable:
            continue
        try:
            written = os.write(fd, view[:_WRITE_CHUNK])
        except BlockingIOError:
            continue
        except OSError as exc:
            raise _write_failure(exc) from None
        view = view[written:]


def _write_failure(exc: BaseException) -> HandshakeWriteError:
    number = getattr(exc, "errno", None)
    if number == errno.EPIPE:
        reason = "the reader of stdout has exited (broken pipe)"
    elif number == errno.EBADF or isinstance(exc, ValueError):
        reason = "stdout is closed"
    else:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
    return HandshakeWriteError(number or errno.EIO, f"cannot write the handshake line: {reason}")


async def write_handshake_line(
    line: str, stream: IO[str] | None, *, write_timeout: float = HANDSHAKE_WRITE_TIMEOUT
) -> None:
    """Write ``line`` to ``stream`` (``sys.stdout``) without ever blocking the event loop.

    A stream backed by a file descriptor is written with ``os.write`` (bypassing its buffer)
    from a daemon thread, in chunks of at most ``PIPE_BUF`` bytes, each after ``select`` says
    the descriptor is writable, so no call blocks and the thread ends within ``write_timeout``
    seconds; the loop keeps serving (and handling SIGTERM) meanwhile. If this coroutine is
    cancelled the thread stops at its next check (0.1 s). A stream without a descriptor (an
    in-memory one) is written directly.

    Raises:
        HandshakeWriteError: ``stream`` is None or its descriptor is closed ("stdout is
            closed"), the reader has exited ("broken pipe"), or the line was not taken within
            ``write_timeout`` seconds (a full pipe nobody reads).
    """
    if stream is None:
        raise HandshakeWriteError(errno.EBADF, "cannot write the handshake line: stdout is closed")
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fd = -1
    if fd < 0:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError) as exc:
            raise _write_failure(exc) from None
        return
    try:
        stream.flush()  # anything written to it before goes first (normally nothing)
    except (OSError, ValueError) as exc:
        raise _write_failure(exc) from None
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    abandoned = threading.Event()
    deadline = time.monotonic() + write_timeout

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            _write_fd(fd, line.encode("utf-8"), deadline, abandoned, write_timeout)
        except BaseException as exc:  # reported to the waiting coroutine
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="handshake-line", daemon=True).start()
    try:
        await done
    finally:
        abandoned.set()


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
    "HANDSHAKE_WRITE_TIMEOUT",
    "LOOPBACK_NAMES",
    "MAX_HANDSHAKE_LINE_BYTES",
    "Handshake",
    "HandshakeWriteError",
    "format_handshake",
    "handshake_line",
    "parse_handshake",
    "write_handshake_line",
]
