"""``protocol-py serve``: serve ModelService for a provider until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import os
import textwrap

from protocol_py.cli.options import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Parser,
    add_serve_options,
    memory_budget,
    message_size,
    non_negative_float,
    positive_int,
    timeout_seconds,
)
from protocol_py.errors import InvalidValueError
from protocol_py.provider import Provider
from protocol_py.providers import (
    BUILTIN,
    ProviderLoadError,
    installed_providers,
    load_provider_class,
)
from protocol_py.server import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    DEFAULT_RECEIVE_TIMEOUT,
)
from protocol_py.server.grpc_layer.connection_limit import (
    CONNECTION_FD_RESERVE,
    MAX_CONNECTIONS_CAP,
    default_max_connections,
)
from protocol_py.server.grpc_layer.progress import DEFAULT_WRITE_TIMEOUT
from protocol_py.server.serve import ServeError, configure_logging, serve
from protocol_py.transport.tls import CLIENT_CERT_ENV


def _provider_help() -> str:
    installed = ", ".join(sorted(installed_providers())) or "none"
    return (
        f"built-in: {', '.join(BUILTIN)}; installed (entry points): {installed}; "
        "or module:Class or path/to/file.py:Class (default: %(default)s)"
    )


def environment_help() -> str:
    """The ``serve --help`` epilog: the environment variables each built-in provider reads,
    and the server's own."""
    lines = ["environment variables:"]
    for name in BUILTIN:
        listed: tuple[tuple[str, str], ...] = getattr(
            load_provider_class(name), "environment_variables", tuple
        )()
        described = [f"{variable}: {meaning}" for variable, meaning in listed] or ["none"]
        for i, text in enumerate(described):
            lines.append(f"  {name if i == 0 else '':<12} {text}")
    lines += [
        f"  {'server':<12} {CLIENT_CERT_ENV}: with --handshake, the kernel's client certificate"
        " (PEM); turns on automatic mutual TLS",
        f"  {'':<12} PROTOCOL_PY_DESCRIPTOR: the buf image served by reflection (default: the"
        " one the package ships)",
    ]
    return "\n".join(lines)


