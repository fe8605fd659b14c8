"""The ``protocol-py`` command line.

Subcommands::

    protocol-py serve [--provider NAME] [--host H] [--port P | --socket PATH] [--handshake]
                      [--tls-cert F --tls-key F [--tls-client-ca F]] [--log-level L]
                      [--max-message-size SIZE] [--grace-period S] [--receive-timeout S]
                      [--idle-timeout S] [--base-url URL] [--discover]
    protocol-py chat [--server H:P|unix:PATH] [TLS] [--model ID] [--system TEXT] [--timeout S]
                     PROMPT
    protocol-py capabilities [--server H:P|unix:PATH] [TLS] [--timeout S] [--json]
    protocol-py describe [--server H:P|unix:PATH] [TLS] [--timeout S]
    protocol-py version
    protocol-py validate FILE
    protocol-py cost --pricing FILE --usage FILE [--at ISO8601] [--json]

    TLS (client options): [--tls] [--tls-ca F] [--tls-cert F --tls-key F] [--tls-server-name N]

Exit status: 0 success; 1 a failure (an input file missing, unreadable or invalid, invalid
document, unreachable or silent server, in-band error, refused start-up); 2 bad usage (an
unknown option, a bad option value, a ``--server`` without a port, a request the model cannot
take). Errors go to stderr as one clear line,
never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final, NoReturn, TypeVar

from grpclib.exceptions import GRPCError, StreamTerminatedError

from protocol_py._compat.grpclib_goaway import GOAWAY_NO_ERROR, goaway_error_code
from protocol_py.cli.chat import (
    CAPABILITIES_TIMEOUT,
    EXIT_CANCELLED,
    ChatError,
    ChatOptions,
    build_params,
    chat_interactive,
    chat_once,
    load_tools,
    read_prompt,
    stdin_binary,
)
from protocol_py.client.client import ModelClient, parse_address
from protocol_py.codec import protojson
from protocol_py.errors import (
    InvalidValueError,
    ProtocolError,
    ValidationError,
    describe_json_error,
    errors_only,
)
from protocol_py.provider import Provider
from protocol_py.providers import (
    BUILTIN,
    ProviderLoadError,
    installed_providers,
    load_provider_class,
)
from protocol_py.rules.pricing import (
    RATE_FIELDS,
    PricingTable,
    cost,
    format_usd,
    parse_timestamp,
    validate_usage,
)
from protocol_py.rules.validation import load_document
from protocol_py.server import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    DEFAULT_RECEIVE_TIMEOUT,
    parse_size,
)
from protocol_py.server.serve import ServeError, configure_logging, serve
from protocol_py.transport.addresses import (
    add_client_options,
    add_serve_options,
    client_ssl_from_options,
    unix_socket_path,
)
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import ProducerRef
from protocol_py_gen.model.v1 import (
    Capabilities,
    Pricing,
    PricingTier,
    Usage,
)

_T = TypeVar("_T")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure reported as one line on stderr with an exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
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


def _size(text: str) -> int:

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text[:40]!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
    return value


def _positive_float(text: str) -> float:
    """A finite number >= 0 (``--grace-period``, ``--temperature``)."""
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text[:40]!r}")
    return value


def _deadline(text: str) -> float:
    """A finite number of seconds > 0 (``--timeout``: 0 would fail every call at once)."""
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text[:40]!r}")
    return value


def _timeout(text: str) -> float:
    value = _positive_float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _provider_help() -> str:
    installed = ", ".join(sorted(installed_providers())) or "none"
    return (
        f"built-in: {', '.join(BUILTIN)}; installed (entry points): {installed}; "
        "or module:Class or path/to/file.py:Class (default: %(default)s)"
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


_SERVER: Final = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
_SERVER_HELP: Final = (
    "the server's host:port ([v6]:port for IPv6) or unix:PATH (default %(default)s)"
)


def _add_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=_deadline,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="deadline of the call, seconds (default %(default)g)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``protocol-py`` (exposed for documentation and tests)."""

    parser = _Parser(
        prog="protocol-py",
        description=f"Model-provider plugin protocol {PROTOCOL_VERSION}: reference server, "
        "client and tools.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="serve ModelService for a provider")
    serve.add_argument("--provider", default="reference", help=_provider_help())
    serve.add_argument("--host", default=None, help=f"bind address ({DEFAULT_HOST})")
    serve.add_argument(
        "--port", type=int, default=None, help=f"port ({DEFAULT_PORT}); 0 picks a free one"
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
        "--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)"
    )
    serve.add_argument(
        "--max-message-size",
        type=_size,
        default=None,
        help="largest message in either direction: bytes or 1MiB/64MB (default 64MiB)",
    )
    serve.add_argument(
        "--grace-period",
        type=_positive_float,
        default=DEFAULT_GRACE_PERIOD,
        help=f"seconds in-flight streams get on SIGINT/SIGTERM ({DEFAULT_GRACE_PERIOD:g})",
    )
    serve.add_argument(
        "--receive-timeout",
        type=_timeout,
        default=DEFAULT_RECEIVE_TIMEOUT,
        metavar="SECONDS",
        help="time a call gets to send its whole request; slower ones get DEADLINE_EXCEEDED "
        f"({DEFAULT_RECEIVE_TIMEOUT:g})",
    )
    serve.add_argument(
        "--idle-timeout",
        type=_timeout,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help=f"close a connection with no open call for this long ({DEFAULT_IDLE_TIMEOUT:g})",
    )
    serve.add_argument("--base-url", default=None, help="upstream API root (HTTP providers)")
    serve.add_argument(
        "--discover", action="store_true", help="read the upstream model list at start-up"
    )

    chat = sub.add_parser("chat", help="stream one answer from a running server")
    chat.add_argument("--server", default=_SERVER, help=_SERVER_HELP)
    add_client_options(chat)
    chat.add_argument("--model", default=None, help="model id (default: the first served)")
    chat.add_argument("--system", default=None, help="system text (an assembled-context section)")
    chat.add_argument(
        "--timeout", type=_deadline, default=120.0, metavar="SECONDS", help="deadline, seconds"
    )
    chat.add_argument("--effort", default=None, help="thinking effort level (e.g. low, high)")
    chat.add_argument("--budget", type=_positive_int, default=None, help="thinking budget, tokens")
    chat.add_argument("--max-tokens", type=_positive_int, default=None, help="max output tokens")
    chat.add_argument("--temperature", type=_positive_float, default=None, help="temperature")
    chat.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop sequence (repeatable)"
    )
    chat.add_argument(
        "--tools",
        default=None,
        metavar="FILE.json",
        help="JSON array of tool declarations {name, description, inputSchema}",
    )
    chat.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        default=None,
        help="the prompt, '-' for stdin, @FILE for a file's text; omitted: an interactive "
        "session (one turn per line of stdin, /exit or end of input to quit)",
    )

    caps = sub.add_parser("capabilities", help="list the models a server serves")
    caps.add_argument("--server", default=_SERVER, help=_SERVER_HELP)
    add_client_options(caps)
    caps.add_argument("--json", action="store_true", help="proto3 JSON of the Capabilities")
    _add_timeout(caps)

    describe = sub.add_parser("describe", help="show a server's plugin identity")
    describe.add_argument("--server", default=_SERVER, help=_SERVER_HELP)
    add_client_options(describe)
    _add_timeout(describe)

    sub.add_parser("version", help="package and protocol version")

    validate = sub.add_parser("validate", help="validate a Capabilities/ModelSpec/Pricing JSON")
    validate.add_argument("file", metavar="FILE")

    cost = sub.add_parser("cost", help="price a Usage with a Pricing")
    cost.add_argument("--pricing", required=True, metavar="FILE", help="proto3-JSON Pricing")
    cost.add_argument("--usage", required=True, metavar="FILE", help="proto3-JSON Usage")
    cost.add_argument(
        "--at",
        default=None,
        help=(
            "receipt time (default: now): YYYY-MM-DD (00:00 UTC) or "
            "YYYY-MM-DDTHH:MM[:SS[.fraction]] with Z or +HH:MM/+HHMM/+HH (ISO 8601 extended "
            "format, RFC 3339; no basic format, week or ordinal dates, no surrounding spaces)"
        ),
    )
    cost.add_argument("--json", action="store_true", help="one JSON object")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``protocol-py``; returns (and, as a console script, exits with) the exit status."""
    args = build_parser().parse_args(argv)
    handlers = {
        "serve": cmd_serve,
        "chat": cmd_chat,
        "capabilities": cmd_capabilities,
        "describe": cmd_describe,
        "version": cmd_version,
        "validate": cmd_validate,
        "cost": cmd_cost,
    }
    try:
        return handlers[args.command](args)
    except CliError as exc:
        print(f"protocol-py {args.command}: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # never a traceback on the terminal
        print(
            f"protocol-py {args.command}: internal error: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return EXIT_FAILURE


# -- serve ---------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    """``serve``: :func:`protocol_py.server.serve.serve` until SIGINT/SIGTERM; exit 0 after a
    graceful shutdown."""

    try:
        configure_logging(args.log_level)
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
            handshake=args.handshake,
            grace_period=args.grace_period,
            max_message_size=args.max_message_size or DEFAULT_MAX_MESSAGE_SIZE,
            log_level=None,
            receive_timeout=args.receive_timeout,
            idle_timeout=args.idle_timeout,
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


# -- client commands ---------------------------------------------------------------------------


DEFAULT_TIMEOUT: Final = 30.0
"""Default deadline of ``describe`` and ``capabilities`` (``--timeout``), seconds."""

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
    down (retryable); otherwise the error and, before any answer, :func:`_lost_hint`."""
    if goaway_error_code(exc) == GOAWAY_NO_ERROR:
        return (
            f"connection to {address} closed: the server is shutting down (GOAWAY); retry "
            "when it is serving again"
        )
    return f"connection to {address} lost: {exc}{_lost_hint(client, tls, address)}"


