"""What the ``protocol-py`` commands share: exit statuses, the parser, argument types, options.

* Exit statuses :data:`EXIT_OK`, :data:`EXIT_FAILURE`, :data:`EXIT_USAGE` and
  :class:`CliError`, the failure a command reports as one line on stderr.
* :class:`Parser`: argparse's parser with usage errors exiting :data:`EXIT_USAGE`.
* Argument types (:func:`message_size`, :func:`finite_float`, :func:`non_negative_float`,
  :func:`deadline_seconds`, :func:`timeout_seconds`, :func:`positive_int`): each refuses a bad
  value with a message naming the rule.
* :func:`add_serve_options`, :func:`add_client_options`: the unix socket and TLS options of
  ``serve`` and of the client commands; :func:`client_ssl_from_options` turns the client ones
  into an SSL context.
* ``--server`` (:data:`DEFAULT_SERVER`) and ``--timeout`` (:data:`DEFAULT_TIMEOUT`) of the
  client commands, and :func:`run_client`, which connects to ``--server`` within
  :data:`CONNECT_TIMEOUT` and turns every connection failure into one :class:`CliError` line.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import math
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, NoReturn, TypeVar

from grpclib.exceptions import GRPCError, StreamTerminatedError

from protocol_py._compat.grpclib_goaway import GOAWAY_NO_ERROR, goaway_error_code
from protocol_py.client.client import ModelClient, parse_address
from protocol_py.errors import InvalidValueError, ProtocolError
from protocol_py.server import parse_size
from protocol_py.server.grpc_layer.memory_budget import parse_memory_budget
from protocol_py.transport.addresses import DEFAULT_HOST, DEFAULT_PORT, unix_socket_path
from protocol_py.transport.tls import client_context

_T = TypeVar("_T")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure reported as one line on stderr with an exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Like argparse's, but arguments left over after a subcommand are reported by that
        subcommand's parser (``protocol-py version: error: unrecognized arguments: --x``),
        as every other usage error of a subcommand is."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            target: argparse.ArgumentParser = self
            for action in self._actions:
                if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                    target = action.choices[command]
            target.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


def message_size(text: str) -> int:

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def memory_budget(text: str) -> int:
    """``--memory-budget``: bytes, ``512MiB``, ``2GiB``, or ``off``/``0`` (0: off)."""
    try:
        return parse_memory_budget(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (``--grace-period``, ``--temperature``)."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text[:40]!r}")
    return value


def deadline_seconds(text: str) -> float:
    """A finite number of seconds > 0 (``--timeout``: 0 would fail every call at once)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text[:40]!r}")
    return value


def timeout_seconds(text: str) -> float:
    """A finite number of seconds > 0 (the server's timeouts): one message for 0 and for a
    negative number."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text[:40]!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--socket``, ``--allow-insecure-socket-dir``, ``--tls-cert``, ``--tls-key`` and
    ``--tls-client-ca`` to ``serve``."""
    parser.add_argument(
        "--socket",
        default=None,
        metavar="PATH",
        help="listen on this unix-domain socket (mode 0600) instead of TCP (default: TCP)",
    )
    parser.add_argument(
        "--allow-insecure-socket-dir",
        action="store_true",
        help="with --socket, listen even when the socket's directory or a directory above it "
        "is writable by other users without the sticky bit (another user could replace the "
        "socket); logs one WARNING per such directory (default: refused, exit 1)",
    )
    parser.add_argument(
        "--tls-cert", default=None, metavar="FILE", help="TLS certificate, PEM (default: plaintext)"
    )
    parser.add_argument(
        "--tls-key",
        default=None,
        metavar="FILE",
        help="TLS private key, PEM (with --tls-cert; default: none)",
    )
    parser.add_argument(
        "--tls-client-ca",
        default=None,
        metavar="FILE",
        help="require client certificates issued by these CAs, PEM (mutual TLS; default: no "
        "client certificate asked for)",
    )


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--tls``, ``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--tls-server-name``
    to a client command."""
    parser.add_argument(
        "--tls",
        action="store_true",
        help="use TLS with the system's trusted CAs (default: plaintext)",
    )
    parser.add_argument(
        "--tls-ca",
        default=None,
        metavar="FILE",
        help="use TLS; trust these CAs, PEM (default: the system's)",
    )
    parser.add_argument(
        "--tls-cert",
        default=None,
        metavar="FILE",
        help="client certificate, PEM (mutual TLS; default: none)",
    )
    parser.add_argument(
        "--tls-key",
        default=None,
        metavar="FILE",
        help="client key, PEM (with --tls-cert; default: none)",
    )
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


DEFAULT_SERVER: Final = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
"""Default ``--server`` of the client commands."""

SERVER_HELP: Final = (
    "the server's host:port ([v6]:port for IPv6) or unix:PATH (default %(default)s)"
)
"""Help text of ``--server``."""

DEFAULT_TIMEOUT: Final = 30.0
"""Default deadline of ``describe`` and ``capabilities`` (``--timeout``), seconds."""


def add_timeout_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--timeout SECONDS`` (:func:`deadline_seconds`, default :data:`DEFAULT_TIMEOUT`)."""
    parser.add_argument(
        "--timeout",
        type=deadline_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="deadline of the call, seconds (default %(default)g)",
    )