def add_serve_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    """Add ``serve`` and its options to ``sub``."""
    serve = sub.add_parser(
        "serve",
        help="serve ModelService for a provider",
        description=textwrap.fill(
            "Serve the gRPC ModelService for one provider on 127.0.0.1:50051 (or --host/--port, "
            "--socket, --handshake) until SIGINT/SIGTERM, then drain in-flight streams for "
            "--grace-period seconds.",
            78,
        ),
        epilog=environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--provider", default="reference", metavar="NAME", help=_provider_help())
    serve.add_argument(
        "--host", default=None, metavar="HOST", help=f"bind address (default {DEFAULT_HOST})"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="PORT",
        help=f"TCP port (default {DEFAULT_PORT}); 0 picks a free one",
    )
    serve.add_argument(
        "--handshake",
        action="store_true",
        help="print '1|tcp|<host>:<port>|grpc' or '1|unix|<path>|grpc' on stdout once serving "
        "(go-plugin's layout when a hashicorp/go-plugin kernel launched it, docs/handshake.md); "
        "with no address, listen on a private unix socket",
    )
    add_serve_options(serve)
    serve.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVEL",
        help="DEBUG, INFO, WARNING or ERROR; logs go to stderr (default %(default)s)",
    )
    serve.add_argument(
        "--max-message-size",
        type=message_size,
        default=None,
        metavar="SIZE",
        help="largest message in either direction: bytes or 1MiB/64MB (default 64MiB)",
    )
    serve.add_argument(
        "--grace-period",
        type=non_negative_float,
        default=DEFAULT_GRACE_PERIOD,
        metavar="SECONDS",
        help="time in-flight streams get on SIGINT/SIGTERM, seconds "
        f"(default {DEFAULT_GRACE_PERIOD:g})",
    )
    serve.add_argument(
        "--receive-timeout",
        type=timeout_seconds,
        default=DEFAULT_RECEIVE_TIMEOUT,
        metavar="SECONDS",
        help="time a call gets to send its whole request, seconds; slower ones get "
        f"DEADLINE_EXCEEDED (default {DEFAULT_RECEIVE_TIMEOUT:g})",
    )
    serve.add_argument(
        "--idle-timeout",
        type=timeout_seconds,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="close a connection with no open call for this long, seconds "
        f"(default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    serve.add_argument(
        "--max-connections",
        type=positive_int,
        default=None,
        metavar="NUMBER",
        help="most connections open at once; at the limit the one idle longest is closed, or, "
        "with none idle, the new one (default: the soft RLIMIT_NOFILE minus "
        f"{CONNECTION_FD_RESERVE}, at least half of it, at most {MAX_CONNECTIONS_CAP}; "
        f"now {default_max_connections()})",
    )
    serve.add_argument(
        "--write-timeout",
        type=timeout_seconds,
        default=DEFAULT_WRITE_TIMEOUT,
        metavar="SECONDS",
        help="reset a stream whose peer keeps its flow-control window closed this long, and "
        "close a connection whose peer reads nothing this long, seconds "
        f"(default {DEFAULT_WRITE_TIMEOUT:g})",
    )
    serve.add_argument(
        "--memory-budget",
        type=memory_budget,
        default=None,
        metavar="SIZE",
        help="bytes of requests and large replies the server holds at once: bytes, 512MiB, "
        "2GiB, or off (default: a quarter of the machine's memory, 256MiB..8GiB)",
    )
    serve.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="upstream API root of an HTTP provider, e.g. http://127.0.0.1:8000/v1 for a local "
        "OpenAI-compatible server (default: the vendor's own)",
    )
    serve.add_argument(
        "--discover",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read the upstream's model list (GET <base-url>/models) at start-up and serve it; "
        "default: on when --base-url is not the vendor's own, off otherwise; --no-discover "
        "keeps the vendor catalog",
    )
    serve.add_argument(
        "--log-http2-frames",
        action="store_true",
        help="with --log-level DEBUG, also log the h2, hpack and grpclib frame records "
        "(default: those loggers stay at WARNING)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: :func:`protocol_py.server.serve.serve` until SIGINT/SIGTERM; exit 0 after a
    graceful shutdown."""

    try:
        configure_logging(args.log_level, frame_logs=args.log_http2_frames)
    except ValueError:
        raise CliError(f"invalid --log-level {args.log_level!r}", EXIT_USAGE) from None
    if args.port is not None and not 0 <= args.port < 65536:
        raise CliError(f"invalid --port {args.port}: must be in 0..65535", EXIT_USAGE)
    provider = _load_provider(args)
    try:
        serve(
            provider,
            host=args.host,
            port=args.port,
            socket=args.socket,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_client_ca=args.tls_client_ca,
            allow_insecure_socket_dir=args.allow_insecure_socket_dir,
            handshake=args.handshake,
            grace_period=args.grace_period,
            max_message_size=args.max_message_size or DEFAULT_MAX_MESSAGE_SIZE,
            log_level=None,
            receive_timeout=args.receive_timeout,
            idle_timeout=args.idle_timeout,
            max_connections=args.max_connections,
            write_timeout=args.write_timeout,
            memory_budget=args.memory_budget,
        )
    except ServeError as exc:
        raise CliError(str(exc)) from None
    except InvalidValueError as exc:  # conflicting listening options, unusable TLS files
        raise CliError(str(exc), EXIT_USAGE) from None
    return EXIT_OK


def _load_provider(args: argparse.Namespace) -> Provider:
    """``--provider``: load the class (built-in, entry point, module:Class, file.py:Class) and
    build it; every failure is a usage error (exit 2) naming what was wrong."""
    what = f"provider {args.provider!r:.120}"  # the prefix of ProviderLoadError's messages
    try:
        cls = load_provider_class(args.provider)
    except ProviderLoadError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except Exception as exc:  # the provider's own module failed to import
        raise CliError(
            f"{what}: importing it failed: {type(exc).__name__}: {exc!s:.300}", EXIT_USAGE
        ) from None
    try:
        return cls.from_cli(base_url=args.base_url, discover=args.discover, env=os.environ)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except Exception as exc:
        raise CliError(
            f"{what}: constructing {cls.__qualname__} failed: {type(exc).__name__}: {exc!s:.300}",
            EXIT_USAGE,
        ) from None


__all__ = ["add_serve_parser", "cmd_serve"]
