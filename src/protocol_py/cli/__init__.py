"""The ``protocol-py`` command line: ``serve``, ``chat``, ``describe``, ``capabilities``,
``validate``, ``cost`` and ``version``."""

from protocol_py.cli.app import (
    CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    TABLE_WIDTH,
    CliError,
    build_parser,
    capabilities_table,
    cmd_capabilities,
    cmd_chat,
    cmd_cost,
    cmd_describe,
    cmd_serve,
    cmd_validate,
    cmd_version,
    main,
)

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
"""``main`` and ``build_parser``, and the other names the 1.1 module ``protocol_py.cli`` had."""