def _lost_hint(client: ModelClient, tls: bool, address: str) -> str:
    """Why a connection may be lost before any answer (no Capabilities or Describe received
    yet): under TLS 1.3 the server's refusal of the client certificate shows up there, after
    the client's side of the handshake completed; a plaintext client of a TLS server on a TCP
    address sees its connection closed during the HTTP/2 preface."""
    if client._capabilities is not None or client._provider_name is not None:
        return ""
    if not tls and unix_socket_path(address) is not None:
        return ""
    if tls:
        return (
            " before any answer: the server may have refused this client's certificate (mutual "
            "TLS: --tls-cert/--tls-key issued by a CA the server trusts)"
        )
    return " before any answer: if the server uses TLS, connect with --tls or --tls-ca"


def _run_client(
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
        raise CliError(f"cannot connect to {address}: {exc.strerror or exc}") from None
    except GRPCError as exc:
        raise CliError(f"server answered {exc.status.name}: {exc.message or ''}") from None
    except StreamTerminatedError as exc:
        raise CliError(_lost(address, exc, *opened[0])) from None
    except ProtocolError as exc:
        raise CliError(str(exc)) from None


def cmd_chat(args: argparse.Namespace) -> int:
    """``chat``: stream one answer (see :mod:`protocol_py.cli.chat`), or without PROMPT an
    interactive multi-turn session reading stdin line by line."""
    try:
        prompt = read_prompt(args.prompt, stdin_binary())
        options = ChatOptions(
            model=args.model,
            system=args.system,
            timeout=args.timeout,
            params=build_params(
                effort=args.effort,
                budget=args.budget,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                stop=args.stop,
            ),
            tools=load_tools(args.tools) if args.tools else [],
        )
    except ChatError as exc:
        raise CliError(str(exc), exc.status) from None

    async def run(client: ModelClient) -> int:
        try:
            if prompt is None:
                return await chat_interactive(
                    client, options, stdin_binary(), sys.stdout, sys.stderr
                )
            return await chat_once(client, prompt, options, sys.stdout)
        except ChatError as exc:
            raise CliError(str(exc), exc.status) from None

    try:
        first_call = min(args.timeout, CAPABILITIES_TIMEOUT)  # a deadline escaping chat's own
        status: int = _run_client(run, args.server, args, first_call)
    except KeyboardInterrupt:
        print(file=sys.stdout, flush=True)
        raise CliError("cancelled (SIGINT)", EXIT_CANCELLED) from None
    return status


def _thinking_summary(spec: Any) -> str:
    thinking = spec.thinking
    if thinking is None or not thinking.supported:
        return "no"
    parts = []
    if thinking.effort is not None:
        parts.append(
            f"effort {'/'.join(thinking.effort.levels)} (default {thinking.effort.default})"
        )
    if thinking.budget is not None and thinking.budget.range is not None:
        parts.append(f"budget {thinking.budget.range.min}-{thinking.budget.range.max}")
    if thinking.adaptive_by_default:
        parts.append("adaptive")
    disable = thinking.disable.name.lower()
    if thinking.disable_allowed_efforts:
        disable += f" at {'/'.join(thinking.disable_allowed_efforts)}"
    parts.append(f"off: {disable}")
    return ", ".join(parts)


def _caching_summary(spec: Any) -> str:
    caching = spec.caching
    if caching is None or not caching.supported:
        return "no"
    kinds = [
        name
        for name, on in (
            ("explicit", caching.explicit_markers),
            ("implicit", caching.implicit_automatic),
        )
        if on
    ]
    return "+".join(kinds)


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return format_usd(Decimal(repr(value)))


def _rates_summary(tier: Any, window: Any = None) -> str:
    """``$IN in / $OUT out[ / $CR cache read] per Mtok`` (USD per million tokens) of a tier, or
    of one of its windows: each rate the window declares, else the tier's."""

    def rate(name: str) -> float | None:
        own = None if window is None else getattr(window, name)
        value: float | None = getattr(tier, name) if own is None else own
        return value

    text = f"${_rate(rate('input_per_mtok'))} in / ${_rate(rate('output_per_mtok'))} out"
    if (cache_read := rate("cache_read_per_mtok")) is not None:
        text += f" / ${_rate(cache_read)} cache read"
    return text + " per Mtok"


def _tier_place(tiers: Sequence[PricingTier], index: int, now: bool = True) -> str:
    """Which of several tiers applies, numbered from 1: ``"tier 2 of 2 now"`` when tiers differ
    by time (``now`` False: without the word, said elsewhere); ``"tier 1 of 2: prompts below
    200,000 tokens"`` when by prompt size (the range of input tokens, half-open, the shown
    rates cover); both when by both; ``""`` for a single tier."""
    if len(tiers) < 2:
        return ""
    tier = tiers[index]
    where = f"tier {index + 1} of {len(tiers)}"
    if now and any(t.effective_from or t.effective_until for t in tiers):
        where += " now"
    low, high = tier.input_tokens_from, tier.input_tokens_until
    if low and high is not None:
        where += f": prompts from {low:,} to below {high:,} tokens"
    elif high is not None:
        where += f": prompts below {high:,} tokens"
    elif low:
        where += f": prompts from {low:,} tokens"
    return where


def _pricing_summary(spec: Any, at: datetime | None = None) -> str:
    """The rates that apply at ``at`` (default now) to a prompt of 0 tokens: the tier's, or,
    while one of the tier's recurring windows holds ``at`` (protocol 1.1), the window's over the
    tier's, saying which window of how many (numbered from 1) and the tier's own rates."""
    pricing = spec.pricing
    if pricing is None:
        return "?"
    if pricing.free:
        return "free"
    try:
        index, window = PricingTable(pricing).resolve_window(at or datetime.now(UTC), 0)
    except (ValueError, ProtocolError):
        return "invalid"
    tier = pricing.tiers[index]
    where = _tier_place(pricing.tiers, index, now=not tier.windows)
    if not tier.windows:
        return _rates_summary(tier) + (f" ({where})" if where else "")
    count = len(tier.windows)
    windows = "recurring window" if count == 1 else "recurring windows"
    if window is None:
        where += f"{', ' if where else ''}outside its {count} {windows}"
        return f"now ({where}): {_rates_summary(tier)}"
    where += f"{', ' if where else ''}window {window + 1} of {count} {windows}"
    return (
        f"now ({where}): {_rates_summary(tier, tier.windows[window])}; "
        f"outside: {_rates_summary(tier)}"
    )


TABLE_WIDTH: Final = 100
"""Columns ``capabilities`` fits its table into (characters)."""


def capabilities_table(
    models: Sequence[Any], width: int = TABLE_WIDTH, at: datetime | None = None
) -> list[str]:
    """The ``capabilities`` table: one row per model (MODEL, CONTEXT and MAX OUT in tokens,
    CACHING, THINKING wrapped to the columns left), then an indented ``pricing:`` line (USD per
    million tokens at ``at``, default now: a recurring window's rates while it applies; tiers and
    windows numbered from 1), every line at most ``width`` characters."""
    head = ("MODEL", "CONTEXT", "MAX OUT", "CACHING")
    rows = [
        (m.id, str(m.context_window), str(m.max_output_tokens), _caching_summary(m)) for m in models
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    indent = sum(widths) + 2 * len(widths)
    room = max(20, width - indent)

    def line(cells: Sequence[str], last: str) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + "  " + last

    out = [line(head, "THINKING").rstrip()]
    pad = " " * (widths[0] + 2)
    for model, row in zip(models, rows, strict=True):
        thinking = textwrap.wrap(_thinking_summary(model), room, break_on_hyphens=False) or [""]
        out.append(line(row, thinking[0]).rstrip())
        out.extend((" " * indent + more).rstrip() for more in thinking[1:])
        pricing = f"pricing (USD): {_pricing_summary(model, at)}"
        out.extend(textwrap.wrap(pricing, width, initial_indent=pad, subsequent_indent=pad + "  "))
    return out


def cmd_capabilities(args: argparse.Namespace) -> int:
    """``capabilities``: :func:`capabilities_table` (fits 100 columns), or ``--json``."""
    caps: Capabilities = _run_client(
        lambda client: client.get_capabilities(timeout=args.timeout),
        args.server,
        args,
        args.timeout,
    )
    if args.json:
        print(protojson.dumps(caps, indent=2))
        return EXIT_OK
    for line in capabilities_table(caps.models):
        print(line)
    print(f"protocol {caps.protocol_version}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    """``describe``: the plugin's name, version, source, category and protocol version."""
    producer: ProducerRef = _run_client(
        lambda client: client.describe(timeout=args.timeout), args.server, args, args.timeout
    )
    print(f"name:             {producer.name}")
    print(f"version:          {producer.version}")
    print(f"source:           {producer.source or '-'}")
    print(f"category:         {producer.category.name.lower()}")
    print(f"protocol_version: {producer.protocol_version}")
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    """``version``: ``protocol-py <package version> (protocol <MAJOR.MINOR>)``."""
    print(f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})")
    return EXIT_OK


# -- offline commands --------------------------------------------------------------------------


_UNDETERMINED: Final = {
    "file.unreadable": "cannot read",
    "file.not_json": "not valid JSON",
    "document.not_object": "not a JSON object",
    "document.unknown_kind": "not a Capabilities, ModelSpec or Pricing",
}
"""``validate``'s summary, by rule id, for a file whose document kind could not be
determined."""


def cmd_validate(args: argparse.Namespace) -> int:
    """``validate FILE``: print every violation as ``path: rule_id: message`` (a warning ends
    with `` (warning)``); exit 1 if any has error severity (warnings are printed but do not
    fail). JSON problems and rule violations are reported together
    (:func:`protocol_py.rules.validation.validate_document`)."""

    kind, violations = load_document(args.file)
    for violation in violations:
        print(f"{violation} (warning)" if violation.severity == "warning" else str(violation))
    errors = errors_only(violations)
    if errors:
        if kind == "unknown":  # say why no document kind could be determined
            kind = _UNDETERMINED.get(errors[0].rule, "document kind not determined")
        print(f"{args.file}: {kind}: {len(errors)} error(s)", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{args.file}: valid {kind}", file=sys.stderr)
    return EXIT_OK


def _read_json(path: str, what: str) -> Any:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise CliError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None

    def reject(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        plain = json.loads(raw, parse_constant=reject)
        exact = json.loads(raw, parse_float=Decimal, parse_int=Decimal, parse_constant=reject)
    except json.JSONDecodeError as exc:
        raise CliError(f"{what} {path}: not valid JSON: {describe_json_error(exc)}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CliError(f"{what} {path}: not valid JSON: {exc}") from None
    if not isinstance(plain, dict):
        raise CliError(f"{what} {path}: expected a JSON object")
    return plain, exact


_TIER_KEYS = protojson.field_keys(PricingTier)


def _check_exact_rates(exact: Any, path: str) -> None:
    """Reject a rate whose JSON text a double cannot carry exactly (DESIGN D8, case C13).

    Rates are doubles on the wire and cost uses ``Decimal(repr(rate))``, which equals the JSON
    text for every shortest-repr number (``0.15``, ``3``, ``"0.6"``). A rate written with more
    digits than a double holds (``0.1000000000000000000001``) would be silently rounded, so it is
    refused instead.
    """
    tiers = exact.get("tiers") if isinstance(exact, dict) else None
    if not isinstance(tiers, list):
        return
    for i, tier in enumerate(tiers):
        if not isinstance(tier, dict):
            continue
        for name, value in tier.items():
            if _TIER_KEYS.get(name) not in RATE_FIELDS:
                continue
            try:
                text = Decimal(value) if isinstance(value, str | Decimal) else None
            except ArithmeticError:
                continue  # the decoder reports malformed values
            if text is None or not text.is_finite():
                continue
            if Decimal(repr(float(text))) != text:
                raise CliError(
                    f"{path}: tiers[{i}].{name}: {value} cannot be carried exactly by a double "
                    f"(nearest is {float(text)!r}); write the rate with at most 17 "
                    "significant digits",
                )


def _usage_rule_problems(usage: Usage, pruned: Sequence[str]) -> list[Any]:
    """:func:`~protocol_py.rules.pricing.validate_usage`'s violations with paths as the JSON
    problems
    name them (``input_tokens``), leaving out fields that did not decode (already reported)."""
    found = []
    for violation in validate_usage(usage):
        path = violation.path.removeprefix("usage.")
        if path not in pruned:
            found.append(replace(violation, path=path))
    return found


def cmd_cost(args: argparse.Namespace) -> int:
    """``cost``: price a proto3-JSON Usage with a proto3-JSON Pricing at ``--at`` (default
    now); the breakdown as text, or with ``--json`` one object ``{tier_index, terms,
    total_usd, ...}`` whose amounts are exact decimal strings."""

    if args.at is not None and not args.at.strip():
        raise CliError("--at: empty; expected an ISO 8601 date or date-time", EXIT_USAGE)
    try:
        at = parse_timestamp(args.at, path="--at") if args.at is not None else datetime.now(UTC)
    except ValueError as exc:
        message = str(exc)
        if not message.startswith("--at"):
            message = f"--at: {message}"
        raise CliError(message, EXIT_USAGE) from None
    pricing_plain, pricing_exact = _read_json(args.pricing, "--pricing")
    usage_plain, _ = _read_json(args.usage, "--usage")
    _check_exact_rates(pricing_exact, args.pricing)
    pricing, problems = protojson.decode(Pricing, pricing_plain)
    usage, usage_problems, pruned = protojson.decode_lenient(Usage, usage_plain)
    if usage is not None:  # the rules too, on the fields that decoded: every problem at once
        usage_problems = [*usage_problems, *_usage_rule_problems(usage, pruned)]
    bad = [f"{args.pricing}: {v}" for v in problems] + [
        f"{args.usage}: {v}" for v in usage_problems
    ]
    if bad or pricing is None or usage is None:
        raise CliError(f"invalid input: {len(bad)} error(s): " + "; ".join(bad))
    try:
        breakdown = cost(pricing, usage, at)
    except ValidationError as exc:
        lines = "; ".join(str(v) for v in exc.violations)
        raise CliError(
            f"invalid pricing {args.pricing}: {len(exc.violations)} error(s): {lines}"
        ) from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps(breakdown.to_json(), ensure_ascii=False))
    else:
        print(breakdown.render_text())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