CONNECT_TIMEOUT: Final = 10.0
"""Longest wait to open the connection of a client command (TCP or unix connect and TLS
handshake; ``--timeout`` when shorter), and the deadline of ``chat``'s first call
(GetCapabilities) when ``--timeout`` is longer, so a listener that accepts but never answers the
HTTP/2 preface fails fast; seconds."""

_ADDRESS_FORMS: Final = "expected HOST:PORT, [IPv6]:PORT or unix:PATH"


def _client_for(address: str, args: argparse.Namespace) -> tuple[ModelClient, bool]:
    """The client of ``--server``/TLS options and whether it uses TLS; a bad address (a bare
    host without its port included) or TLS file is bad usage (exit 2)."""
    try:
        if unix_socket_path(address) is None and parse_address(address, default_port=0)[1] == 0:
            raise CliError(f"--server {address[:120]!r}: no port; {_ADDRESS_FORMS}", EXIT_USAGE)
    except InvalidValueError as exc:
        raise CliError(f"--server: {exc}; {_ADDRESS_FORMS}", EXIT_USAGE) from None
    try:  # the TLS options' own problem, named alone (no --server prefix or address hint)
        context, server_name = client_ssl_from_options(args)
    except ValueError as exc:  # TLSConfigError: a TLS file, or --tls-cert without --tls-key
        raise CliError(str(exc), EXIT_USAGE) from None
    try:
        client = ModelClient.connect(address, ssl=context, server_hostname=server_name)
    except InvalidValueError as exc:
        raise CliError(f"--server: {exc}; {_ADDRESS_FORMS}", EXIT_USAGE) from None
    return client, context is not None


def _lost(address: str, exc: Exception, client: ModelClient, tls: bool) -> str:
    """The message of a lost connection: a graceful GOAWAY (NO_ERROR) is the server shutting
    down (retryable); otherwise the error and, before any answer, the client's hint
    (:func:`protocol_py.client.hints.lost_hint`)."""
    if goaway_error_code(exc) == GOAWAY_NO_ERROR:
        return (
            f"connection to {address} closed: the server is shutting down (GOAWAY); retry "
            "when it is serving again"
        )
    hint = client.connection_hint(exc)
    return f"connection to {address} lost: {exc}" + (f" before any answer: {hint}" if hint else "")


def _cannot_connect(address: str, exc: OSError, client: ModelClient | None) -> str:
    """``cannot connect to ADDRESS: WHY``, and the client's hint (nothing listening, TLS
    against a plaintext server, an untrusted certificate) after ``; ``."""
    why = f"{exc.strerror or exc}"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        why = "connection refused"  # asyncio's text repeats the address: "Connect call failed"
    if isinstance(exc, ssl.SSLError):  # OpenSSL's reason, or the hint that explains it
        why = "TLS handshake failed" if exc.reason is None else str(exc.reason)
    hint = client.connection_hint(exc) if client is not None else None
    if hint and isinstance(exc, ssl.SSLError):
        why = "TLS handshake failed"
    return f"cannot connect to {address}: {why}" + (f"; {hint}" if hint else "")


def run_client(
    action: Callable[[ModelClient], Awaitable[_T]],
    address: str,
    args: argparse.Namespace,
    timeout: float,
) -> _T:
    """Connect to ``address`` (TLS from ``args``' options) inside a fresh event loop, run
    ``action``, always close. Opening the connection (TCP or unix connect, and the TLS
    handshake) is bounded by min(:data:`CONNECT_TIMEOUT`, ``--timeout``) seconds; ``action``
    passes ``timeout`` (seconds) to its calls."""
    opened: list[tuple[ModelClient, bool]] = []
    connect_within = min(CONNECT_TIMEOUT, args.timeout)

    async def run() -> _T:
        opened.append(_client_for(address, args))  # a grpclib Channel binds the running loop
        client, tls = opened[0]
        try:
            try:
                async with asyncio.timeout(connect_within):
                    await client.channel.__connect__()
            except TimeoutError:
                what = "TLS handshake not completed" if tls else "not connected"
                raise CliError(
                    f"cannot connect to {address}: {what} within {connect_within:g}s"
                ) from None
            return await action(client)
        finally:
            client.close()

    try:
        return asyncio.run(run())
    except TimeoutError:
        raise CliError(
            f"no answer from {address} within {timeout:g}s (deadline exceeded)"
        ) from None
    except (ConnectionResetError, ConnectionAbortedError) as exc:
        raise CliError(_lost(address, exc, *opened[0])) from None
    except (ConnectionError, OSError) as exc:
        raise CliError(_cannot_connect(address, exc, opened[0][0] if opened else None)) from None
    except GRPCError as exc:
        raise CliError(f"server answered {exc.status.name}: {exc.message or ''}") from None
    except StreamTerminatedError as exc:
        raise CliError(_lost(address, exc, *opened[0])) from None
    except ProtocolError as exc:
        raise CliError(str(exc)) from None


__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_SERVER",
    "DEFAULT_TIMEOUT",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "SERVER_HELP",
    "CliError",
    "Parser",
    "add_client_options",
    "add_serve_options",
    "add_timeout_option",
    "client_ssl_from_options",
    "deadline_seconds",
    "finite_float",
    "memory_budget",
    "message_size",
    "non_negative_float",
    "positive_int",
    "run_client",
    "timeout_seconds",
]
