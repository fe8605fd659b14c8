"""The ``protocol-py`` command line.

Subcommands::

    protocol-py serve [--provider NAME] [--host H] [--port P] [--handshake] [--log-level L]
                      [--max-message-size SIZE] [--grace-period S] [--receive-timeout S]
                      [--idle-timeout S] [--base-url URL] [--discover]
    protocol-py chat [--server H:P] [--model ID] [--system TEXT] [--timeout S] PROMPT
    protocol-py capabilities [--server H:P] [--json]
    protocol-py describe [--server H:P]
    protocol-py version
    protocol-py validate FILE
    protocol-py cost --pricing FILE --usage FILE [--at ISO8601] [--json]

Exit status: 0 success; 1 a failure (invalid document, unreachable server, in-band error,
refused start-up); 2 bad usage or unreadable input. Errors go to stderr as one clear line,
never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NoReturn, TextIO, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from ulid import ULID

from protocol_py import protojson
from protocol_py.accumulate import StreamAccumulator
from protocol_py.client import ModelClient
from protocol_py.errors import ProtocolError, ValidationError, errors_only
from protocol_py.pricing import RATE_FIELDS, PricingTable, cost, format_usd, parse_timestamp
from protocol_py.providers import provider_class
from protocol_py.server import (
    DEFAULT_GRACE_PERIOD,
    DEFAULT_HOST,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    DEFAULT_RECEIVE_TIMEOUT,
    LogFormatter,
    ModelServer,
    parse_size,
)
from protocol_py.validation import load_document
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_MAJOR, PROTOCOL_VERSION
from protocol_py_gen.common.v1 import CallContext, ProducerRef
from protocol_py_gen.content.v1 import ContentBlock, ContextSection, Message, Role, TextBlock
from protocol_py_gen.model.v1 import (
    Capabilities,
    Pricing,
    PricingTier,
    StreamCompletionRequest,
    StreamEvent,
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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def _timeout(text: str) -> float:
    value = _positive_float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``protocol-py`` (exposed for documentation and tests)."""

    parser = _Parser(
        prog="protocol-py",
        description=f"Model-provider plugin protocol {PROTOCOL_VERSION}: reference server, "
        "client and tools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser("serve", help="serve ModelService for a built-in provider")
    serve.add_argument("--provider", default="reference", help="built-in provider name")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"bind address ({DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port; 0 picks a free one")
    serve.add_argument(
        "--handshake",
        action="store_true",
        help="print '<protocol major>|tcp|<host>:<port>|grpc' on stdout once serving",
    )
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
    chat.add_argument("--server", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", help="host:port")
    chat.add_argument("--model", default=None, help="model id (default: the first served)")
    chat.add_argument("--system", default=None, help="system text (an assembled-context section)")
    chat.add_argument("--timeout", type=_positive_float, default=120.0, help="deadline, seconds")
    chat.add_argument("prompt", metavar="PROMPT")

    caps = sub.add_parser("capabilities", help="list the models a server serves")
    caps.add_argument("--server", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", help="host:port")
    caps.add_argument("--json", action="store_true", help="proto3 JSON of the Capabilities")

    describe = sub.add_parser("describe", help="show a server's plugin identity")
    describe.add_argument("--server", default=f"{DEFAULT_HOST}:{DEFAULT_PORT}", help="host:port")

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
    """``serve``: run the server until SIGINT/SIGTERM; exit 0 after a graceful shutdown."""

    level = str(args.log_level).upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise CliError(f"invalid --log-level {args.log_level!r}", EXIT_USAGE)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    if not 0 <= args.port < 65536:
        raise CliError(f"invalid --port {args.port}: must be in 0..65535", EXIT_USAGE)
    try:
        cls = provider_class(args.provider)
        provider = cls.from_cli(base_url=args.base_url, discover=args.discover, env=os.environ)
    except (ValueError, TypeError, ImportError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    server = ModelServer(
        provider,
        max_message_size=args.max_message_size or DEFAULT_MAX_MESSAGE_SIZE,
        grace_period=args.grace_period,
        receive_timeout=args.receive_timeout,
        idle_timeout=args.idle_timeout,
    )
    return asyncio.run(_serve(server, args.host, args.port, args.handshake))


async def _serve(server: Any, host: str, port: int, handshake: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    force = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            force.set()  # a second signal: stop waiting for in-flight streams
        stop.set()

    def handler(signum: int, frame: object) -> None:
        # A plain signal handler runs before the event loop handles anything else, so no
        # health Check can be answered SERVING after the signal arrived (case C04).
        server.mark_draining()
        loop.call_soon_threadsafe(on_signal)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            await server.start(host, port)
        except ValidationError as exc:
            raise CliError(f"refusing to start: {exc}") from None
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        logging.getLogger("protocol_py.server").info(
            "serving %s on %s (protocol %s)", server.provider.name, server.address, PROTOCOL_VERSION
        )
        if handshake:
            sys.stdout.write(f"{PROTOCOL_MAJOR}|tcp|{server.address}|grpc\n")
            sys.stdout.flush()
        await stop.wait()
        logging.getLogger("protocol_py.server").info("shutting down (draining)")
        shutdown = asyncio.ensure_future(server.shutdown())
        forced = asyncio.ensure_future(force.wait())
        done, _ = await asyncio.wait({shutdown, forced}, return_when=asyncio.FIRST_COMPLETED)
        forced.cancel()
        if shutdown not in done:
            shutdown.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await shutdown
            await server.shutdown(grace_period=0)
        logging.getLogger("protocol_py.server").info("stopped")
        return EXIT_OK
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# -- client commands ---------------------------------------------------------------------------


def _run_client(action: Callable[[ModelClient], Awaitable[_T]], address: str) -> _T:
    """Connect to ``address`` inside a fresh event loop, run ``action``, always close."""

    async def run() -> _T:
        try:
            client = ModelClient.connect(address)
        except ValueError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None
        try:
            return await action(client)
        finally:
            client.close()

    try:
        return asyncio.run(run())
    except TimeoutError:
        raise CliError(f"deadline exceeded talking to {address}") from None
    except (ConnectionError, OSError) as exc:
        raise CliError(f"cannot connect to {address}: {exc.strerror or exc}") from None
    except GRPCError as exc:
        raise CliError(f"server answered {exc.status.name}: {exc.message or ''}") from None
    except StreamTerminatedError as exc:
        raise CliError(f"connection to {address} lost: {exc}") from None
    except ProtocolError as exc:
        raise CliError(str(exc)) from None


def _style(stream: TextIO, code: str, text: str) -> str:
    if stream.isatty() and not os.environ.get("NO_COLOR"):
        return f"\x1b[{code}m{text}\x1b[0m"
    return text


def cmd_chat(args: argparse.Namespace) -> int:
    """``chat``: stream one answer; thinking dim (or ``[thinking]``-prefixed), then a
    ``tokens: ... cost: ... USD`` line."""
    status: int = _run_client(lambda client: _chat(client, args), args.server)
    return status


async def _chat(client: ModelClient, args: argparse.Namespace) -> int:
    out = sys.stdout
    timeout: float = args.timeout
    caps = await client.get_capabilities(timeout=timeout)
    if not caps.models:
        raise CliError("the server serves no models")
    model_id = args.model or caps.models[0].id
    spec = next((m for m in caps.models if m.id == model_id), None)
    if spec is None:
        served = ", ".join(m.id for m in caps.models)
        raise CliError(f"unknown model {model_id!r}; served: {served}", EXIT_USAGE)
    context = []
    if args.system:
        context.append(
            ContextSection(
                provider="protocol-py-cli",
                label="system",
                content=[ContentBlock(text=TextBlock(text=args.system))],
            )
        )
    request = StreamCompletionRequest(
        model_id=model_id,
        messages=[
            Message(
                role=Role.USER,
                id=str(ULID()),
                content=[ContentBlock(text=TextBlock(text=args.prompt))],
            )
        ],
        assembled_context=context,
        call_context=CallContext(
            session_id=str(ULID()), turn_id=str(ULID()), working_directory=os.getcwd()
        ),
    )
    accumulator = StreamAccumulator(produced_by_model_id=model_id)
    received_at: datetime | None = None
    mode = ""
    events = 0
    try:
        async for event in client.stream(request, timeout=args.timeout):
            events += 1
            mode, received = _show_event(out, event, mode)
            accumulator.feed(event)
            received_at = received or received_at
    except (TimeoutError, GRPCError) as exc:
        if isinstance(exc, GRPCError) and exc.status is not Status.DEADLINE_EXCEEDED:
            raise
        if events == 0:
            raise CliError(f"deadline of {timeout:g}s passed before the first event") from None
        out.write("\n")
        out.flush()
        partial = accumulator.result()
        text = sum(len(b.text.text) for b in partial.message.content if b.text is not None)
        raise CliError(
            f"deadline of {timeout:g}s passed mid-stream after {events} event(s) "
            f"({text} characters of text, no stop event); the answer above is incomplete"
        ) from None
    out.write("\n")
    result = accumulator.result()
    if result.error is not None:
        print(
            f"error: {result.error.kind.name}: {result.error.message}",
            file=sys.stderr,
        )
    summary = []
    usage = result.usage
    if usage is not None:
        cached = ""
        if usage.cache_read_tokens or usage.cache_write_tokens:
            cached = (
                f" (cache read {usage.cache_read_tokens or 0},"
                f" cache write {usage.cache_write_tokens or 0})"
            )
        reasoning = f" (reasoning {usage.reasoning_tokens})" if usage.reasoning_tokens else ""
        summary.append(
            f"tokens: input {usage.input_tokens}{cached}, output {usage.output_tokens}{reasoning}"
        )
        if spec.pricing is not None:
            breakdown = cost(spec.pricing, usage, received_at or datetime.now(UTC))
            summary.append(f"cost: {breakdown.total_usd()} USD")
    if result.stop is not None:
        reason = result.stop.reason.name.lower()
        if result.stop.matched_stop_sequence is not None:
            reason += f" {result.stop.matched_stop_sequence!r}"
        summary.append(f"stop: {reason}")
    print("; ".join(summary) if summary else "no usage reported", file=out)
    return EXIT_FAILURE if result.error is not None or not result.complete else EXIT_OK


def _show_event(out: TextIO, event: StreamEvent, mode: str) -> tuple[str, datetime | None]:
    """Print one event of ``chat``; returns the new display mode and, for a usage event, the
    time it was received (UTC)."""
    received_at: datetime | None = None
    if event.thinking_delta is not None:
        if mode != "thinking":
            out.write(_style(out, "2", "[thinking] "))
            mode = "thinking"
        out.write(_style(out, "2", event.thinking_delta.text))
    elif event.text_delta is not None:
        if mode == "thinking":
            out.write("\n")
        mode = "text"
        out.write(event.text_delta.text)
    elif event.tool_call_start is not None:
        out.write(_style(out, "36", f"\n[tool call {event.tool_call_start.name}("))
        mode = "tool"
    elif event.tool_call_delta is not None:
        out.write(_style(out, "36", event.tool_call_delta.arguments_fragment))
    elif event.tool_call_done is not None:
        out.write(_style(out, "36", ")]"))
    elif event.usage is not None:
        received_at = datetime.now(UTC)
    out.flush()
    return mode, received_at


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


def _pricing_summary(spec: Any) -> str:

    pricing = spec.pricing
    if pricing is None:
        return "?"
    if pricing.free:
        return "free"
    try:
        index, tier = PricingTable(pricing).resolve(datetime.now(UTC), 0)
    except (ValueError, ProtocolError):
        return "invalid"
    text = f"${_rate(tier.input_per_mtok)} in / ${_rate(tier.output_per_mtok)} out"
    if tier.cache_read_per_mtok is not None:
        text += f" / ${_rate(tier.cache_read_per_mtok)} cache read"
    text += " per Mtok"
    if len(pricing.tiers) > 1:
        text += f" (tier {index} of {len(pricing.tiers)} now)"
    return text


def cmd_capabilities(args: argparse.Namespace) -> int:
    """``capabilities``: a table of models (thinking, caching, pricing now), or ``--json``."""
    caps: Capabilities = _run_client(
        lambda client: client.get_capabilities(timeout=30), args.server
    )
    if args.json:
        print(protojson.dumps(caps, indent=2))
        return EXIT_OK
    rows = [("MODEL", "CONTEXT", "MAX OUT", "THINKING", "CACHING", "PRICING (USD)")]
    rows.extend(
        (
            m.id,
            str(m.context_window),
            str(m.max_output_tokens),
            _thinking_summary(m),
            _caching_summary(m),
            _pricing_summary(m),
        )
        for m in caps.models
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        print("  ".join([*cells, row[-1]]))
    print(f"protocol {caps.protocol_version}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    """``describe``: the plugin's name, version, source, category and protocol version."""
    producer: ProducerRef = _run_client(lambda client: client.describe(timeout=30), args.server)
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


def cmd_validate(args: argparse.Namespace) -> int:
    """``validate FILE``: print every violation as ``path: rule_id: message`` (a warning ends
    with `` (warning)``); exit 1 if any has error severity (warnings are printed but do not
    fail). JSON problems and rule violations are reported together
    (:func:`protocol_py.validation.validate_document`)."""

    kind, violations = load_document(args.file)
    for violation in violations:
        print(f"{violation} (warning)" if violation.severity == "warning" else str(violation))
    errors = errors_only(violations)
    if errors:
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
    usage, usage_problems = protojson.decode(Usage, usage_plain)
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
