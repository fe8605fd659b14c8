"""Command-line options of the ``protocol-py`` commands.

* :func:`add_serve_options`, :func:`add_client_options`: the unix socket and TLS options of
  ``serve`` and of the client commands; :func:`client_ssl_from_options` turns the client ones
  into an SSL context.
"""

from __future__ import annotations

import argparse
import ssl

from protocol_py.transport.tls import client_context


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


__all__ = ["add_client_options", "add_serve_options", "client_ssl_from_options"]
