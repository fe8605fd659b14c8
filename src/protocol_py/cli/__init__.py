"""The ``protocol-py`` command line.

Subcommands::

    protocol-py serve [--provider NAME] [--host H] [--port P | --socket PATH] [--handshake]
                      [--tls-cert F --tls-key F [--tls-client-ca F]] [--log-level L]
                      [--max-message-size SIZE] [--grace-period S] [--receive-timeout S]
                      [--idle-timeout S] [--write-timeout S] [--memory-budget SIZE|off]
                      [--base-url URL] [--discover]
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
take). Errors go to stderr as one clear line, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Sequence

from protocol_py.cli.chat import add_chat_parser, cmd_chat
from protocol_py.cli.documents import add_cost_parser, add_validate_parser, cmd_cost, cmd_validate
from protocol_py.cli.inspect import (
    TABLE_WIDTH,
    add_capabilities_parser,
    add_describe_parser,
    add_version_parser,
    capabilities_table,
    cmd_capabilities,
    cmd_describe,
    cmd_version,
)
from protocol_py.cli.options import (
    CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Parser,
)
from protocol_py.cli.serve import add_serve_parser, cmd_serve
from protocol_py.version import PACKAGE_VERSION, PROTOCOL_VERSION


def build_parser() -> Parser:
    """The argparse parser of ``protocol-py`` (exposed for documentation and tests)."""

    parser = Parser(
        prog="protocol-py",
        description=f"Model-provider plugin protocol {PROTOCOL_VERSION}: reference server, "
        "client and tools.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"protocol-py {PACKAGE_VERSION} (protocol {PROTOCOL_VERSION})",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    add_serve_parser(sub)
    add_chat_parser(sub)
    add_capabilities_parser(sub)
    add_describe_parser(sub)
    add_version_parser(sub)
    add_validate_parser(sub)
    add_cost_parser(sub)
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
        _say(f"protocol-py {args.command}: {exc}")
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_FAILURE
    except Exception as exc:  # never a traceback on the terminal
        _say(f"protocol-py {args.command}: internal error: {type(exc).__name__}: {exc}")
        return EXIT_FAILURE


def _say(line: str) -> None:
    """Print ``line`` on stderr after the log lines still queued for it (each handler's flush
    waits a bounded time: :data:`protocol_py.server.log_writer.FLUSH_TIMEOUT`)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(line, file=sys.stderr)


__all__ = [
    "CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_USAGE",
    "TABLE_WIDTH",
    "CliError",
    "build_parser",
    "capabilities_table",
    "cmd_capabilities",
    "cmd_chat",
    "cmd_cost",
    "cmd_describe",
    "cmd_serve",
    "cmd_validate",
    "cmd_version",
    "main",
]
"""``main`` and ``build_parser``, and the names the 1.1 module ``protocol_py.cli`` had (each
defined in the command's own module)."""
