"""docs/cli.md's ``serve`` table names every option of the ``serve`` parser, and no other, with
its default; the usage line above it names every option too."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from protocol_py.cli import build_parser
from protocol_py.server import DEFAULT_MAX_MESSAGE_SIZE, parse_size
from protocol_py.transport.addresses import DEFAULT_HOST, DEFAULT_PORT

REPO_ROOT = Path(__file__).resolve().parents[2]


def _serve_parser() -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]
    raise AssertionError("no serve subcommand")


def _section() -> str:
    text = (REPO_ROOT / "docs/cli.md").read_text()
    start = text.index("## `serve`")
    return text[start : text.index("\n## ", start + 1)]


def _table() -> dict[str, str]:
    """Option string -> the default cell of its row."""
    rows: dict[str, str] = {}
    for line in _section().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`--"):
            continue
        for option in re.findall(r"--[a-z0-9-]+", cells[0]):
            rows[option] = cells[1]
    return rows


def _options() -> dict[str, argparse.Action]:
    found: dict[str, argparse.Action] = {}
    for action in _serve_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                found[option] = action
    return found


def test_the_serve_table_lists_exactly_the_parsers_options() -> None:
    assert sorted(_table()) == sorted(_options())


def test_the_serve_usage_line_names_every_option() -> None:
    usage = next(line for line in _section().splitlines() if line.startswith("`protocol-py serve"))
    named = set(re.findall(r"--[a-z0-9-]+", usage))
    assert named == set(_options())


RESOLVED_LATER = {
    "--host": DEFAULT_HOST,
    "--port": DEFAULT_PORT,
    "--max-message-size": DEFAULT_MAX_MESSAGE_SIZE,
}
"""Options whose parser default is None because serve resolves it later, and what it becomes."""


def test_each_row_states_the_default_serve_uses() -> None:
    table = _table()
    for option, action in _options().items():
        cell = table[option]
        default = RESOLVED_LATER.get(option, action.default)
        assert cell, option
        if option == "--max-message-size":
            assert parse_size(cell.replace(" ", "")) == default
        elif isinstance(default, bool) or default is None:
            assert cell not in ("", "-"), option  # off / none / the vendor's / a rule in words
        elif isinstance(default, int | float):
            assert re.match(rf"`?{default:g}`?( s)?$", cell), (option, cell, default)
        else:
            assert cell == f"`{default}`", (option, cell, default)
